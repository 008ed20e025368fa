"""Internal: the scheduler's side of results held on workers, as part of its sans-IO core (core.py).

A worker with a data address keeps a large result and sends only its size (TaskResult.heldBytes). The scheduler keeps
where it is and the task that made it (its lineage), never its bytes: a peer that asks is told where it is
(ObjectResponse.holderAddress), or, if it cannot fetch it there, gets it relayed: the holder uploads it and each chunk
is passed on as it comes, not kept. A holder lost before the result was freed makes it be made again, and with it,
first, the freed held results it was made from, from the recipes kept while results made from them are held. A graph
node goes, other things equal, to the worker holding most of its held input bytes. A retiring worker hands what it
holds over to other workers before it leaves: each fetches its share from it (ObjectRequest.takeFrom) and says when it
holds it.

HeldResults is a part of SchedulerCore (a base class of it), not a separate object: the message handlers and the
freeing of objects stay in core.py, which calls these. The attributes it reads are the core's, declared below.
"""

from __future__ import annotations

import heapq
import logging
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple

from scaler.protocol import (
    BalanceRequest,
    HeldResult,
    ObjectDelete,
    ObjectKind,
    ObjectPut,
    ObjectRequest,
    ObjectResponse,
    TaskResult,
    TaskStatus,
    encode,
)
from scaler.scheduler.placement import WorkerLoads
from scaler.scheduler.ready import ReadyQueue
from scaler.scheduler.resources import Resources
from scaler.scheduler.state import READY, WAITING, ClientState, StoredObject, TaskState, WorkerState

logger = logging.getLogger("scaler.scheduler.core")

_KIND_RESULT = int(ObjectKind.result)
_SUCCESS = int(TaskStatus.success)
INT32_MAX = 2**31 - 1  # Task.priority is an Int32


