"""The shell hands the core a long frame in parts, sending what each part made ready before taking the next."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import List

import pytest
import zmq

from scaler.protocol import PROTOCOL_VERSION, Hello, Role, Task, decode_frame_for_routing, encode, encode_many
from scaler.scheduler import shell as shell_module
from scaler.scheduler.settings import SchedulerSettings
from scaler.scheduler.shell import SchedulerShell
from scaler.scheduler.warmup import _task

pytestmark = pytest.mark.timeout(60)

PART = shell_module._MESSAGES_PER_FLUSH


def test_a_frame_longer_than_a_part_reaches_the_worker_in_several_frames_in_order(tmp_path: Path) -> None:
    """3 parts and a bit of independent tasks, then a graph node on the first and last of them, all in one frame:
    the worker gets the independent tasks in one frame per part, in order, each once; the node waits for both."""
    settings = SchedulerSettings(f"ipc://{tmp_path}/scheduler", monitor_address=f"ipc://{tmp_path}/monitor")
    count = 3 * PART + 7
    tasks = [_task(number) for number in range(count)]
    node = _task(count, (tasks[0].task_id, tasks[-1].task_id))
    frames: List[List[bytes]] = []

    async def scenario() -> None:
        shell = SchedulerShell(settings, handle_signals=False)
        serving = asyncio.ensure_future(shell.run())
        context = zmq.Context()
        try:
            client = context.socket(zmq.DEALER)
            worker = context.socket(zmq.DEALER)
            for socket, identity, hello in (
                (client, b"C|parts|1|client", Hello(protocol_version=PROTOCOL_VERSION, role=Role.client, name="c")),
                (
                    worker,
                    b"W|parts|2|worker",
                    Hello(protocol_version=PROTOCOL_VERSION, role=Role.worker, name="w", capacity=10 * count),
                ),
            ):
                socket.setsockopt(zmq.IDENTITY, identity)
                socket.setsockopt(zmq.LINGER, 0)
                socket.connect(settings.address)
                socket.send(encode(hello))
            for socket in (client, worker):  # the HelloReply: connected before the frame is sent
                while not socket.poll(0):
                    await asyncio.sleep(0.01)
                socket.recv()
            client.send(encode_many([*tasks, node]))
            received = 0
            while received < count:
                if not worker.poll(0):
                    await asyncio.sleep(0.01)
                    continue
                ids = [m.task_id for m in decode_frame_for_routing(worker.recv()) if m.WHICH == Task.WHICH]
                frames.append(ids)
                received += len(ids)
            await asyncio.sleep(0.1)  # time enough for a wrongly released node to show up
            assert not worker.poll(0)
            assert shell.core.tasks[node.task_id].pending_dependencies == 2
            for socket in (client, worker):
                socket.close(linger=0)
        finally:
            context.term()
            shell.stop("the test is over")
            await serving

    asyncio.run(scenario())
    assert [len(ids) for ids in frames] == [PART, PART, PART, 7]
    assert [task_id for ids in frames for task_id in ids] == [task.task_id for task in tasks]
