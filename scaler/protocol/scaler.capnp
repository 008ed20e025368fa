@0xd4a2c7e91b3f5a60;
# Scaler wire protocol, version 1.
#
# This file is the single source of truth for every message exchanged between clients, the scheduler, workers and
# monitors. docs/protocol.md explains framing over ZeroMQ, the handshake and the task lifecycle.
#
# Every ZeroMQ payload frame holds one or more Cap'n Proto messages in standard stream framing (segment table, then
# segments), concatenated. The root of each message is `Message`.
#
# Identifiers (task ids, object ids) are opaque byte strings chosen by the party that creates them; clients use
# 16 bytes. Object ids of functions and objects are content ids (a hash of the serialized bytes, salted by client).
#
# Field numbers are never reused or renumbered; new fields are only appended. That is what keeps v1 peers compatible.

const protocolVersion :UInt32 = 1;

enum Role {
  client @0;
  worker @1;
  monitor @2;
}

enum ArgumentKind {
  inline @0;      # data is the serialized value
  objectRef @1;   # data is the id of an object put with ObjectPut
  taskRef @2;     # data is the id of a task whose result is the value (graph edges)
}

enum TaskStatus {
  success @0;     # payload (or the result object) is the serialized return value
  failed @1;      # payload is the serialized exception, errorText its traceback as text
  canceled @2;    # the task was canceled before it finished
  notFound @3;    # the receiver does not know this task id
  workerDied @4;  # the process running the task died too many times (retry cap reached)
  refused @5;     # the scheduler refused the task (limits, protected state); errorText says why
  timedOut @6;    # the task ran longer than its timeoutMs: the worker stopped it (replaced its processor); sent only for
                  # tasks with timeoutMs > 0, so only to clients that know it
  actorLost @7;   # the actor the task calls (Task.actorId) is gone: its worker or process died, it was closed, or its
                  # constructor raised; errorText says which. Sent only for actor tasks, so only to clients that know it
}

struct Resource {
  # A named amount: what a worker offers (Hello.resources) or what a task needs (Task.resources), e.g. gpu = 1.
  name @0 :Text;
  amount @1 :Float64;
}

struct FunctionPeak {
  # The most memory a worker saw its task processes use while running tasks of a function (WorkerHeartbeat).
  functionId @0 :Data;   # as in Task.functionId
  peakBytes @1 :UInt64;
}

enum ObjectKind {
  object @0;      # sent by Client.send_object or a large argument
  function @1;    # a serialized function; name is its qualified name
  result @2;      # a large task result, its id is the task id
  serializer @3;  # a client's serializer (cloudpickled), used by workers for its functions, arguments and results
}

struct HeldResult {
  # A result a worker holds (Hello.heldResults): its object id (the id of the task that made it) and its size.
  objectId @0 :Data;
  size @1 :UInt64;
}

