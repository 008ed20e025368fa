"""The agent's side of a real processor's channel (processor_link.py): handing orders never waits for the processor."""

from __future__ import annotations

import sys
import threading
import time

import cloudpickle
import pytest

from scaler.io.shared_bytes import SharedBytes
from scaler.worker.processor_link import ProcessorLink
from scaler.worker.processor_messages import ProcessorArgument, ProcessorTask
from scaler.worker.zygote import ProcessorZygote

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.timeout(60)

MiB = 1024 * 1024


def echo(data: bytes) -> bytes:
    return data


def test_large_orders_and_large_results_cross_without_either_side_waiting_for_the_other() -> None:
    """The processor writes 4 MiB results that nobody reads while 4 MiB tasks are handed to it: handing must
    return at once and leave the rest for the loop (which reads results meanwhile), or both wait forever."""
    zygote = ProcessorZygote.start()
    link = ProcessorLink(1, zygote.fork_processor(10), output_limit_bytes=1000)
    try:
        function = cloudpickle.dumps(echo)
        tasks = []
        for seq in range(1, 17):
            argument = ProcessorArgument("", b"", cloudpickle.dumps(bytes([seq]) * (4 * MiB)), False)
            head = function if seq == 1 else None
            tasks.append(ProcessorTask(seq, b"t%d" % seq, b"", None, b"f" * 16, head, [argument], False, [], False))

        def hand_all() -> None:
            for task in tasks:
                link.hand([task])

        sender = threading.Thread(target=hand_all, daemon=True)
        sender.start()
        sender.join(20)
        assert not sender.is_alive(), "handing orders waited for the processor, which waits for us to read"
        assert link.writing, "the channel took 64 MiB of orders at once: this test shows nothing"

        results = {}
        deadline = time.monotonic() + 40
        while len(results) < len(tasks):
            assert time.monotonic() < deadline, f"{len(results)} of {len(tasks)} results"
            link.write()  # as the agent's loop does when the channel has room
            for report in link.reader.read_available():
                for result in report.results:
                    results[result.task_id] = result
            assert not link.reader.closed
            time.sleep(0.002)
        assert not link.writing
        for seq in range(1, 17):
            result = results[b"t%d" % seq]
            assert result.succeeded, result.error_text
            assert type(result.payload) is SharedBytes, "a large result comes as shared memory, not through the socket"
            assert cloudpickle.loads(result.payload.view()) == bytes([seq]) * (4 * MiB)
    finally:
        link.kill()
        zygote.stop(timeout_seconds=5)
