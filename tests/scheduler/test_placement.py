"""Placement, balancing and liveness at many workers, on the sans-IO core: the structures that keep them from walking
every worker (scaler/scheduler/placement.py, the liveness heap) place as the simple walk did. The harness asserts the
core's invariants, the load index's included, after every step."""

from __future__ import annotations

import random
from typing import Dict, List

from scaler.protocol import BalanceRequest, ClientHeartbeat, Task, WorkerDisconnect, WorkerHeartbeat
from scaler.scheduler.placement import WorkerLoads
from scaler.scheduler.state import WorkerState
from scaler.testing.scheduler_harness import CLIENT, Harness, of_type, result

_TASK_LOCK = 4  # WorkerHeartbeat.flags bit: the processor runs a task (not parked)


def workers(count: int) -> List[bytes]:
    return [b"W|many|%d" % index for index in range(count)]


def tasks_by_worker(out: Dict[bytes, List[object]]) -> Dict[bytes, List[Task]]:
    return {peer: of_type(messages, Task) for peer, messages in out.items() if of_type(messages, Task)}


def test_a_burst_spreads_over_idle_workers_one_task_each_before_any_gets_two() -> None:
    harness = Harness()
    harness.connect_client()
    for peer in workers(100):
        harness.connect_worker(peer, capacity=10)
    out = tasks_by_worker(harness.send(CLIENT, *[harness.task() for _ in range(250)]))
    counts = sorted(len(tasks) for tasks in out.values())
    assert len(out) == 100 and counts[0] == 2 and counts[-1] == 3 and sum(counts) == 250


def test_each_task_goes_to_a_least_loaded_worker_with_a_free_slot() -> None:
    harness = Harness()
    harness.connect_client()
    small, large = workers(2)
    harness.connect_worker(small, capacity=1)
    harness.connect_worker(large, capacity=50)
    out = tasks_by_worker(harness.send(CLIENT, *[harness.task() for _ in range(6)]))
    assert len(out[small]) == 1 and len(out[large]) == 5, "the full worker is skipped, not waited for"
    first = out[small][0]
    out = tasks_by_worker(harness.send(small, result(first), *[]))
    assert out == {}, "nothing was waiting"
    out = tasks_by_worker(harness.send(CLIENT, *[harness.task() for _ in range(2)]))
    # small holds 0 and large 5: small (load 0) takes one, is full again, large takes the other
    assert len(out[small]) == 1 and len(out[large]) == 1


def test_tasks_wait_for_a_slot_and_a_result_hands_its_slot_to_the_oldest() -> None:
    harness = Harness()
    harness.connect_client()
    for peer in workers(3):
        harness.connect_worker(peer, capacity=2)
    submitted = [harness.task() for _ in range(10)]
    out = tasks_by_worker(harness.send(CLIENT, *submitted))
    assert sum(len(tasks) for tasks in out.values()) == 6
    peer, tasks = next(iter(out.items()))
    out = tasks_by_worker(harness.send(peer, result(tasks[0]), result(tasks[1])))
    assert [t.task_id for t in out[peer]] == [t.task_id for t in submitted[6:8]]


def test_parked_tasks_lend_their_slots_and_take_them_back() -> None:
    harness = Harness()
    harness.connect_client()
    (peer,) = workers(1)
    harness.connect_worker(peer, capacity=2)
    parents = [harness.task() for _ in range(2)]
    harness.send(CLIENT, *parents)
    assert harness.core.loads.free_slots == 0
    harness.send(peer, WorkerHeartbeat(running=2, flags=0))  # both parked on children: two slots lent
    assert harness.core.loads.free_slots == 2 and harness.core.loads.idle() == 1
    out = tasks_by_worker(harness.send(CLIENT, harness.task(parent_task_id=parents[0].task_id)))
    assert len(out[peer]) == 1
    harness.send(peer, WorkerHeartbeat(running=3, flags=_TASK_LOCK))  # the child runs: one slot lent still
    assert harness.core.loads.free_slots == 1
    harness.send(peer, WorkerHeartbeat(running=3, flags=0))  # the child parks too
    assert harness.core.loads.free_slots == 2


