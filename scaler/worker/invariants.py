"""Internal: what must hold between any two stimuli of WorkerCore: its tests check it after every step
(core.validate())."""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List

from scaler.worker.state import (
    ACTIVE,
    ACTOR_PROCESSOR,
    CANCELED,
    CONNECTED,
    HANDED,
    MAX_SPARE_PROCESSORS,
    PARKED,
    PARKED_PROCESSOR,
    READY,
    SPARE,
    WAITING,
    ProcessorState,
)


def check_invariants(core: Any) -> None:
    """`core` is a WorkerCore (not imported: core.py imports this module)."""
    queued = list(core.queue)
    asked = core.objects_asked()
    assert len(queued) == len(core.queue) == len({id(task) for task in queued})
    waiting = [task for task in core.tasks.values() if task.state in (WAITING, READY) and not task.task.actor_id]
    assert all(task in queued for task in waiting)  # an actor's calls wait in its own line (actors.py)
    for task in queued:
        assert core.tasks.get(task.task_id) is task, task.task_id
        assert task.state in (WAITING, READY) and task.processor is None, task.stimuli()
        assert (task.state == WAITING) == bool(task.missing), task.stimuli()
        for object_id in task.missing:
            assert object_id not in core.cache and object_id in asked
    in_pipes = 0
    roles: Dict[int, List[ProcessorState]] = {ACTIVE: [], PARKED_PROCESSOR: [], SPARE: [], ACTOR_PROCESSOR: []}
    for number, processor in core.processors.items():
        assert processor.number == number
        roles[processor.role].append(processor)
        last_seq = 0
        canceled = 0
        for task_id, task in processor.pipe.items():
            assert core.tasks.get(task_id) is task and task.processor is processor, task.stimuli()
            assert task.state in (HANDED, PARKED, CANCELED), task.stimuli()
            assert last_seq < task.seq <= processor.handed_count
            last_seq = task.seq
            canceled += task.state == CANCELED
        in_pipes += len(processor.pipe)
        assert canceled == processor.canceled
        expected = sum(task.expected_seconds for task in processor.pipe.values())
        assert abs(processor.pipe_expected_seconds - expected) < 1e-6
        if processor.role == PARKED_PROCESSOR:
            assert len(processor.pipe) <= 1 and all(t.state == PARKED for t in processor.pipe.values())
        else:
            assert all(task.state != PARKED for task in processor.pipe.values())
        if processor.role == SPARE:
            assert not processor.pipe
    assert roles[ACTIVE] == ([core.active] if core.active is not None else [])
    assert sorted(p.number for p in roles[PARKED_PROCESSOR]) == sorted(p.number for p in core.parked)
    assert sorted(p.number for p in roles[SPARE]) == sorted(p.number for p in core.spares)
    assert len(core.spares) <= MAX_SPARE_PROCESSORS
    waiting_actor_calls = core._check_actors({task.task_id for task in queued})
    assert len(roles[ACTOR_PROCESSOR]) == len(core.actors)
    assert len(core.tasks) == len(queued) + in_pipes + waiting_actor_calls
    timed = {
        task.task_id: task
        for processor in core.processors.values()
        for task in processor.pipe.values()
        if task.task.timeout_ms and task.state in (HANDED, PARKED)
    }
    assert core.timed == timed, (sorted(core.timed), sorted(timed))
    assert all(not task.deadline for task in core.tasks.values() if task.task_id not in timed)
    for processor in core.processors.values():  # a running task's clock runs
        running = processor.running()
        if running is not None and running.task_id in timed:
            assert running.deadline, running.stimuli()
    if core.exit_code is None:
        assert core.active is not None
    if core.connection != CONNECTED:  # only actors' calls handed to their processes live on
        assert all(task.task.actor_id and task.state in (HANDED, CANCELED) for task in core.tasks.values())
    for task_id, buffer in core.outputs.items():
        assert buffer.task_id == task_id and task_id in core.tasks, task_id  # the output of answered tasks is sent
        assert core.tasks[task_id].task.stream_output
    pins = Counter(object_id for task in core.tasks.values() for object_id in task.needs)
    assert pins == Counter(core.cache.pins()), (pins, core.cache.pins())
    core.cache.check()
    for object_id, (_, payload) in core._reusable.items():  # held results whose files may go back to their writer
        assert core.cache.held_payload(object_id) is payload, object_id
    assert core.preloading <= core.processors.keys()  # processors yet to say how their preload went
    if core.awaiting_preload:  # the worker connects once its first processor ran the preload
        assert core.connection != CONNECTED and not core.registrations
    if not core.memory_limit:  # no limit: nothing measured, nothing paused
        assert not core.memory_paused and core.memory_used == 0