struct Hello {
  # First message of every client and worker connection (monitors subscribe and send nothing).
  protocolVersion @0 :UInt32;
  role @1 :Role;
  name @2 :Text;            # human readable identity, e.g. "W|Linux|1234|host"
  hostname @3 :Text;
  pid @4 :UInt32;
  capacity @5 :UInt32;      # workers: how many tasks it accepts at once (queued + running)
  previousRegistrations @6 :UInt32;  # how often this peer registered before (with a scheduler that died, or that
                                     # lost its connection): 0 on its first Hello. The scheduler logs and counts them.
  resources @7 :List(Resource);      # workers: what each of its task slots may use (scaler_cluster --resources); a task
                                     # needing resources runs only on a worker offering at least that much of each
  taskPolicies @8 :Bool;             # workers: it runs its queue in Task.priority order and enforces Task.timeoutMs
                                     # (older workers ignore both)
  replaces @9 :Text;                 # workers: this worker was started in place of one its cluster lost, and why
                                     # (e.g. "Worker[0] pid 123: its agent stalled for 10.2s"); the scheduler logs and
                                     # counts it (SchedulerStatus.workersReplaced)
  dataAddress @10 :Text;             # workers: where it serves the results it holds (DataRequest); empty: it sends
                                     # large results to the scheduler (ObjectPut), as older workers do. Clients: where
                                     # it serves the large objects it keeps (ObjectPut.heldBySender)
  fetchesFromHolders @11 :Bool;      # clients and workers: it understands ObjectResponse.holderAddress and fetches
                                     # from there; older peers get the bytes through the scheduler
  heldResults @12 :List(HeldResult); # workers registering again (a lost scheduler): the results it still holds, which
                                     # a restarted scheduler keeps for the tasks clients resubmit (see
                                     # HelloReply.adoptsHeldResults)
  takesHandoffs @13 :Bool;           # workers: it fetches and holds the results a retiring worker hands over
                                     # (ObjectRequest.takeFrom)
  memoryLimit @14 :UInt64;           # workers: its memory limit in bytes (scaler_cluster --memory-limit); 0: none
  actorSlots @15 :UInt32;            # workers: how many actors it hosts at most, each in a process of its own (0: none)
  actors @16 :List(Data);            # registering again (a lost scheduler): workers, the actors they still host;
                                     # clients, the actors they created and still hold handles of
}

struct HelloReply {
  protocolVersion @0 :UInt32;  # the scheduler's own version
  accepted @1 :Bool;
  reason @2 :Text;             # why it was refused, for the peer to show its user
  heartbeatIntervalMs @3 :UInt32;
  peerTimeoutMs @4 :UInt32;    # a peer silent this long is considered gone
  forwardsTaskOutput @5 :Bool; # the scheduler forwards TaskOutput: only then do workers send it (older ones would
                               # drop the whole frame), and only then is a client's streamOutput honoured
  resumed @6 :Bool;            # the scheduler already had this peer registered (a Hello again after a dropped
                               # connection): what it held for the peer is still there
  taskPolicies @7 :Bool;       # the scheduler honours Task.resources, priority and retries: only then may a client
                               # set them (an older scheduler would ignore them)
  maxFrameBytes @8 :UInt64;    # the largest frame the scheduler reads (--max-frame-bytes; ZeroMQ drops the connection
                               # of a peer that sends more): peers split objects under it and refuse larger frames
                               # themselves. 0: an older scheduler, whose limit is the default (512 MiB)
  holdsOnWorkers @9 :Bool;     # workers with a dataAddress keep their large results and say so (TaskResult.heldBytes)
                               # instead of putting them; an older scheduler leaves it false
  holdsOnClients @10 :Bool;    # clients with a dataAddress keep their large objects (arguments, functions, serializers,
                               # send_object) and put only their size (ObjectPut.heldBySender); an older scheduler
                               # leaves it false, and they are put whole
  relayPort @11 :UInt16;       # the data relay's port, on the host the peer reaches the scheduler at (RelayHello,
                               # DataRequest.holderAddress); 0: no relay (an older scheduler, or --no-relay)
  adoptsHeldResults @12 :Bool; # the scheduler read Hello.heldResults: the worker keeps them until told to drop them
                               # (ObjectDelete); false (an older scheduler): it drops them at once
  memoryPause @13 :Bool;       # the scheduler understands heartbeat_flags.MEMORY_PAUSED (it moves a paused worker's
                               # queued tasks away): only then do workers set it
  actors @14 :Bool;            # the scheduler places actors and routes their calls (Task.actorId, ActorRelease)
}

struct ClientHeartbeat {
  sentAtUs @0 :UInt64;   # sender's monotonic clock, echoed back in HeartbeatEcho
  cpu @1 :Float32;       # percent of one core
  rss @2 :UInt64;        # bytes
  intervalMs @3 :UInt32; # the interval it heartbeats at now (0: an older client, which keeps HelloReply's)
}