def test_balancing_asks_only_the_busiest_workers_and_only_for_what_the_idle_ones_take() -> None:
    harness = Harness(balance_interval_seconds=0.5)
    harness.connect_client()
    peers = workers(200)
    for peer in peers[:199]:
        harness.connect_worker(peer, capacity=100)
    harness.send(CLIENT, *[harness.task() for _ in range(199 * 10)])  # 10 each
    harness.connect_worker(peers[199], capacity=100)  # idle
    requests = {peer: of_type(messages, BalanceRequest) for peer, messages in harness.tick(advance=0.6).items()}
    asked = {peer: r for peer, r in requests.items() if r}
    # fair share 1990 // 200 = 9: the idle worker wants 9, each busy worker has a surplus of 1
    assert len(asked) == 9 and all(r == [BalanceRequest(count=1)] for r in asked.values())


def test_balancing_asks_the_busiest_first() -> None:
    harness = Harness(balance_interval_seconds=0.5)
    harness.connect_client()
    busy, calm, idle = workers(3)
    harness.connect_worker(busy, capacity=100)
    harness.send(CLIENT, *[harness.task() for _ in range(12)])
    harness.connect_worker(calm, capacity=100)
    harness.send(CLIENT, *[harness.task() for _ in range(3)])  # calm takes them: it is less loaded
    harness.connect_worker(idle, capacity=100)
    out = harness.tick(advance=0.6)
    # loads 12, 3, 0: fair share 5, the idle one wants 5; busy alone has a surplus of 7
    assert of_type(out.get(busy, []), BalanceRequest) == [BalanceRequest(count=7)]
    assert calm not in out


