"""Internal: `scaler_top MONITOR_ADDRESS`: a top-like terminal view of a scheduler, its workers and its actors.

render() turns what is known into lines of text and is all the layout there is; the curses loop below only draws
those lines, reads keys and follows resizes, so the screen can be tested without a terminal.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from scaler.config import SETTINGS
from scaler.monitor.actors import ACTOR_COLUMNS, ActorRow, actor_rows, actors_total
from scaler.monitor.model import (
    DEFAULT_SORT_KEY,
    ITL_HEADER,
    MEMORY_PAUSED_MARK,
    OPTIONAL_COLUMNS,
    REGISTERED_AGAIN_MARK,
    RETIRING_MARK,
    SORT_KEYS,
    WORKER_COLUMNS,
    Section,
    check_sort_key,
    format_flags,
    memory_paused,
    no_status_message,
    resource_classes,
    shortcuts_text,
    sorted_workers,
    status_sections,
)
from scaler.protocol import SchedulerStatus, WorkerStatus
from scaler.settings_spec import MONITOR, HelpFormatter

_REDRAW_MILLISECONDS = 250  # how long a key read waits: the "updated ... ago" clock and new statuses show this fast
_BLOCK_SEPARATOR = " | "
_MIN_NAME_WIDTH = 12


@dataclass
class TopState:
    """Everything the screen shows; changed by the loop (new status, key presses), read by render()."""

    address: str
    timeout_seconds: float
    sort_key: str = DEFAULT_SORT_KEY
    status: Optional[SchedulerStatus] = None
    silence_seconds: float = 0.0  # since the last status, or since connecting
    tasks_per_second: Optional[float] = None
    actor_calls_per_second: Dict[bytes, float] = field(default_factory=dict)  # by actor id


class Line(NamedTuple):
    text: str
    style: str = ""  # "", "title" (section and column headers) or "alert" (no status)


def render(state: TopState, width: int, height: Optional[int] = None) -> List[Line]:
    """The whole screen for a terminal `width` columns wide and `height` rows high (None: as long as it takes)."""
    if width < 1:
        raise ValueError(f"width must be at least 1, got {width}")
    timed_out = state.silence_seconds > state.timeout_seconds
    lines: List[Line] = []
    if timed_out:
        message = no_status_message(
            state.address, state.silence_seconds, state.timeout_seconds, state.status is not None
        )
        lines += [Line(part, "alert") for part in textwrap.wrap(message, width)]
    if state.status is None:
        if not timed_out:
            lines.append(Line(f"waiting for the first status from {state.address} ..."))
        return _fit(lines, width, height)
    status = state.status
    if not timed_out:
        lines.append(Line(f"scaler_top {state.address}   updated {state.silence_seconds:.1f}s ago"))
    lines.append(Line(""))
    lines += _blocks(status_sections(status, state.tasks_per_second), width)
    lines.append(Line("-" * width))
    lines += [Line(part) for part in textwrap.wrap(shortcuts_text(), width)]  # whole, on a narrow terminal too
    lines.append(Line(""))
    again = sum(1 for worker in status.workers if worker.previous_registrations)
    retiring = sum(1 for worker in status.workers if worker.retiring)
    paused = sum(1 for worker in status.workers if memory_paused(worker))
    lines.append(
        Line(
            f"Total {len(status.workers)} worker(s)"
            + (f", {retiring} retiring ({RETIRING_MARK})" if retiring else "")
            + (f", {paused} paused (memory) ({MEMORY_PAUSED_MARK})" if paused else "")
            + (f", {again} registered again after a lost scheduler ({REGISTERED_AGAIN_MARK})" if again else "")
        )
    )
    for offer, count in resource_classes(status.workers):  # few: one per distinct scaler_cluster --resources
        lines += [Line(part) for part in textwrap.wrap(f"  {count} worker(s) offer {{{offer}}}", width)]
    tables = [_Rows("worker(s)", len(lines) + 1, len(status.workers))]  # +1: the header
    lines += _worker_table(sorted_workers(status.workers, state.sort_key), state.sort_key, width)
    if status.actors:  # below the workers, which matter more on a short terminal: most clusters have no actor
        lines += [Line(""), Line(actors_total(status.actors))]
        tables.append(_Rows("actor(s)", len(lines) + 1, len(status.actors)))
        lines += _actor_table(actor_rows(status.actors, state.actor_calls_per_second), width)
    return _fit(lines, width, height, tables)


def render_text(state: TopState, width: int, height: Optional[int] = None) -> str:
    return "\n".join(line.text.rstrip() for line in render(state, width, height))


class _Rows(NamedTuple):
    """Where the rows of a table are among the screen's lines, for saying how many of them do not fit."""

    what: str  # "worker(s)"
    first_line: int
    row_count: int