struct WorkerHeartbeat {
  sentAtUs @0 :UInt64;
  agentCpu @1 :Float32;     # the process talking to the scheduler
  agentRss @2 :UInt64;
  processorCpu @3 :Float32; # the process running user code
  processorRss @4 :UInt64;
  queued @5 :UInt32;        # tasks received and waiting
  lagUs @6 :UInt64;         # last measured round trip to the scheduler
  flags @7 :UInt8;          # bits: scaler/protocol/heartbeat_flags.py (initialized, has a task, task lock)
  running @8 :UInt32;       # tasks executing now (0 or 1)
  intervalMs @9 :UInt32;    # the interval it heartbeats at now (0: an older worker, which keeps HelloReply's)
  spilledBytes @10 :UInt64; # held results it moved to disk to stay under its memory limit (docs/guide/memory.md)
  functionPeaks @11 :List(FunctionPeak);  # with a memory limit: functions whose peak rose since the last heartbeat
                                          # (sampled while their tasks ran); the scheduler learns from them
}

struct HeartbeatEcho {
  sentAtUs @0 :UInt64;
  heartbeatIntervalMs @1 :UInt32;  # the cadence from now on, as in HelloReply: the scheduler stretches it as peers
  peerTimeoutMs @2 :UInt32;        # join (docs/protocol.md, Heartbeat cadence). 0: unchanged (older scheduler)
}

struct Argument {
  kind @0 :ArgumentKind;
  name @1 :Text;      # keyword name; empty for a positional argument
  data @2 :Data;
}

struct Task {
  taskId @0 :Data;
  functionId @1 :Data;          # object id of the serialized function (ObjectKind.function)
  args @2 :List(Argument);
  dependencies @3 :List(Data);  # task ids that must succeed before this one runs
  profiling @4 :Bool;
  reportResult @5 :Bool = true; # false for graph nodes the client did not ask for
  parentTaskId @6 :Data;        # set when submitted from inside a running task (nested tasks)
  serializerId @7 :Data;        # object id of the client's serializer; empty means cloudpickle
  streamOutput @8 :Bool;        # forward what the task writes to stdout and stderr to its client (TaskOutput)
  resources @9 :List(Resource); # run only on a worker whose Hello.resources offer at least this much of each
  priority @10 :Int32;          # higher runs first, among the scheduler's ready tasks and in a worker's queue; equal
                                # priorities keep submission order. The scheduler raises a nested task's priority to at
                                # least its parent's + 1 (and sends workers the priority it uses)
  retries @11 :UInt32;          # run again (on any worker) up to this often when the function raises or times out
  timeoutMs @12 :UInt32;        # 0: none. The worker stops the task once it has run this long: status timedOut
  actorId @13 :Data;            # an actor task (HelloReply.actors): it creates this actor (createsActor) or calls one
                                # of its methods. The scheduler places a creation on a worker with a free actor slot
                                # (Hello.actorSlots) and sends every call to that worker, in arrival order; the worker
                                # runs them one at a time in the actor's process. Never retried, never balanced
  createsActor @14 :Bool;
}

struct TaskResult {
  taskId @0 :Data;
  status @1 :TaskStatus;
  payload @2 :Data;         # inline serialized result or exception; empty when inObject
  inObject @3 :Bool;        # the payload was too large and is stored as object with id = taskId
  errorText @4 :Text;       # failed/workerDied/refused: human readable error and traceback
  durationUs @5 :UInt64;    # profiling: wall time of the call
  cpuTimeUs @6 :UInt64;     # profiling: CPU time of the call
  peakMemory @7 :UInt64;    # profiling: peak RSS growth during the call, bytes
  attempts @8 :UInt32;      # scheduler to client: how often the task was started on a worker (retries and worker
                            # deaths included); 0 from workers and older schedulers, meaning one
  heldBytes @9 :UInt64;     # with inObject: the result was not put; the worker that sent this holds it, this large,
                            # and serves it at its Hello.dataAddress (see ObjectResponse.holderAddress)
  memoryLimit @10 :UInt64;  # failed: it went past its worker's memory limit, this many bytes (MemoryLimitError), and
                            # peakMemory is the most it was seen to use; the scheduler runs it again only on a worker
                            # with a larger limit (docs/guide/memory.md). 0: another failure, or an older worker
}