def test_load_index_picks_the_least_loaded_under_random_changes() -> None:
    """WorkerLoads against a plain model walked over every worker, after each of thousands of random changes: a worker
    takes tasks while it has a free slot, except that once full it waits until half its slots (at most 32) are free."""
    rng = random.Random(7)
    loads = WorkerLoads()
    connected: Dict[bytes, WorkerState] = {}
    model_open: Dict[bytes, bool] = {}

    def changed(worker: WorkerState) -> None:
        slots = max(0, worker.capacity - len(worker.assigned) + worker.parked)
        was_open = model_open.get(worker.identity, False)
        model_open[worker.identity] = slots >= min((worker.capacity + 1) // 2, 32) or (slots > 0 and was_open)
        loads.file(worker)

    task_number = 0
    for step in range(5000):
        action = rng.random()
        if action < 0.05 or not connected:
            identity = b"W|%d" % step
            worker = WorkerState(identity, identity.decode(), rng.choice([1, 2, 3, 8, 1000]), 0.0)
            connected[identity] = worker
            model_open[identity] = True
            loads.add(worker)
        elif action < 0.08:
            worker = connected.pop(rng.choice(list(connected)))
            loads.remove(worker)
        elif action < 0.55:
            expected = [w for w in connected.values() if model_open[w.identity]]
            worker = loads.take_least_loaded()
            if not expected:
                assert worker is None
                continue
            assert worker is not None and model_open[worker.identity], "a worker that should not take tasks"
            lowest = min(max(0, len(w.assigned) - w.parked) for w in expected)
            assert max(0, len(worker.assigned) - worker.parked) == lowest, "not a least loaded worker"
            task_number += 1
            worker.assigned[b"t%d" % task_number] = None
            changed(worker)
        elif action < 0.9:
            worker = rng.choice(list(connected.values()))
            if worker.assigned:
                del worker.assigned[next(iter(worker.assigned))]
                changed(worker)
        else:
            worker = rng.choice(list(connected.values()))
            worker.parked = rng.randint(0, len(worker.assigned))
            changed(worker)
        loads.validate(connected)
        assert all(w.takes_tasks == model_open[w.identity] for w in connected.values())


def test_a_full_worker_is_topped_up_in_one_batch_once_half_its_slots_are_free() -> None:
    harness = Harness()
    harness.connect_client()
    (peer,) = workers(1)
    harness.connect_worker(peer, capacity=8)
    submitted = [harness.task() for _ in range(20)]
    (first,) = tasks_by_worker(harness.send(CLIENT, *submitted)).values()
    assert len(first) == 8
    for task in first[:3]:
        assert harness.send(peer, result(task)).get(peer) is None, "3 free slots of 8: not yet"
    (batch,) = tasks_by_worker(harness.send(peer, result(first[3]))).values()
    assert [t.task_id for t in batch] == [t.task_id for t in submitted[8:12]], "4 free: the next 4, in one frame"


def test_a_cluster_that_keeps_talking_is_never_dropped_and_a_silent_peer_is_dropped_on_time() -> None:
    harness = Harness(worker_timeout_seconds=5.0, client_timeout_seconds=8.0)
    harness.connect_client()
    peers = workers(50)
    for peer in peers:
        harness.connect_worker(peer)
    silent = peers[-1]
    for second in range(1, 31):
        for peer in peers[:-1] if second > 2 else peers:
            harness.send(peer, WorkerHeartbeat())
        harness.send(CLIENT, ClientHeartbeat())
        harness.tick(advance=1.0)
        if second < 7:
            assert silent in harness.core.workers, f"dropped after {second - 2}s of silence"
    assert silent not in harness.core.workers and len(harness.core.workers) == 49
    assert CLIENT in harness.core.clients
    for _ in range(9):
        harness.tick(advance=1.0)
    assert not harness.core.clients, "the client fell silent 9 s ago, past its 8 s timeout"
    assert not harness.core.workers


def test_demand_counts_follow_tasks_and_workers() -> None:
    harness = Harness()
    harness.connect_client()
    root = harness.task()
    waiting = harness.task(dependencies=[root.task_id])
    plain = harness.task()
    harness.send(CLIENT, root, waiting, plain)
    harness.tick(advance=2.0)
    demand = harness.core.demand(harness.now)
    assert (demand.tasks_waiting, demand.tasks_ready, demand.tasks_assigned, demand.workers) == (3, 2, 0, 0)
    assert 1.99 < demand.oldest_ready_wait < 2.01
    (peer,) = workers(1)
    harness.connect_worker(peer, capacity=1)
    harness.send(peer, WorkerHeartbeat(running=1, flags=_TASK_LOCK))
    demand = harness.core.demand(harness.now)
    assert (demand.tasks_waiting, demand.tasks_ready, demand.tasks_assigned, demand.tasks_running) == (2, 1, 1, 1)
    assert (demand.worker_slots, demand.free_slots, demand.idle_workers) == (1, 0, 0)
    assert 1.99 < demand.oldest_ready_wait < 2.01, "the plain task still waits, since it was submitted"
    harness.send(peer, result(root))  # frees the slot: plain goes out, waiting becomes ready
    demand = harness.core.demand(harness.now)
    assert (demand.tasks_waiting, demand.tasks_ready, demand.tasks_assigned) == (1, 1, 1)
    assert demand.oldest_ready_wait == 0.0, "ready just now"
    harness.tick(advance=0.5)
    assert 0.49 < harness.core.demand(harness.now).oldest_ready_wait < 0.51


def test_a_task_back_from_a_dead_worker_keeps_its_wait_and_goes_first() -> None:
    harness = Harness(worker_timeout_seconds=5.0)
    harness.connect_client()
    first, second = workers(2)
    harness.connect_worker(first, capacity=1)
    early, late = harness.task(), harness.task()
    harness.send(CLIENT, early)
    harness.tick(advance=3.0)
    harness.send(CLIENT, late)  # waits: the only worker is full
    harness.tick(advance=3.0)  # the first worker falls silent: early comes back, first in line
    assert first not in harness.core.workers
    assert 5.99 < harness.core.demand(harness.now).oldest_ready_wait < 6.01, "early has been ready since submitted"
    harness.connect_worker(second, capacity=1)
    assert list(harness.core.workers[second].assigned) == [early.task_id]
    assert 2.99 < harness.core.demand(harness.now).oldest_ready_wait < 3.01, "now late is first in line"


def test_tasks_back_from_workers_leaving_one_after_the_other_queue_by_their_wait() -> None:
    harness = Harness()
    harness.connect_client()
    first, second, third = workers(3)
    harness.connect_worker(first, capacity=1)
    harness.connect_worker(second, capacity=1)
    early, middle, late = harness.task(), harness.task(), harness.task()
    harness.send(CLIENT, early)
    harness.tick(advance=1.0)
    harness.send(CLIENT, middle)
    harness.tick(advance=1.0)
    harness.send(CLIENT, late)  # waits: both workers are full
    assert {*harness.core.workers[first].assigned, *harness.core.workers[second].assigned} == {
        early.task_id,
        middle.task_id,
    }
    # whichever holds the earlier task leaves first, then the other: the later task must not jump ahead of the earlier
    holder = {task_id: peer for peer in (first, second) for task_id in harness.core.workers[peer].assigned}
    harness.send(holder[early.task_id], WorkerDisconnect(reason="stopped"))
    harness.send(holder[middle.task_id], WorkerDisconnect(reason="stopped"))
    assert [task.task_id for task in harness.core.ready_in_order()] == [early.task_id, middle.task_id, late.task_id]
    assert 1.99 < harness.core.demand(harness.now).oldest_ready_wait < 2.01, "early has been ready since submitted"
    harness.connect_worker(third, capacity=1)
    assert list(harness.core.workers[third].assigned) == [early.task_id]