def _fit(lines: List[Line], width: int, height: Optional[int], tables: Sequence[_Rows] = ()) -> List[Line]:
    """Cut lines to the terminal; when table rows do not fit, say how many are hidden instead of the last line."""
    lines = [Line(line.text[:width], line.style) for line in lines]
    if height is None or len(lines) <= height:
        return lines
    if not tables or height < 1:
        return lines[:height]
    shown = height - 1  # the last line says what is hidden, counting the row it replaces
    hidden = [(rows.what, rows.row_count - min(rows.row_count, max(0, shown - rows.first_line))) for rows in tables]
    said = ", ".join(f"{count} {what}" for what, count in hidden if count)
    if not said:
        return lines[:height]
    return lines[:shown] + [Line(f"... {said} not shown: enlarge the terminal"[:width], "alert")]


def _cut(text: str, width: int) -> str:
    """Text no wider than `width`, a + marking where it was cut."""
    return text if len(text) <= width else text[: width - 1] + "+"


def _section_lines(section: Section) -> List[str]:
    label_width = max((len(label) for label, _ in section.rows), default=0)
    value_width = max((len(value) for _, value in section.rows), default=0)
    rows = [f"{label:>{label_width}} {value:>{value_width}}" for label, value in section.rows]
    block_width = max([len(section.title)] + [len(row) for row in rows])
    return [part.ljust(block_width) for part in [section.title, *rows]]


def _blocks(sections: Sequence[Section], width: int) -> List[Line]:
    """Sections side by side as in the seeds' screen, wrapping onto another band when the terminal is too narrow."""
    bands: List[List[List[str]]] = [[]]
    used = 0
    for section in sections:
        block = _section_lines(section)
        needed = len(block[0]) + (len(_BLOCK_SEPARATOR) if bands[-1] else 0)
        if bands[-1] and used + needed > width:
            bands.append([])
            needed = len(block[0])
            used = 0
        bands[-1].append(block)
        used += needed
    lines: List[Line] = []
    for number, band in enumerate(bands):
        if number:
            lines.append(Line(""))
        rows = max(len(block) for block in band)
        for row in range(rows):
            cells = [block[row] if row < len(block) else " " * len(block[0]) for block in band]
            lines.append(Line(_BLOCK_SEPARATOR.join(cells).rstrip(), "title" if row == 0 else ""))
    return lines


def _worker_table(workers: Sequence[WorkerStatus], sort_key: str, width: int) -> List[Line]:
    name_column = WORKER_COLUMNS[0]
    numbers = [
        column
        for column in WORKER_COLUMNS[1:]
        if column.key not in OPTIONAL_COLUMNS or column.key == sort_key or any(column.value(w) for w in workers)
    ]
    cells = [[column.text(worker) for column in numbers] + [format_flags(worker.flags)] for worker in workers]
    widths = [
        max([column.width, len(column.header) + 1] + [len(row[index]) for row in cells])  # +1: room for the *
        for index, column in enumerate(numbers)
    ] + [len(ITL_HEADER)]
    fixed = sum(widths) + len(widths)  # one space before each column, where the header's * goes when sorted
    names = [name_column.text(worker) for worker in workers]
    longest_name = max([len(name) for name in names] + [len(name_column.header) + 1])
    name_width = max(_MIN_NAME_WIDTH, min(longest_name, width - fixed))

    def row(name: str, values: Sequence[str], marked: Optional[int] = None) -> str:
        return _cut(name, name_width).ljust(name_width) + "".join(
            ("*" + value if index == marked else value).rjust(size + 1)
            for index, (value, size) in enumerate(zip(values, widths))
        )

    headers = [column.header for column in numbers] + [ITL_HEADER]
    marked = next((index for index, column in enumerate(numbers) if column.key == sort_key), None)
    name_header = ("*" if sort_key == name_column.key else "") + name_column.header
    lines = [Line(row(name_header, headers, marked), "title")]
    lines += [Line(row(name, values)) for name, values in zip(names, cells)]
    return lines


