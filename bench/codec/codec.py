"""Encode/decode benchmarks: scaler.protocol (fastpath) on this interpreter, and pycapnp when it is importable.

    python3 -m bench.codec.codec --fast                      # CPython: fastpath and pycapnp
    .venv-pypy/bin/python -m bench.codec.codec --fast        # PyPy: fastpath only
    python3 -m bench.codec.codec --fast --save cpython.json  # then combine runs from both interpreters:
    python3 -m bench.codec.codec --report cpython.json pypy.json

To compare two versions of the codec, run this file from a checkout of each (it measures the codec next to it),
the older one with ``--label base --impl fastpath``, and combine the saved runs: the report adds each column's
speed-up over the base column of the same interpreter.

pycapnp is measured the way an application would use it: build the message from Python values and to_bytes();
from_bytes() and read every field into the same Python objects fastpath returns. Medians are per operation.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any, Callable

import pyperf

from scaler.protocol import (
    Argument,
    ArgumentKind,
    ClientHeartbeat,
    Counter,
    HeartbeatEcho,
    ObjectKind,
    ObjectPut,
    SchedulerStatus,
    Task,
    TaskResult,
    TaskStatus,
    WorkerHeartbeat,
    WorkerStatus,
    decode_frame,
    encode,
)

try:
    import capnp
except ImportError:  # PyPy: pycapnp does not install there
    capnp = None

INTERPRETER = f"{platform.python_implementation()}-{platform.python_version()}"

MESSAGES: dict[str, Any] = {
    "Task": Task(
        task_id=bytes(range(16)),
        function_id=bytes(range(16, 32)),
        args=[
            Argument(kind=ArgumentKind.inline, data=b"\x80\x05\x95" + b"a" * 17),
            Argument(kind=ArgumentKind.inline, name="", data=b"\x80\x05\x95" + b"b" * 17),
        ],
    ),
    "TaskResult": TaskResult(
        task_id=bytes(range(16)), status=TaskStatus.success, payload=b"r" * 64, duration_us=1234, cpu_time_us=1000
    ),
    "WorkerHeartbeat": WorkerHeartbeat(
        sent_at_us=1_700_000_000_000_000,
        agent_cpu=1.5,
        agent_rss=50 << 20,
        processor_cpu=99.5,
        processor_rss=200 << 20,
        queued=12,
        lag_us=350,
        flags=3,
        running=1,
    ),
    "ClientHeartbeat": ClientHeartbeat(sent_at_us=1_700_000_000_000_000, cpu=12.5, rss=80 << 20),
    "HeartbeatEcho": HeartbeatEcho(sent_at_us=1_700_000_000_000_000),
    "ObjectPut 100KiB": ObjectPut(
        object_id=bytes(range(32)), kind=ObjectKind.object, name="big", payload=bytes(100 << 10), total_size=100 << 10
    ),
    "SchedulerStatus 10 workers": SchedulerStatus(
        time_us=1_700_000_000_000_000,
        cpu=12.5,
        rss=300 << 20,
        task_states=[Counter(name=state, value=index * 7) for index, state in enumerate(["queued", "running", "done"])],
        sent=[Counter(name=name, value=1000 + index) for index, name in enumerate(["Task", "TaskResult", "Hello"])],
        received=[Counter(name="TaskResult", value=999)],
        function_tasks=[Counter(name="module.function", value=42)],
        workers=[
            WorkerStatus(
                name=f"W|Linux|{1000 + index}|host",
                agent_cpu=1.0,
                agent_rss=50 << 20,
                cpu=99.0,
                rss=200 << 20,
                free=index % 3,
                sent=10 + index,
                queued=index,
                lag_us=300,
                flags=3,
                processed=index * 1000,
            )
            for index in range(10)
        ],
        clients=2,
        completed_tasks=123_456,
    ),
}


# ------------------------------------------------------------------------------------------------------------------
# pycapnp, written out per message type the way an application would (no generic field loops to slow it down)


def _pycapnp_schema() -> Any:
    capnp.remove_import_hook()
    return capnp.load(str(Path(__file__).resolve().parents[2] / "scaler" / "protocol" / "scaler.capnp"))


def pycapnp_codecs(schema: Any) -> dict[str, tuple[Callable[[Any], bytes], Callable[[bytes], Any]]]:
    new_message = schema.Message.new_message
    from_bytes = schema.Message.from_bytes

    def encode_task(v: Task) -> bytes:
        msg = new_message()
        t = msg.init("task")
        t.taskId = v.task_id
        t.functionId = v.function_id
        args = t.init("args", len(v.args))
        for arg, value in zip(args, v.args):
            arg.kind = int(value.kind)
            arg.name = value.name
            arg.data = value.data
        t.dependencies = v.dependencies
        t.profiling = v.profiling
        t.reportResult = v.report_result
        t.parentTaskId = v.parent_task_id
        t.serializerId = v.serializer_id
        return msg.to_bytes()

    def decode_task(data: bytes) -> Task:
        with from_bytes(data) as msg:
            t = msg.task
            return Task(
                task_id=t.taskId,
                function_id=t.functionId,
                args=[Argument(kind=a.kind.raw, name=a.name, data=a.data) for a in t.args],
                dependencies=list(t.dependencies),
                profiling=t.profiling,
                report_result=t.reportResult,
                parent_task_id=t.parentTaskId,
                serializer_id=t.serializerId,
            )

    def encode_task_result(v: TaskResult) -> bytes:
        msg = new_message()
        t = msg.init("taskResult")
        t.taskId = v.task_id
        t.status = int(v.status)
        t.payload = v.payload
        t.inObject = v.in_object
        t.errorText = v.error_text
        t.durationUs = v.duration_us
        t.cpuTimeUs = v.cpu_time_us
        t.peakMemory = v.peak_memory
        return msg.to_bytes()

    def decode_task_result(data: bytes) -> TaskResult:
        with from_bytes(data) as msg:
            t = msg.taskResult
            return TaskResult(
                task_id=t.taskId,
                status=t.status.raw,
                payload=t.payload,
                in_object=t.inObject,
                error_text=t.errorText,
                duration_us=t.durationUs,
                cpu_time_us=t.cpuTimeUs,
                peak_memory=t.peakMemory,
            )

    def encode_heartbeat(v: WorkerHeartbeat) -> bytes:
        msg = new_message()
        h = msg.init("workerHeartbeat")
        h.sentAtUs = v.sent_at_us
        h.agentCpu = v.agent_cpu
        h.agentRss = v.agent_rss
        h.processorCpu = v.processor_cpu
        h.processorRss = v.processor_rss
        h.queued = v.queued
        h.lagUs = v.lag_us
        h.flags = v.flags
        h.running = v.running
        return msg.to_bytes()

    def decode_heartbeat(data: bytes) -> WorkerHeartbeat:
        with from_bytes(data) as msg:
            h = msg.workerHeartbeat
            return WorkerHeartbeat(
                sent_at_us=h.sentAtUs,
                agent_cpu=h.agentCpu,
                agent_rss=h.agentRss,
                processor_cpu=h.processorCpu,
                processor_rss=h.processorRss,
                queued=h.queued,
                lag_us=h.lagUs,
                flags=h.flags,
                running=h.running,
            )

    def encode_client_heartbeat(v: ClientHeartbeat) -> bytes:
        msg = new_message()
        h = msg.init("clientHeartbeat")
        h.sentAtUs = v.sent_at_us
        h.cpu = v.cpu
        h.rss = v.rss
        return msg.to_bytes()

    def decode_client_heartbeat(data: bytes) -> ClientHeartbeat:
        with from_bytes(data) as msg:
            h = msg.clientHeartbeat
            return ClientHeartbeat(sent_at_us=h.sentAtUs, cpu=h.cpu, rss=h.rss)

    def encode_echo(v: HeartbeatEcho) -> bytes:
        msg = new_message()
        msg.init("heartbeatEcho").sentAtUs = v.sent_at_us
        return msg.to_bytes()

    def decode_echo(data: bytes) -> HeartbeatEcho:
        with from_bytes(data) as msg:
            return HeartbeatEcho(sent_at_us=msg.heartbeatEcho.sentAtUs)

    def encode_object_put(v: ObjectPut) -> bytes:
        msg = new_message()
        o = msg.init("objectPut")
        o.objectId = v.object_id
        o.kind = int(v.kind)
        o.name = v.name
        o.payload = v.payload
        o.chunkIndex = v.chunk_index
        o.chunkCount = v.chunk_count
        o.totalSize = v.total_size
        return msg.to_bytes()

    def decode_object_put(data: bytes) -> ObjectPut:
        with from_bytes(data, traversal_limit_in_words=1 << 40) as msg:
            o = msg.objectPut
            return ObjectPut(
                object_id=o.objectId,
                kind=o.kind.raw,
                name=o.name,
                payload=o.payload,
                chunk_index=o.chunkIndex,
                chunk_count=o.chunkCount,
                total_size=o.totalSize,
            )

    def fill_counters(builder: Any, name: str, counters: list[Counter]) -> None:
        items = builder.init(name, len(counters))
        for item, counter in zip(items, counters):
            item.name = counter.name
            item.value = counter.value

    def encode_status(v: SchedulerStatus) -> bytes:
        msg = new_message()
        s = msg.init("schedulerStatus")
        s.timeUs = v.time_us
        s.cpu = v.cpu
        s.rss = v.rss
        fill_counters(s, "taskStates", v.task_states)
        fill_counters(s, "sent", v.sent)
        fill_counters(s, "received", v.received)
        fill_counters(s, "functionTasks", v.function_tasks)
        workers = s.init("workers", len(v.workers))
        for w, value in zip(workers, v.workers):
            w.name = value.name
            w.agentCpu = value.agent_cpu
            w.agentRss = value.agent_rss
            w.cpu = value.cpu
            w.rss = value.rss
            w.free = value.free
            w.sent = value.sent
            w.queued = value.queued
            w.lagUs = value.lag_us
            w.flags = value.flags
            w.processed = value.processed
        s.clients = v.clients
        s.malformed = v.malformed
        s.completedTasks = v.completed_tasks
        return msg.to_bytes()

    def counters(items: Any) -> list[Counter]:
        return [Counter(name=item.name, value=item.value) for item in items]

    def decode_status(data: bytes) -> SchedulerStatus:
        with from_bytes(data) as msg:
            s = msg.schedulerStatus
            return SchedulerStatus(
                time_us=s.timeUs,
                cpu=s.cpu,
                rss=s.rss,
                task_states=counters(s.taskStates),
                sent=counters(s.sent),
                received=counters(s.received),
                function_tasks=counters(s.functionTasks),
                workers=[
                    WorkerStatus(
                        name=w.name,
                        agent_cpu=w.agentCpu,
                        agent_rss=w.agentRss,
                        cpu=w.cpu,
                        rss=w.rss,
                        free=w.free,
                        sent=w.sent,
                        queued=w.queued,
                        lag_us=w.lagUs,
                        flags=w.flags,
                        processed=w.processed,
                    )
                    for w in s.workers
                ],
                clients=s.clients,
                malformed=s.malformed,
                completed_tasks=s.completedTasks,
            )

    return {
        "Task": (encode_task, decode_task),
        "TaskResult": (encode_task_result, decode_task_result),
        "WorkerHeartbeat": (encode_heartbeat, decode_heartbeat),
        "ClientHeartbeat": (encode_client_heartbeat, decode_client_heartbeat),
        "HeartbeatEcho": (encode_echo, decode_echo),
        "ObjectPut 100KiB": (encode_object_put, decode_object_put),
        "SchedulerStatus 10 workers": (encode_status, decode_status),
    }


def fastpath_codecs() -> dict[str, tuple[Callable[[Any], bytes], Callable[[bytes], Any]]]:
    def decode_one(data: bytes) -> Any:
        return decode_frame(data)[0]

    return {name: (encode, decode_one) for name in MESSAGES}


def check_codecs(codecs: dict[str, tuple[Callable[[Any], bytes], Callable[[bytes], Any]]]) -> None:
    """Benchmarks of code that gives wrong answers are worthless: verify every pair first."""
    for name, (encoder, decoder) in codecs.items():
        original = MESSAGES[name]
        decoded = decoder(encoder(original))
        assert decoded == original, name  # the sample floats are exact in float32
        assert decode_frame(encoder(original))[0] == decoded, name


# ------------------------------------------------------------------------------------------------------------------
# reporting


def format_time(seconds: float) -> str:
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} us"
    return f"{seconds * 1e3:.2f} ms"


def print_table(results: dict[str, float]) -> None:
    """results: "implementation@interpreter|message|operation" -> median seconds."""
    columns = sorted({key.split("|")[0] for key in results})
    header = f"{'message':<28}{'op':<8}" + "".join(f"{column:>26}" for column in columns)
    print(header)
    print("-" * len(header))
    for message in MESSAGES:
        for operation in ("encode", "decode"):
            cells = [results.get(f"{column}|{message}|{operation}") for column in columns]
            if any(cell is not None for cell in cells):
                row = "".join(f"{format_time(cell) if cell else '-':>26}" for cell in cells)
                print(f"{message:<28}{operation:<8}{row}")
    print()
    for column in columns:
        pair = [results.get(f"{column}|Task|{operation}") for operation in ("encode", "decode")]
        if None not in pair:
            print(f"Task encode+decode, {column}: {format_time(sum(pair))}")
    print_speedups(results, columns)
    fastpath_pypy = [c for c in columns if c.startswith("fastpath@PyPy")]
    pycapnp_cpython = [c for c in columns if c.startswith("pycapnp@CPython")]
    for fast in fastpath_pypy:
        for reference in pycapnp_cpython:
            ours = results[f"{fast}|Task|encode"] + results[f"{fast}|Task|decode"]
            theirs = results[f"{reference}|Task|encode"] + results[f"{reference}|Task|decode"]
            print(
                f"\nTask encode+decode: {fast} {format_time(ours)} vs {reference} {format_time(theirs)}: "
                f"{theirs / ours:.1f}x faster (requirement: >= 3x)"
            )


def print_speedups(results: dict[str, float], columns: list[str]) -> None:
    """For each column beside a ``base@`` column of the same interpreter: how many times faster, per operation."""
    for base in (column for column in columns if column.startswith("base@")):
        interpreter = base.split("@", 1)[1]
        for column in columns:
            if column == base or not column.endswith("@" + interpreter) or column.startswith("pycapnp@"):
                continue
            print(f"\n{column} against {base} (times faster):")
            for message in MESSAGES:
                ratios = []
                for operation in ("encode", "decode"):
                    new, old = (
                        results.get(f"{column}|{message}|{operation}"),
                        results.get(f"{base}|{message}|{operation}"),
                    )
                    ratios.append(f"{operation} {old / new:5.2f}x" if new and old else f"{operation}     -")
                print(f"  {message:<28}" + "   ".join(ratios))
            pairs = [[results.get(f"{c}|Task|{op}") for op in ("encode", "decode")] for c in (base, column)]
            if None not in pairs[0] + pairs[1]:
                print(f"  {'Task encode+decode':<28}{sum(pairs[0]) / sum(pairs[1]):.2f}x")


def main() -> None:
    runner = pyperf.Runner(add_cmdline_args=lambda cmd, args: cmd.extend(["--impl", args.impl, "--label", args.label]))
    runner.argparser.add_argument("--impl", choices=["all", "fastpath", "pycapnp"], default="all")
    runner.argparser.add_argument("--label", default="fastpath", help="name of the fastpath column (e.g. base)")
    runner.argparser.add_argument("--save", type=Path, help="write medians as JSON for --report")
    runner.argparser.add_argument("--report", type=Path, nargs="+", help="only print a table from saved runs")
    args = runner.parse_args()
    if args.report:
        merged: dict[str, float] = {}
        for path in args.report:
            merged.update(json.loads(path.read_text()))
        print_table(merged)
        return

    implementations = {}
    if args.impl in ("all", "fastpath"):
        implementations["fastpath"] = fastpath_codecs()
    if args.impl in ("all", "pycapnp") and capnp is not None:
        implementations["pycapnp"] = pycapnp_codecs(_pycapnp_schema())
    results: dict[str, float] = {}
    for implementation, codecs in implementations.items():
        check_codecs(codecs)
        column = f"{args.label if implementation == 'fastpath' else implementation}@{INTERPRETER}"
        for name, (encoder, decoder) in codecs.items():
            frame = encoder(MESSAGES[name])
            for operation, func, arg in (("encode", encoder, MESSAGES[name]), ("decode", decoder, frame)):
                benchmark = runner.bench_func(f"{column} {name} {operation}", func, arg)
                if benchmark is not None and not args.worker:  # pyperf's worker processes only measure
                    results[f"{column}|{name}|{operation}"] = benchmark.median()
    if args.worker:
        return
    print()
    print_table(results)
    if args.save:
        args.save.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
