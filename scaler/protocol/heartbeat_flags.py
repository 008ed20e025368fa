"""Internal: the bits of `WorkerHeartbeat.flags` (scaler.capnp declares the field as UInt8; this is what each bit
means).

Plain ints, not an IntFlag: the scheduler tests a bit per heartbeat under PyPy, and `int & IntFlag` is a Python call.
"""

PROCESSOR_INITIALIZED = 1  # the worker has a processor to hand tasks to
HAS_TASK = 2  # a task is queued or running on the worker
TASK_LOCK = 4  # the processor tasks are handed to is running one (not parked: see docs/protocol.md, nested tasks)
MEMORY_PAUSED = 8  # the worker is above its memory pause threshold: it starts no new task (docs/guide/memory.md); set
# only for a scheduler whose HelloReply said memoryPause

# In the order scaler_top shows them, as its ITL column.
ALL = (PROCESSOR_INITIALIZED, HAS_TASK, TASK_LOCK)
