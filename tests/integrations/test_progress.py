"""Progress bars on a real cluster: map(progress=True) and scaler.progress(futures), with tqdm writing to stderr."""

from __future__ import annotations

import re
import sys
import time
from typing import List

import pytest

import scaler
from scaler import Client
from scaler.protocol import Task
from scaler.testing.protocol_peer import ProtocolPeer


def slow_first(index: int) -> int:
    if index == 0:
        time.sleep(2.0)  # the others finish meanwhile: the bar must show them before this one is done
    return index


def fail_on_three(index: int) -> int:
    if index == 3:
        raise ValueError("three")
    return index


def counts_shown(output: str, total: int) -> List[int]:
    """Every 'n/total' the bar drew, in order."""
    return [int(n) for n in re.findall(rf"(\d+)/{total}\b", output)]


def test_map_progress_moves_as_results_arrive_not_in_order(client: Client, capsys: pytest.CaptureFixture) -> None:
    assert client.map(slow_first, [(n,) for n in range(20)], progress=True) == list(range(20))
    shown = counts_shown(capsys.readouterr().err, 20)
    assert shown[0] == 0 and shown[-1] == 20 and shown == sorted(shown)
    assert any(0 < count < 20 for count in shown), shown  # tasks 1..19 counted while task 0 was still running


def test_map_progress_with_a_label_and_a_failure(client: Client, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(ValueError, match="three"):
        client.map(fail_on_three, [(n,) for n in range(8)], progress="checking")
    assert "checking" in capsys.readouterr().err  # the bar was drawn, and closed by the failure


def test_progress_of_futures_returns_them_once_all_are_done(client: Client, capsys: pytest.CaptureFixture) -> None:
    futures = [client.submit(fail_on_three, n) for n in range(10)]
    assert scaler.progress(futures, label="futures") is not futures  # a list of them, in the order given
    returned = scaler.progress(futures)
    assert returned == futures and all(future.done() for future in futures)
    assert [future.exception() is not None for future in futures] == [n == 3 for n in range(10)]
    err = capsys.readouterr().err
    assert "futures" in err and counts_shown(err, 10)[-1] == 10


def test_without_tqdm_a_clear_error_before_anything_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)  # as if tqdm were not installed
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    with ProtocolPeer() as peer, Client(peer.address) as client:
        with pytest.raises(ImportError, match=r'pip install "scaler\[progress\]"'):
            client.map(abs, [(-1,)], progress=True)
        future = client.submit(abs, -2)
        assert future.result(10) == 2  # answered: whatever was sent before it has arrived
        with pytest.raises(ImportError, match="tqdm"):
            scaler.progress([future])
        assert len(peer.messages(Task)) == 1  # only the submit