enum OutputStream {
  stdout @0;
  stderr @1;
}

struct TaskOutput {
  # Worker to scheduler, forwarded as is to the task's client: what a task with streamOutput wrote, in order per
  # stream, sent before the task's TaskResult. `data` holds whole lines, except a line longer than the worker's batch
  # size (split) and the task's last output (which may not end with a newline).
  taskId @0 :Data;
  stream @1 :OutputStream;
  data @2 :Data;
}

struct TaskCancel {
  taskIds @0 :List(Data);
}

struct ObjectPut {
  # Objects larger than one chunk travel as several ObjectPut messages with the same id, chunkIndex 0..chunkCount-1.
  objectId @0 :Data;
  kind @1 :ObjectKind;
  name @2 :Text;
  payload @3 :Data;
  chunkIndex @4 :UInt32;
  chunkCount @5 :UInt32 = 1;
  totalSize @6 :UInt64;
  heldBySender @7 :Bool;  # clients, when HelloReply.holdsOnClients: the client keeps the object and serves it at its
                          # Hello.dataAddress; no payload, chunkCount 0, totalSize its size
}

struct ObjectRequest {
  objectIds @0 :List(Data);
  viaScheduler @1 :Bool;  # the bytes themselves, relayed by the scheduler, not where they are: the requester could
                          # not reach the holder. Scheduler to a worker: upload these held results (ObjectPut)
  takeFrom @2 :Text;      # scheduler to a worker that said Hello.takesHandoffs: fetch these results from the worker
                          # serving at this data address (a retiring holder) and hold them; it answers each with
                          # ObjectResponse{found, totalSize}: found = true once it holds it, false if it could not
  takeFromKey @3 :Data;   # with CurveZMQ: the key that data address serves under (its DataKeys.publicKey)
}

struct ObjectResponse {
  objectId @0 :Data;
  found @1 :Bool;
  kind @2 :ObjectKind;
  name @3 :Text;
  payload @4 :Data;
  chunkIndex @5 :UInt32;
  chunkCount @6 :UInt32 = 1;
  totalSize @7 :UInt64;
  holderAddress @8 :Text;  # found, and held by the worker serving at this address (Hello.dataAddress): fetch it
                           # there with DataRequest. No payload then. Sent only to peers with Hello.fetchesFromHolders
  holderPublicKey @9 :Data;  # with holderAddress, when the scheduler uses CurveZMQ: the holder's public key (32 bytes,
                             # DataKeys.publicKey), which its data address serves under; connect to it as a CURVE
                             # client of that key. Empty: no CurveZMQ (or an older scheduler): a peer with CurveZMQ
                             # keys then asks for the bytes with ObjectRequest.viaScheduler instead
}

struct DataRequest {
  # On a data address (a ROUTER; requesters connect a DEALER): send me these results or objects it holds.
  objectIds @0 :List(Data);
  holderAddress @1 :Text;  # to the relay: forward this to the peer serving at that data address (RelayHello)
  replyTo @2 :Data;        # from the relay to that peer: who asked; echoed in each DataResponse
}

struct RelayHello {
  # A peer that serves data, on its connection to the relay (a DEALER to HelloReply.relayPort): requests for this
  # data address may come this way, with their replyTo (peers that cannot reach it directly ask the relay).
  dataAddress @0 :Text;
}

struct DataResponse {
  # One chunk of a held result, answering DataRequest. Its bytes are the next ZeroMQ frame part of the same message
  # (a data address speaks two-part messages: this, then the payload), so that they are never copied into a
  # Cap'n Proto Data field nor limited to 2^29 bytes. found = false: not held there (freed, or never held); no part.
  objectId @0 :Data;
  found @1 :Bool;
  chunkIndex @2 :UInt32;
  chunkCount @3 :UInt32 = 1;
  totalSize @4 :UInt64;
  replyTo @5 :Data;        # DataRequest.replyTo, echoed: the relay passes the chunk on to that requester
}