def _actor_table(rows: Sequence[ActorRow], width: int) -> List[Line]:
    """Class name and id first, the numbers, then the worker last, as top puts its command: cut to what is left."""
    headers = ActorRow(*(header for header, _ in ACTOR_COLUMNS))
    numbers = range(1, len(ACTOR_COLUMNS) - 1)
    widths = [
        max([ACTOR_COLUMNS[index][1], len(headers[index])] + [len(row[index]) for row in rows]) for index in numbers
    ]
    fixed = sum(widths) + len(widths)  # one space before each
    longest_name = max(len(row.name) for row in (headers, *rows))
    longest_worker = max(len(row.worker) for row in (headers, *rows))
    room = width - fixed - 1  # for both names, with a space before the worker
    name_width = max(min(longest_name, room - longest_worker), min(longest_name, max(_MIN_NAME_WIDTH, room // 2)))
    worker_width = max(len(headers.worker), room - name_width)

    def line(row: Tuple[str, ...]) -> str:
        cells = "".join(row[index].rjust(size + 1) for index, size in zip(numbers, widths))
        return _cut(row[0], name_width).ljust(name_width) + cells + " " + _cut(row[-1], worker_width)

    return [Line(line(headers), "title")] + [Line(line(row)) for row in rows]


# ---- the terminal ----------------------------------------------------------------------------------------------------


def _draw(screen, state: TopState) -> None:  # screen: a curses window
    import curses

    height, width = screen.getmaxyx()
    styles = {"": curses.A_NORMAL, "title": curses.A_BOLD, "alert": curses.A_REVERSE | curses.A_BOLD}
    screen.erase()
    for row, line in enumerate(render(state, width, height)):
        try:
            screen.addnstr(row, 0, line.text, width, styles[line.style])
        except curses.error:
            pass  # writing the bottom-right cell moves the cursor off the screen; the text is drawn all the same
    screen.refresh()


def _run_curses(screen, subscriber, state: TopState) -> None:  # subscriber: a StatusSubscriber
    import curses

    from scaler.monitor.model import RateMeter

    try:
        curses.curs_set(0)
    except curses.error:
        pass  # some terminals cannot hide the cursor
    screen.timeout(_REDRAW_MILLISECONDS)
    rates = RateMeter()
    while True:
        status = subscriber.receive()
        if status is not None:
            rates.update(status)
            state.status, state.tasks_per_second = status, rates.tasks_per_second
            state.actor_calls_per_second = rates.actor_calls_per_second
        state.silence_seconds = subscriber.silence_seconds()
        _draw(screen, state)
        key = screen.getch()
        if key in (ord("q"), ord("Q")):
            return
        if key == curses.KEY_RESIZE:
            curses.update_lines_cols()
            screen.clear()  # forget what was on the old-sized screen, so nothing stale survives the redraw
        elif 0 <= key < 256 and chr(key) in SORT_KEYS:
            state.sort_key = chr(key)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaler_top",
        description=f"Watch a Scaler scheduler, its workers and its actors, top-style. {shortcuts_text()}; the"
        " column the workers are sorted by is marked with *.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("address", help="the scheduler's monitor address, e.g. ipc:///tmp/127.0.0.1_2345_monitor")
    parser.add_argument(
        "--sort", "-s", choices=sorted(SORT_KEYS), default=DEFAULT_SORT_KEY,
        help=f"initial sort key, as the shortcuts (default: {DEFAULT_SORT_KEY})",
    )  # fmt: skip
    parser.add_argument(
        "--once",
        action="store_true",
        help="print one screen as plain text and exit (1 if no status came within --timeout), e.g. for scripts",
    )
    SETTINGS.add_arguments(parser, MONITOR)
    return parser


def _print_once(subscriber, state: TopState) -> int:
    status = subscriber.receive(state.timeout_seconds)
    if status is None:
        print(f"scaler_top: {subscriber.no_status_message()}", file=sys.stderr)
        return 1
    state.status = status
    state.silence_seconds = subscriber.silence_seconds()
    print(render_text(state, shutil.get_terminal_size().columns))
    return 0


def main(argv: Optional[List[str]] = None) -> None:
    args = build_parser().parse_args(argv)
    # imported late so `-h` answers fast, without zmq
    from scaler.io.curve_keys import load_peer_keys
    from scaler.io.sockets import TcpKeepalive
    from scaler.monitor.subscriber import StatusSubscriber

    try:
        curve = load_peer_keys(args.curve_secret_key_file, args.curve_server_key_file)
        subscriber = StatusSubscriber(args.address, args.status_timeout_seconds, curve, TcpKeepalive.of(args))
    except (TypeError, ValueError) as error:
        sys.exit(f"scaler_top: {error}")
    state = TopState(
        address=args.address, timeout_seconds=args.status_timeout_seconds, sort_key=check_sort_key(args.sort)
    )
    try:
        if args.once:
            sys.exit(_print_once(subscriber, state))
        if not sys.stdout.isatty():
            sys.exit("scaler_top: needs a terminal; use --once to print a single screen")
        import curses

        # ncurses prefers exported LINES/COLUMNS to the terminal's real size, and would then ignore resizes
        os.environ.pop("LINES", None)
        os.environ.pop("COLUMNS", None)
        curses.wrapper(_run_curses, subscriber, state)
    except KeyboardInterrupt:
        pass
    finally:
        subscriber.close()


if __name__ == "__main__":
    main()
