"""scaler_top's actor table and the actors column of its worker table, rendered without a terminal from statuses that
went through the real codec."""

from __future__ import annotations

import re
from typing import List

import pytest

from scaler.monitor.actors import actor_rows, short_actor_id
from scaler.monitor.model import RateMeter
from scaler.monitor.top import TopState, render, render_text
from scaler.protocol import ActorStatus
from tests.monitor.statuses import status, worker

ADDRESS = "ipc:///tmp/example_monitor"
PREFIX = bytes.fromhex("a1b2c3d4e5f60718")  # a client's ids: its random prefix, then a little-endian counter


def actor(number: int, name: str = "Counter", worker: str = "W|host|100|aa", **fields: int) -> ActorStatus:
    return ActorStatus(actor_id=PREFIX + number.to_bytes(8, "little"), name=name, worker=worker, **fields)


ACTORS = [
    actor(3, "Counter", pending=2, calls=1234),
    actor(4, "PricingModel.Cache", "W|host|200|bb", calls=5),
    actor(5, "Counter", "", pending=7),  # waiting for a free actor slot
]
WORKERS = [worker("W|host|100|aa", actors=2), worker("W|host|200|bb", actors=1), worker("W|host|300|cc")]


def screen(width: int = 160, height=None, **state: object) -> str:
    defaults = dict(status=status(WORKERS, actors=ACTORS), silence_seconds=0.4)
    defaults.update(state)
    return render_text(TopState(ADDRESS, 5.0, **defaults), width, height)  # type: ignore[arg-type]


def actor_table(text: str) -> List[str]:
    """The actor table: its header line, then one line per actor."""
    lines = text.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("Total ") and "actor(s)" in line)
    return lines[start + 1 :]


def test_each_actor_has_a_row_with_its_class_id_calls_and_worker():
    text = screen(actor_calls_per_second={ACTORS[0].actor_id: 12.4})
    assert "Total 3 actor(s), 1 waiting for a slot" in text
    header, *rows = actor_table(text)
    assert header.split() == ["actor", "id", "pending", "calls", "calls/s", "worker"]
    assert [row.split() for row in rows] == [
        ["Counter", "f6071805", "7", "0", "-", "waiting", "for", "a", "slot"],
        ["Counter", "f6071803", "2", "1,234", "12", "W|host|100|aa"],
        ["PricingModel.Cache", "f6071804", "0", "5", "-", "W|host|200|bb"],
    ]


def test_the_short_id_is_part_of_the_hex_that_handles_and_errors_print():
    ids = [short_actor_id(PREFIX + number.to_bytes(8, "little")) for number in (1, 2, 255, 256, 70_000)]
    assert len(set(ids)) == len(ids) and all(len(short) == 8 for short in ids)
    assert all(short in (PREFIX + number.to_bytes(8, "little")).hex() for short, number in zip(ids, (1, 2, 255, 256)))
    assert short_actor_id(b"\x12\x34") == "1234"


def test_workers_get_an_actors_column_once_one_hosts_an_actor():
    plain = screen(status=status(WORKERS[2:]))
    header = next(line for line in plain.splitlines() if "agt_cpu" in line and "ITL" in line)
    assert "actors" not in header and "actor(s)" not in plain, "a cluster without actors looks as before"
    lines = screen(sort_key="n").splitlines()
    header = next(line for line in lines if "agt_cpu" in line and "ITL" in line)
    assert header.split()[-2:] == ["actors", "ITL"]
    assert [line.split()[-2] for line in lines if line.startswith("W|")] == ["2", "1", "0"]


def test_actors_column_sorts_by_key_a():
    lines = screen(sort_key="a").splitlines()
    header = next(line for line in lines if "agt_cpu" in line and "ITL" in line)
    assert [cell for cell in header.split() if cell.startswith("*")] == ["*actors"]
    names = [line.split()[0] for line in lines if line.startswith("W|")]
    assert names == ["W|host|100|aa", "W|host|200|bb", "W|host|300|cc"]


@pytest.mark.parametrize("width", [80, 60, 40])
def test_narrow_terminal_cuts_long_names_with_a_mark(width: int):
    long_class = "Outer.<locals>." + "VeryLongActorClassName" * 3
    long_worker = "W|" + "a-very-long-host-name" * 3 + "|4242|0123456789ab"
    text = screen(width, status=status(WORKERS, actors=[actor(9, long_class, long_worker, calls=3)]))
    assert all(len(line) <= width for line in text.splitlines())
    header, row = actor_table(text)
    assert header.startswith("actor ") and row.startswith("Outer.<loca")
    assert long_class not in row and "+" in row
    assert re.search(r" [0-9a-f]{8} ", row), "the id shows, whatever the width"


def test_short_terminal_counts_hidden_workers_and_actors():
    full = screen().splitlines()
    only_actors_hidden = render(TopState(ADDRESS, 5.0, status=status(WORKERS, actors=ACTORS)), 160, len(full) - 1)
    assert only_actors_hidden[-1].text == "... 2 actor(s) not shown: enlarge the terminal"
    table_start = next(index for index, line in enumerate(full) if line.startswith("Total 3 worker(s)"))
    both_hidden = render(TopState(ADDRESS, 5.0, status=status(WORKERS, actors=ACTORS)), 160, table_start + 4)
    assert both_hidden[-1].text == "... 2 worker(s), 3 actor(s) not shown: enlarge the terminal"
    assert both_hidden[-1].style == "alert"


def test_calls_per_second_from_the_scheduler_clock():
    meter = RateMeter()
    meter.update(status(actors=[actor(1, calls=10)], time_us=10_000_000))
    assert meter.actor_calls_per_second == {}
    meter.update(status(actors=[actor(1, calls=50), actor(2, calls=3)], time_us=12_000_000))
    assert meter.actor_calls_per_second == {actor(1).actor_id: 20.0}, "a new actor has no earlier count"
    (row, new) = actor_rows(status(actors=[actor(1, calls=50), actor(2)]).actors, meter.actor_calls_per_second)
    assert (row.calls_per_second, new.calls_per_second) == ("20", "-")