class HeldResults:
    # the core's state this part reads and changes (core.py makes them)
    objects: Dict[bytes, StoredObject]
    workers: Dict[bytes, WorkerState]
    clients: Dict[bytes, ClientState]
    tasks: Dict[bytes, TaskState]
    ready_queues: Dict[Resources, ReadyQueue]
    state_counts: List[int]
    function_tasks: Dict[bytes, int]
    lineage: Dict[bytes, TaskState]
    recomputed_results: int
    _recomputing: Dict[bytes, StoredObject]
    _remade_uploads: Dict[bytes, Tuple[int, List[bytes]]]
    _lineage_refs: Dict[bytes, int]
    _last_call: float
    _data_keys: Optional[bytes]  # set with CurveZMQ: peers' data addresses speak it
    _send: Callable[[bytes, int, bytes], None]
    _send_message: Callable[[bytes, Any], None]
    _new_ready_queue: Callable[[Resources], ReadyQueue]
    _free: Callable[[StoredObject], None]
    _maybe_free: Callable[[StoredObject], None]
    _on_object_request: Callable[[Any, ObjectRequest, float], None]
    retiring: Dict[bytes, WorkerState]
    settings: Any  # SchedulerSettings
    adopted_results: int
    _unclaimed: Dict[bytes, Tuple[bytes, int, float]]
    _unclaimed_order: Deque[Tuple[float, bytes]]
    _claims: List[TaskState]
    _finish: Callable[[TaskState, int, TaskResult, Optional[bytes]], None]
    _set_state: Callable[[TaskState, int], None]
    _inline_results: Callable[[TaskState], None]

    def _hold(self, task: TaskState, size: int) -> StoredObject:
        stored = StoredObject(task.task_id, task.client, _KIND_RESULT, "", 0, size)
        assert task.worker is not None  # a result comes from the worker running the task
        stored.holder = task.worker
        stored.holders += (task.worker,)
        holder = self.workers[task.worker]
        holder.held[task.task_id] = None
        holder.held_bytes += size
        self.objects[task.task_id] = stored
        stored.producer = task
        self._count_inputs(task)  # its recipe needs theirs, should they be freed and it be lost
        return stored

    def _keep_lineage(self, object_id: bytes, recipe: TaskState) -> None:
        """A small result freed that a recipe kept names (a held result was made from it): its own recipe is kept."""
        self.lineage[object_id] = recipe
        self._count_inputs(recipe)

    def _count_inputs(self, recipe: TaskState) -> None:
        """A recipe that may be run (a held result's, or one kept as lineage) needs those of what it reads."""
        refs = self._lineage_refs
        for dependency_id in recipe.dependency_ids:
            refs[dependency_id] = refs.get(dependency_id, 0) + 1

    def _answer_held(self, stored: StoredObject, peer: bytes, relay: bool) -> None:
        """Where a held result is, or its bytes relayed; once it is there again if its holder was lost."""
        if peer in stored.later:
            return  # asked again (its connection resumed): the next upload is for it already
        if any(waiting == peer for waiting, _ in stored.waiting):  # asked again
            if stored.uploading > 0:  # chunks it may have missed are gone by: the next upload, whole, is for it
                stored.waiting = tuple(entry for entry in stored.waiting if entry[0] != peer)
                stored.later += (peer,)
            elif relay:  # it waits for a result made again, and now asks for its bytes, not where it is
                stored.waiting = tuple((waiting, wants or waiting == peer) for waiting, wants in stored.waiting)
            return  # else each chunk goes to it once, from the first
        holder = self._peer_state(stored.holder) if stored.holder is not None else None
        if holder is None:
            stored.waiting += ((peer, relay),)  # made again: answered then
            self._make_room(peer)
            return
        # with CurveZMQ, a holder whose key is not known (it sent no DataKeys) cannot be fetched from: it uploads
        if not relay and holder.data_address and (holder.data_key or self._data_keys is None):
            response = ObjectResponse(
                object_id=stored.object_id,
                found=True,
                kind=stored.kind,
                chunk_count=0,
                total_size=stored.total_size,
                holder_address=holder.data_address,
                holder_public_key=holder.data_key,
            )
            self._send_message(peer, response)
            return
        if stored.uploading > 0:
            stored.later += (peer,)  # its first chunks are gone by: the next upload is for it
            return
        stored.waiting += ((peer, True),)
        if stored.uploading < 0:
            stored.uploading = 0
            self._send_message(holder.identity, ObjectRequest(object_ids=[stored.object_id], via_scheduler=True))

    def _relay_chunk(self, stored: StoredObject, message: ObjectPut) -> None:
        if stored.uploading < 0:
            return  # an upload nobody waits for any more (its holder was lost and it was made again)
        response = encode(
            ObjectResponse(
                object_id=stored.object_id,
                found=True,
                kind=stored.kind,
                payload=message.payload,
                chunk_index=message.chunk_index,
                chunk_count=message.chunk_count,
                total_size=message.total_size,
            )
        )
        which = ObjectResponse.WHICH
        for peer, _ in stored.waiting:
            self._send(peer, which, response)
        stored.uploading += 1
        if message.chunk_index + 1 < message.chunk_count:
            return
        stored.waiting = tuple((peer, True) for peer in stored.later)
        stored.later = ()
        stored.uploading = -1
        if stored.waiting and stored.holder is not None:
            stored.uploading = 0
            self._send_message(stored.holder, ObjectRequest(object_ids=[stored.object_id], via_scheduler=True))

    def _lost_held(self, stored: StoredObject, why: str) -> None:
        """Its holder is gone: make it again from the task that made it, and first, recursively, what that task read
        that is gone too (from their lineage); if some of it cannot be made again, it is lost."""
        stored.holder = None
        stored.waiting += tuple((peer, True) for peer in stored.later)  # a half-relayed upload starts over, at 0
        stored.later = ()
        stored.uploading = -1
        if stored.object_id in self._recomputing:
            return  # already being made again (an input of another lost result)
        plan = self._remake_plan(stored.producer)
        if plan is None:
            self._answer_lost(stored, f"{why}, and what it was made from is freed")
            self._free(stored)
            return
        for peer, _ in stored.waiting:
            self._make_room(peer)
        for producer in plan:  # inputs first
            remade = self.objects.get(producer.task_id)
            if remade is None:  # freed, its recipe kept as lineage: it comes back as a placeholder
                remade = StoredObject(producer.task_id, producer.client, _KIND_RESULT, "", 0, 0)
                remade.producer = producer
                self.objects[producer.task_id] = remade
                del self.lineage[producer.task_id]
            self._recompute(remade, producer, why)

    def _remake_plan(self, producer: Optional[TaskState]) -> Optional[List[TaskState]]:
        """The tasks to run again to make `producer`'s result, inputs before what reads them (an explicit stack: a
        chain may be long); None if one of them read something that is gone with no recipe."""
        if producer is None:
            return None
        plan: List[TaskState] = []
        seen: Set[bytes] = set()
        stack: List[Tuple[TaskState, bool]] = [(producer, False)]
        while stack:
            task, expanded = stack.pop()
            if expanded:
                plan.append(task)
                continue
            if task.task_id in seen:
                continue
            seen.add(task.task_id)
            stack.append((task, True))
            for dependency_id in task.dependency_ids:
                if dependency_id in self.tasks:
                    continue  # being made again already
                stored = self.objects.get(dependency_id)
                if stored is not None and (stored.chunk_count or stored.holder is not None):
                    continue  # here, or held
                recipe = stored.producer if stored is not None else self.lineage.get(dependency_id)
                if recipe is None:
                    return None
                stack.append((recipe, False))
        return plan

    def _make_room(self, peer: bytes) -> None:
        """A worker waits for a lost result to be made again, and may have no free slot left for the task that makes
        it (its slots all held by tasks waiting likewise): its unstarted tasks come back, to go again later."""
        worker = self.workers.get(peer)
        if worker is not None and worker.assigned and not worker.balance_pending:
            worker.balance_pending = True
            self._send_message(peer, BalanceRequest(count=len(worker.assigned)))

    def _recompute(self, stored: StoredObject, producer: TaskState, why: str) -> None:
        """Run the task that made a lost result again, as the task it was (its bytes, inputs, requirement and
        priority), reporting to nobody: the peers that need the result ask for it. Not a retry: it counts against no
        limit. Inputs being made again too are waited for, as graph nodes wait."""
        task_id = producer.task_id
        requirement = producer.queue.requirement
        queue = self.ready_queues.get(requirement) or self._new_ready_queue(requirement)
        if requirement:
            queue.members += 1
        task = TaskState(
            task_id,
            producer.client,
            producer.raw,
            producer.function_id,
            False,
            producer.parent_task_id,
            producer.dependency_ids,
            self._last_call,
            queue,
            INT32_MAX,  # first in line: tasks on workers may be waiting for it
            producer.max_retries,
        )
        for dependency_id in task.dependency_ids:
            self._input_record(dependency_id).consumers += 1  # read again; released as the task finishes
            dependency = self.tasks.get(dependency_id)
            if dependency is not None:  # being made again itself
                if dependency.dependents is None:
                    dependency.dependents = [task_id]
                else:
                    dependency.dependents.append(task_id)
                task.pending_dependencies += 1
        self.tasks[task_id] = task
        client = self.clients.get(task.client)
        if client is not None:
            client.tasks[task_id] = None  # canceled with its client
        self.function_tasks[task.function_id] = self.function_tasks.get(task.function_id, 0) + 1
        if task.pending_dependencies:
            task.state = WAITING
            self.state_counts[WAITING] += 1
        else:
            self.state_counts[READY] += 1
            queue.push(task)
        self._recomputing[task_id] = stored
        self.recomputed_results += 1
        logger.info("result of task %s lost (%s): running the task again to make it", task_id.hex(), why)

    def _input_record(self, object_id: bytes) -> StoredObject:
        """The record of a result a task is to read. One being made again may have been freed meanwhile (its task
        still runs, and its result would be deleted as it comes): it comes back, its recipe its own again."""
        stored = self.objects.get(object_id)
        if stored is not None:
            return stored
        stored = self.objects[object_id] = self._recomputing[object_id]
        if self.lineage.pop(object_id, None) is None:  # nothing held was made from it: _free uncounted its inputs
            self._count_inputs(stored.producer)
        return stored

    def _remade_chunk(self, worker: WorkerState, message: ObjectPut) -> None:
        """A chunk of a lost result made again by a worker that holds nothing (it uploads what it makes): kept aside,
        the result being made again until its TaskResult comes. Chunks of an attempt no longer running are ignored."""
        object_id = message.object_id
        task = self.tasks.get(object_id)
        if task is None or task.worker != worker.identity:
            return
        if message.chunk_index == 0:
            self._remade_uploads[object_id] = (message.chunk_count, [])
        upload = self._remade_uploads.get(object_id)
        if upload is not None and message.chunk_index == len(upload[1]) < upload[0]:
            upload[1].append(message.payload)

    def _recomputed(self, stored: StoredObject, task: TaskState, status: int, result: TaskResult) -> None:
        """A lost result was made again (or its task ended otherwise): answer those who asked for it meanwhile."""
        object_id = stored.object_id
        uploaded = self._remade_uploads.pop(object_id, None) if self._remade_uploads else None
        if self.objects.get(object_id) is not stored:  # freed meanwhile: nobody needs what was made
            if status == _SUCCESS and result.held_bytes and task.worker is not None and task.worker in self.workers:
                self._send_message(task.worker, ObjectDelete(object_ids=[object_id]))
            return
        if status != _SUCCESS:
            self._answer_lost(stored, f"running its task again ended with status {TaskStatus(status).name}")
            self._free(stored)
            return
        if result.held_bytes:
            assert task.worker is not None  # a result comes from the worker running the task
            stored.holder = task.worker
            stored.holders += (task.worker,)
            stored.total_size = result.held_bytes
            holder = self.workers[task.worker]
            holder.held[object_id] = None
            holder.held_bytes += result.held_bytes
        elif result.in_object:  # uploaded in chunks by a worker that holds nothing: kept here
            if uploaded is None or len(uploaded[1]) != uploaded[0]:
                self._answer_lost(stored, "it was made again, and its upload did not come whole")
                self._free(stored)
                return
            chunks = uploaded[1]
            stored.chunks, stored.chunk_count, stored.total_size = chunks, len(chunks), sum(map(len, chunks))
        else:  # small this time: kept here, as the results graph nodes read
            stored.chunks, stored.chunk_count, stored.total_size = [result.payload], 1, len(result.payload)
        waiting, stored.waiting = stored.waiting, ()
        for peer, relay in waiting:
            state = self._peer_state(peer)
            if state is None:
                continue  # it left meanwhile
            if stored.chunk_count:
                self._on_object_request(state, ObjectRequest(object_ids=[object_id]), 0.0)
            else:
                self._answer_held(stored, peer, relay)
        self._maybe_free(stored)  # a placeholder remade only for a result that was canceled meanwhile
        if self.retiring and stored.holder in self.retiring and self.objects.get(object_id) is stored:
            self._hand_over(self.retiring[stored.holder], [object_id])  # made again on a worker that is leaving

    def _unref_lineage(self, dependency_ids: List[bytes]) -> None:
        """A held result is gone for good: the recipes only it needed go too, and theirs after them."""
        refs = self._lineage_refs
        pending = list(dependency_ids)
        while pending:
            dependency_id = pending.pop()
            count = refs.get(dependency_id, 0) - 1
            if count > 0:
                refs[dependency_id] = count
                continue
            refs.pop(dependency_id, None)
            recipe = self.lineage.pop(dependency_id, None)
            if recipe is not None:
                pending.extend(recipe.dependency_ids)

    def _answer_lost(self, stored: StoredObject, why: str) -> None:
        what = "result of task" if stored.kind == _KIND_RESULT else "object"
        logger.warning("%s %s is lost: %s", what, stored.object_id.hex(), why)
        for peer in {peer for peer, _ in stored.waiting} | set(stored.later):
            self._send_message(peer, ObjectResponse(object_id=stored.object_id, found=False))
        stored.waiting = ()
        stored.later = ()

    # ---- a retiring holder hands its results over --------------------------------------------------------------------

    def _hand_over(self, worker: WorkerState, object_ids: List[bytes]) -> None:
        """A retiring worker holds these results, still needed: ask other workers to fetch them from it and hold them
        (ObjectRequest.takeFrom), the least loaded in held bytes first. Its retirement waits for their answers
        (within its deadline); what nobody takes is made again from its lineage once it has left."""
        targets = [
            other
            for other in self.workers.values()
            if other.takes_handoffs and other.data_address and other.retire_deadline is None
        ]
        if not targets or not worker.data_address:
            logger.info(
                "worker %s retiring holds %d result(s) no other worker can take: they are made again after it leaves",
                worker.name,
                len(object_ids),
            )
            return
        loads = [(other.held_bytes, order, other) for order, other in enumerate(targets)]
        heapq.heapify(loads)
        asked: Dict[bytes, List[bytes]] = {}
        handing = worker.handing
        for object_id in object_ids:
            if object_id in handing:
                continue
            held_bytes, order, target = loads[0]
            handing[object_id] = target.identity
            target.taking += 1
            asked.setdefault(target.identity, []).append(object_id)
            heapq.heapreplace(loads, (held_bytes + self.objects[object_id].total_size, order, target))
        for identity, ids in asked.items():
            request = ObjectRequest(object_ids=ids, take_from=worker.data_address, take_from_key=worker.data_key)
            self._send_message(identity, request)
        if asked:
            logger.info(
                "worker %s retiring: handing %d held result(s) over to %d other worker(s)",
                worker.name,
                sum(len(ids) for ids in asked.values()),
                len(asked),
            )

    def _on_handoff_answer(self, worker: WorkerState, message: ObjectResponse) -> None:
        """A worker asked to take a retiring worker's result answers: it holds it now (found), or could not fetch it
        (it is made again once the retiring worker has left). A copy nobody waits for any more is dropped."""
        object_id = message.object_id
        stored = self.objects.get(object_id)
        giver = self.workers.get(stored.holder) if stored is not None and stored.holder is not None else None
        if stored is None or giver is None or giver.handing.get(object_id) != worker.identity:
            if not message.found:
                return
            if stored is None:  # freed meanwhile
                self._send_message(worker.identity, ObjectDelete(object_ids=[object_id]))
            elif worker.identity not in stored.holders:  # its giver left first: a spare copy, dropped with the result
                stored.holders += (worker.identity,)
            return
        self._end_handoff(giver, object_id)
        if not message.found:
            logger.info(
                "worker %s could not take result %s from retiring worker %s: it is made again once that one left",
                worker.name,
                object_id.hex(),
                giver.name,
            )
            return
        del giver.held[object_id]
        giver.held_bytes -= stored.total_size
        stored.holder = worker.identity
        stored.holders += (worker.identity,)
        worker.held[object_id] = None
        worker.held_bytes += stored.total_size
        if stored.uploading >= 0:  # a relay from the giver under way: it starts over, from the new holder
            stored.waiting += tuple((peer, True) for peer in stored.later)
            stored.later = ()
            stored.uploading = 0
            self._send_message(worker.identity, ObjectRequest(object_ids=[object_id], via_scheduler=True))
        if worker.retire_deadline is not None:  # retiring itself since it was asked
            self._hand_over(worker, [object_id])

    def _end_handoff(self, giver: WorkerState, object_id: bytes) -> None:
        """A result a retiring worker was handing over is answered for, freed, or stays where it is."""
        target = self.workers.get(giver.handing.pop(object_id))
        if target is not None:
            target.taking -= 1

    def _give_up_handoffs(self, target: WorkerState) -> None:
        """A worker asked to take results is gone: they stay where they are, made again once their holder left."""
        for giver in self.retiring.values():
            if giver.handing:
                for object_id in [key for key, asked in giver.handing.items() if asked == target.identity]:
                    del giver.handing[object_id]
        target.taking = 0

    # ---- results held across a scheduler restart ---------------------------------------------------------------------

    def _adopt_held(self, worker: WorkerState, held_results: List[HeldResult], now: float) -> None:
        """A worker registering again (its scheduler was lost) still holds these results. Those of tasks this
        scheduler does not know (it restarted) are kept for a while: a client resubmitting the task that made one is
        answered with it (_on_task, _settle_claims), not run again. One whose task was resubmitted already and waits
        is answered now; one known here, or whose task already runs elsewhere, the worker drops."""
        deadline = now + self.settings.client_timeout_seconds
        dropped: List[bytes] = []
        answered: List[Tuple[TaskState, int]] = []
        kept = 0
        seen: Set[bytes] = set()
        for held in held_results:
            object_id = held.object_id
            if not object_id or object_id in seen:
                continue
            seen.add(object_id)
            # known (freed ones kept as lineage too: their delete crossed the worker's reconnection), or another worker
            # holds it too
            if object_id in self.objects or object_id in self._unclaimed or object_id in self.lineage:
                dropped.append(object_id)
                continue
            task = self.tasks.get(object_id)
            if task is not None:
                if task.state in (WAITING, READY) and object_id not in self._recomputing:
                    answered.append((task, held.size))
                else:
                    dropped.append(object_id)
                continue
            self._unclaimed[object_id] = (worker.identity, held.size, deadline)
            self._unclaimed_order.append((deadline, object_id))
            kept += 1
        logger.info(
            "worker %s registered again holding %d result(s): %d kept %gs for the tasks clients resubmit, %d "
            "answering tasks resubmitted already, %d dropped",
            worker.name,
            len(held_results),
            kept,
            self.settings.client_timeout_seconds,
            len(answered),
            len(dropped),
        )
        if dropped:
            self._send_message(worker.identity, ObjectDelete(object_ids=dropped))
        for task, size in answered:
            self._answer_from_held(task, worker, size)

    def _settle_claims(self) -> None:
        """Tasks of the frame just read whose results a worker holds from before a restart: answered with them now
        that every node of the frame that reads one is linked to it. One canceled meanwhile frees what it claimed;
        one whose holder left meanwhile runs after all."""
        claims, self._claims = self._claims, []
        for task in claims:
            entry = self._unclaimed.pop(task.task_id, None)
            live = self.tasks.get(task.task_id) is task and task.state == WAITING
            if entry is None:  # its holder left
                if live and not task.pending_dependencies:
                    self._set_state(task, READY)
                    if task.dependency_ids:
                        self._inline_results(task)
                    task.queue.push(task)
                continue
            identity, size, _ = entry
            if live:
                self._answer_from_held(task, self.workers[identity], size)
            else:
                self._send_message(identity, ObjectDelete(object_ids=[task.task_id]))

    def _answer_from_held(self, task: TaskState, worker: WorkerState, size: int) -> None:
        """The task's result is held by `worker` from before a scheduler restart: it finishes as if it had just run
        there (its client told TaskResult{inObject, heldBytes}, its dependents released)."""
        task.worker = worker.identity
        self.adopted_results += 1
        self._finish(task, _SUCCESS, TaskResult(task_id=task.task_id, in_object=True, held_bytes=size), None)

    def _expire_unclaimed(self, now: float) -> None:
        """Held results nobody resubmitted a task for in time: their workers drop them."""
        order = self._unclaimed_order
        dropped: Dict[bytes, List[bytes]] = {}
        while order and order[0][0] <= now:
            deadline, object_id = order.popleft()
            entry = self._unclaimed.get(object_id)
            if entry is not None and entry[2] == deadline:
                del self._unclaimed[object_id]
                dropped.setdefault(entry[0], []).append(object_id)
        for identity, object_ids in dropped.items():
            logger.info(
                "worker %s: %d result(s) it held from before a restart were not claimed in time, dropped",
                self.workers[identity].name,
                len(object_ids),
            )
            self._send_message(identity, ObjectDelete(object_ids=object_ids))

    def _forget_unclaimed(self, worker: WorkerState) -> None:
        for object_id in [key for key, entry in self._unclaimed.items() if entry[0] == worker.identity]:
            del self._unclaimed[object_id]

    def _peer_state(self, peer: bytes) -> Any:
        return self.workers.get(peer) or self.clients.get(peer)

    def _validate_held(self) -> None:
        assert not set(self.lineage) & set(self.objects), "a recipe kept for a result that is still here"
        assert all(object_id in self.tasks for object_id in self._recomputing), "a result made again by no task"
        assert set(self._remade_uploads) <= set(self._recomputing), "an upload kept for a result not made again"
        refs: Dict[bytes, int] = {}
        recipes = [stored.producer for stored in self.objects.values() if stored.producer is not None]
        for recipe in [*recipes, *self.lineage.values()]:
            for dependency_id in recipe.dependency_ids:
                refs[dependency_id] = refs.get(dependency_id, 0) + 1
        assert refs == self._lineage_refs, "the recipes kept do not name what their references count"
        for identity, worker in self.workers.items():
            for object_id in worker.held:
                assert self.objects[object_id].holder == identity, f"{object_id.hex()} is not held where it is listed"
            assert worker.held_bytes == sum(self.objects[object_id].total_size for object_id in worker.held)
            assert not worker.handing or worker.retire_deadline is not None, "a worker not retiring hands results over"
            for object_id, target in worker.handing.items():
                assert object_id in worker.held, f"{object_id.hex()} handed over by a worker that does not hold it"
                assert target in self.workers and target != identity, "handed over to a worker that is not there"
        assert not self._claims, "claims left unsettled after a frame"
        for object_id, (identity, _, _) in self._unclaimed.items():
            assert identity in self.workers, "an unclaimed result of a worker that left"
            assert object_id not in self.objects and object_id not in self.workers[identity].held
        taking: Dict[bytes, int] = {}
        for worker in self.workers.values():
            for target in worker.handing.values():
                taking[target] = taking.get(target, 0) + 1
        assert all(worker.taking == taking.get(identity, 0) for identity, worker in self.workers.items())
        for object_id, stored in self.objects.items():
            if stored.chunk_count:
                task = self.tasks.get(object_id)
                # an upload comes from the attempt running: one that ended left none behind for the next
                assert task is None or task.worker is not None or object_id in self._recomputing, "a stale upload"
                continue
            if stored.holder is None:
                assert self._recomputing.get(object_id) is stored and object_id in self.tasks, "lost and not remade"
            elif stored.holder in self.clients:  # kept by the client that sent it
                assert stored.owner == stored.holder and object_id in self.clients[stored.holder].objects
            else:
                assert object_id in self.workers[stored.holder].held, f"{object_id.hex()} held but not listed"
            assert stored.uploading < 0 or stored.holder is not None, "an upload from no holder"

    def _local_worker(self, task: TaskState, eligible: List[WorkerLoads]) -> Optional[WorkerState]:
        """The worker holding the most bytes of the task's held inputs, if it takes tasks now and may run this one:
        the task then reads them where they are instead of moving them."""
        best: Optional[WorkerState] = None
        best_bytes = 0
        objects = self.objects
        for dependency_id in task.dependency_ids:
            stored = objects.get(dependency_id)
            if stored is None or stored.holder is None or stored.total_size <= best_bytes:
                continue
            holder = self.workers.get(stored.holder)
            if holder is not None and holder.takes_tasks and holder.loads in eligible:
                best, best_bytes = holder, stored.total_size
        return best