struct DataKeys {
  # CurveZMQ on data addresses (docs/deployment/security.md, "Data addresses"); sent only when the scheduler uses it.
  # Scheduler to a peer whose Hello has a dataAddress, just before its HelloReply (same frame): the public keys the
  # scheduler accepts, which are the ones its data address accepts too (authorizedKeys). The peer answers with its
  # own DataKeys: the public key its data address serves under (publicKey), which the scheduler hands to requesters
  # (ObjectResponse.holderPublicKey). A peer holds nothing for others before it has this exchange behind it.
  publicKey @0 :Data;              # 32 bytes
  authorizedKeys @1 :List(Data);   # 32 bytes each
}

struct ActorRelease {
  # Client to scheduler: free these actors it created (ActorHandle.close, its handle collected); the calls sent
  # before still run. Scheduler to worker: free them once the calls it was sent before have run. Worker to
  # scheduler: they are gone (freed, or lost: their process died, their constructor raised), and `reason` says why.
  actorIds @0 :List(Data);
  reason @1 :Text;
}

struct ActorStatus {
  actorId @0 :Data;
  name @1 :Text;        # its class's qualified name
  worker @2 :Text;      # the name of the worker hosting it; empty while it waits for a free actor slot
  pending @3 :UInt32;   # calls sent and not answered yet
  calls @4 :UInt64;     # method calls answered since it was created (its creation aside)
}

struct ObjectDelete {
  objectIds @0 :List(Data);
}

struct BalanceRequest {
  # Scheduler to worker: hand back up to `count` tasks that are queued and not running.
  count @0 :UInt32;
}

struct BalanceResponse {
  # Worker to scheduler: these tasks were removed from its queue and will not run there.
  taskIds @0 :List(Data);
}

struct ClientDisconnect {
  shutdownCluster @0 :Bool;   # ask the scheduler to stop itself and every worker (refused in protected mode)
}

struct DisconnectReply {
  accepted @0 :Bool;
  reason @1 :Text;
}

struct WorkerDisconnect {
  reason @0 :Text;
}

struct WorkerRetire {
  # Worker to scheduler: take this worker out of the pool without losing or repeating a task (its scaler_cluster got
  # SIGTERM: an autoscaler, Slurm or Kubernetes is ending its job). The scheduler sends it no new task, takes back
  # its queued ones (BalanceRequest) for other workers, lets the running one finish, then says Goodbye(retired).
  reason @0 :Text;
  deadlineMs @1 :UInt32;  # a task still running here this long after the request is run again elsewhere (its late
                          # result is ignored) and the worker is told to go; 0: at once
}

struct Goodbye {
  # Scheduler to a peer: the scheduler is stopping, or has dropped this peer.
  reason @0 :Text;
  reconnect @1 :Bool;   # register again (Hello) rather than leave: this scheduler does not know the peer (it was
                        # restarted), or it stops on a signal and one may come back on its address (an upgrade)
  retired @2 :Bool;     # the end of a WorkerRetire: every task the worker held is settled or runs elsewhere; it exits
}

struct Counter {
  name @0 :Text;
  value @1 :UInt64;
}

struct WorkerStatus {
  name @0 :Text;
  agentCpu @1 :Float32;
  agentRss @2 :UInt64;
  cpu @3 :Float32;
  rss @4 :UInt64;
  free @5 :UInt32;
  sent @6 :UInt32;
  queued @7 :UInt32;
  lagUs @8 :UInt64;
  flags @9 :UInt8;
  processed @10 :UInt64;
  previousRegistrations @11 :UInt32;  # from its Hello: >0 for a worker that registered again after a lost scheduler
  retiring @12 :Bool;                 # it asked to retire (WorkerRetire): it gets no new task and leaves once done
  resources @13 :List(Resource);      # from its Hello
  memoryLimit @14 :UInt64;            # from its Hello: bytes, 0 for none
  spilledBytes @15 :UInt64;           # from its last heartbeat: held results it keeps on disk
  actors @16 :UInt32;                 # actors it hosts
}

