"""The scheduler's connection watch on real sockets: a peer accepted the moment the address listens is counted."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import zmq

import scaler.scheduler.shell as shell_module
from scaler.scheduler.settings import SchedulerSettings
from scaler.scheduler.shell import SchedulerShell

pytestmark = pytest.mark.timeout(60)


def test_a_peer_accepted_as_soon_as_the_address_listens_is_counted(tmp_path: Path, monkeypatch) -> None:
    """The connection budget counts the connections the socket's monitor reports; a monitor attached after the bind
    misses those accepted before it, and the budget counts too few from then on. Here a peer connects, and is
    accepted, between the bind and the budget's reading of the listener."""
    settings = SchedulerSettings(f"ipc://{tmp_path}/scheduler", monitor_address=f"ipc://{tmp_path}/monitor")
    context = zmq.Context()
    peer = context.socket(zmq.DEALER)
    peer.setsockopt(zmq.LINGER, 0)
    budget_for = shell_module.budget_for

    def budget_once_a_peer_is_in(router, *args):
        peer.connect(settings.address)
        peer.send(b"hello?")
        assert router.poll(10_000, zmq.POLLIN), "the peer's frame, so its connection was accepted"
        return budget_for(router, *args)

    monkeypatch.setattr(shell_module, "budget_for", budget_once_a_peer_is_in)
    counted = []

    async def scenario() -> None:
        shell = SchedulerShell(settings, handle_signals=False)
        serving = asyncio.ensure_future(shell.run())
        try:
            await asyncio.sleep(0)  # run() starts the watches, which read the events waiting
            counted.append(shell.budget.connections)
        finally:
            shell.stop("test over")
            await serving

    try:
        asyncio.run(scenario())
    finally:
        context.destroy(linger=0)
    assert counted == [1]
