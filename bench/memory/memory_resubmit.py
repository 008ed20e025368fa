"""What a client keeps to survive a scheduler restart: bytes per unanswered task and per unanswered graph node.

    .venv/bin/python -m bench.memory.memory_resubmit
    .venv/bin/python -m bench.memory.memory_resubmit --tasks 20000 --nodes 5000

The client sends small tasks (one int argument) and a graph of independent nodes to a protocol peer that holds them
unanswered, so they stay pending. tracemalloc measures the client's Python memory per pending task or node, then how
much of it goes once the client drops what it keeps for a resubmission (the task's message, the graph's record): the
difference is the cost of surviving a restart. Objects (functions, send_object, large arguments) are not counted
here: the client keeps their serialized bytes, which it built to send anyway, while the scheduler should hold them.
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc

from scaler import Client
from scaler.testing.processes import wait_for
from scaler.testing.protocol_peer import ProtocolPeer


def noop(value: int) -> int:
    return value


def traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--nodes", type=int, default=20_000)
    args = parser.parse_args()
    with ProtocolPeer(execute=False) as peer, Client(peer.address) as client:
        client.submit(noop, 0)  # the function is sent and cached before measuring
        tracemalloc.start()
        before = traced()
        _futures = [client.submit(noop, index) for index in range(args.tasks)]  # alive while measured
        wait_for(lambda: len(peer.held) > args.tasks, 120, "every task at the peer")
        pending = traced()
        core = client._open_connection().core  # what it keeps for a restart: each unanswered task's message
        core.messages.clear()
        dropped = traced()
        per_task, kept_task = (pending - before) / args.tasks, (pending - dropped) / args.tasks

        graph = {f"node-{index}": (noop, index) for index in range(args.nodes)}
        before = traced()
        _keys = client.get(graph, list(graph), block=False)  # alive while measured
        wait_for(lambda: len(peer.held) > args.tasks + args.nodes, 120, "every node at the peer")
        pending = traced()
        core.graphs.clear()
        dropped = traced()
        per_node, kept_node = (pending - before) / args.nodes, (pending - dropped) / args.nodes
    print(f"{'pending':<12}{'client bytes each':>20}{'of which kept for a restart':>30}")
    print(f"{'task':<12}{per_task:>20,.0f}{kept_task:>30,.0f}")
    print(f"{'graph node':<12}{per_node:>20,.0f}{kept_node:>30,.0f}")


if __name__ == "__main__":
    main()