struct SchedulerStatus {
  # Published on the monitor socket about once a second.
  timeUs @0 :UInt64;          # scheduler wall clock, microseconds since the epoch
  cpu @1 :Float32;
  rss @2 :UInt64;
  taskStates @3 :List(Counter);
  sent @4 :List(Counter);      # message counts by type
  received @5 :List(Counter);
  functionTasks @6 :List(Counter);  # tasks in flight by function name
  workers @7 :List(WorkerStatus);
  clients @8 :UInt32;
  malformed @9 :UInt64;        # frames dropped because they did not decode
  completedTasks @10 :UInt64;  # total finished since start, for rates
  # Demand, for autoscalers: counts the scheduler keeps as tasks and workers change (see docs/protocol.md, Monitoring).
  tasksWaiting @11 :UInt64;     # held by the scheduler on no worker: ready, or waiting on dependencies
  tasksReady @12 :UInt64;       # of tasksWaiting, those that could run now if a worker had a free slot (not those
                                # of tasksNeedingResources: more workers like the connected ones would not start them)
  tasksAssigned @13 :UInt64;    # sent to workers and not finished: queued there or running (canceling included)
  tasksRunning @14 :UInt64;     # running, as each worker said in its last heartbeat (parked tasks included)
  workerCount @15 :UInt32;      # workers connected
  idleWorkers @16 :UInt32;      # workers holding no task (tasks parked on nested tasks aside)
  workerSlots @17 :UInt64;      # the workers' capacities, summed
  freeSlots @18 :UInt64;        # slots free for one more task, summed over workers (a parked task lends its slot)
  oldestReadyWaitUs @19 :UInt64;  # how long the task first in line of tasksReady has waited for a worker; 0 if none
  registeredAgain @20 :UInt64;     # clients and workers whose Hello said they had registered before (a lost scheduler)
  tasksNeedingResources @21 :UInt64;  # ready tasks no connected worker (retiring ones aside) offers the resources
                                      # for: not in tasksReady, in tasksWaiting
  retriedTasks @22 :UInt64;        # task attempts started again after the function raised or timed out, since start
  workersLost @23 :UInt64;         # workers removed because they went silent (no heartbeat), since start
  workersReplaced @24 :UInt64;     # workers whose Hello.replaces said a cluster started them in place of a lost one
  relayedFetches @25 :UInt64;      # DataRequests the relay passed on (peers that cannot reach a holder), since start
  relayedBytes @26 :UInt64;        # bytes of DataResponse chunks it passed on, since start
  actors @27 :List(ActorStatus);   # live actors, placed or waiting for a slot
}

struct Message {
  union {
    hello @0 :Hello;
    helloReply @1 :HelloReply;
    clientHeartbeat @2 :ClientHeartbeat;
    workerHeartbeat @3 :WorkerHeartbeat;
    heartbeatEcho @4 :HeartbeatEcho;
    task @5 :Task;
    taskResult @6 :TaskResult;
    taskCancel @7 :TaskCancel;
    objectPut @8 :ObjectPut;
    objectRequest @9 :ObjectRequest;
    objectResponse @10 :ObjectResponse;
    objectDelete @11 :ObjectDelete;
    balanceRequest @12 :BalanceRequest;
    balanceResponse @13 :BalanceResponse;
    clientDisconnect @14 :ClientDisconnect;
    disconnectReply @15 :DisconnectReply;
    workerDisconnect @16 :WorkerDisconnect;
    goodbye @17 :Goodbye;
    schedulerStatus @18 :SchedulerStatus;
    taskOutput @19 :TaskOutput;
    workerRetire @20 :WorkerRetire;
    dataRequest @21 :DataRequest;
    dataResponse @22 :DataResponse;
    relayHello @23 :RelayHello;
    dataKeys @24 :DataKeys;
    actorRelease @25 :ActorRelease;
  }
}
