"""Internal: starting processors: a small fork server ("zygote") that the worker forks before it creates any ZeroMQ
context.

Why: fork() is the fastest way to start a processor (no interpreter start-up, modules already imported), but forking
the agent itself once it runs ZeroMQ would copy a process whose libzmq threads, locks and sockets the child must never
touch. The zygote is forked from the worker while it is still single-threaded and has no ZeroMQ context, and never
creates one, so every processor it forks, the first and any replacement after a kill or a crash, starts from the same
clean, single-threaded state, in a millisecond. It also reaps its children and reports how each one ended, which the
agent needs to tell a user why a task's processor died.

Agent and zygote talk over a SOCK_SEQPACKET pair: the agent sends b"fork", the zygote answers ("forked", pid, nonce)
with the agent's end of a fresh socket pair, the processor's shared progress memory and the read ends of its two
output pipes attached (SCM_RIGHTS; see capture.py for the pipes and the nonce), and sends ("exited", pid,
wait_status) whenever a processor ends.
"""

from __future__ import annotations

import array
import faulthandler
import logging
import os
import pickle
import select
import signal
import socket
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Set, Tuple, Union

from scaler import config
from scaler.logs import flush_logs
from scaler.worker.capture import OutputCapture, make_pipes
from scaler.worker.channel import SharedProgress
from scaler.worker.lifetime import die_with_parent, parent_alive
from scaler.worker.memory import PROCESSOR_OOM_SCORE_ADJ, join_cgroup, set_own_oom_score_adj
from scaler.worker.processor import run_processor
from scaler.worker.watchdog import STACKS_SIGNAL

_FORK_REQUEST = b"fork"
_REPLY_BYTES = 4096
_MAX_FDS = 4  # a fork reply carries the channel, the shared progress and two output pipes


class ForkedProcessor(NamedTuple):
    pid: int
    sock: socket.socket  # the agent's end of its channel
    progress: SharedProgress
    output_fds: Tuple[int, int]  # read ends of its stdout and stderr pipes (capture.py)
    output_nonce: bytes


class ZygoteGone(RuntimeError):
    """The fork server died: the worker can start no more processors."""


class ProcessorZygote:
    """The agent's handle on its fork server."""

    def __init__(self, control: socket.socket, pid: int) -> None:
        self._control = control
        self.pid = pid
        self._exit_statuses: Dict[int, int] = {}
        self._unwanted_exits: Set[int] = set()

    @classmethod
    def start(
        cls,
        before_processor: Optional[Callable[[socket.socket], None]] = None,
        environment: Optional[Dict[str, str]] = None,
    ) -> ProcessorZygote:
        """Fork the zygote. Must be called before this process creates a ZeroMQ context or any thread.
        `before_processor` runs in each processor forked, given its channel, before it serves the agent (preload.py);
        `environment` is added to the environment of the zygote, so of every processor (native_threads.py)."""
        agent_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        agent_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            agent_end.close()
            # The agent's stack dumps for its launcher (scaler/worker/watchdog.py) are the agent's; in processors
            # SIGUSR1 is the user's, as in any process.
            faulthandler.unregister(STACKS_SIGNAL)
            if environment:
                os.environ.update(environment)
            exit_code = 0
            try:
                _serve(zygote_end, agent_pid, before_processor)
            except BaseException:  # noqa: B036 - report anything, then leave without running the agent's cleanup
                logging.exception("processor fork server failed")
                exit_code = 1
            finally:
                flush_logs()  # os._exit skips the flush at exit
                os._exit(exit_code)
        zygote_end.close()
        return cls(agent_end, pid)

    def fileno(self) -> int:
        return self._control.fileno()

    def fork_processor(self, timeout_seconds: float, cgroup_procs: str = "") -> ForkedProcessor:
        """A new processor, with the agent's ends of what it shares with it; it enters the memory cgroup whose
        cgroup.procs file is `cgroup_procs`, if given, before it runs anything (scaler/worker/memory.py)."""
        try:
            self._control.send(_FORK_REQUEST + (b"\0" + os.fsencode(cgroup_procs) if cgroup_procs else b""))
        except OSError as error:
            raise ZygoteGone(f"processor fork server is gone: {error}") from error
        deadline = time.monotonic() + timeout_seconds
        while True:
            reply, fds = self._receive(deadline)
            if reply[0] == "forked":
                progress = SharedProgress(fds[1])
                os.close(fds[1])
                return ForkedProcessor(reply[1], socket.socket(fileno=fds[0]), progress, (fds[2], fds[3]), reply[2])
            self._record_exit(reply[1], reply[2])

    def read_exits(self) -> None:
        """Take in the exit reports waiting on the control socket, without blocking."""
        while True:
            try:
                data, fds = _receive_with_fds(self._control, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError as error:
                raise ZygoteGone(f"processor fork server is gone: {error}") from error
            if not data:
                raise ZygoteGone("processor fork server exited")
            for fd in fds:
                os.close(fd)
            reply = pickle.loads(data)
            self._record_exit(reply[1], reply[2])

    def has_exited(self, pid: int) -> bool:
        return pid in self._exit_statuses

    def wait_exit(self, pid: int, timeout_seconds: float) -> Optional[int]:
        """The wait status of processor `pid` once the zygote has reaped it; None if not reported in time."""
        deadline = time.monotonic() + timeout_seconds
        while pid not in self._exit_statuses:
            try:
                reply, fds = self._receive(deadline)
            except TimeoutError:
                return None
            for fd in fds:
                os.close(fd)
            self._record_exit(reply[1], reply[2])
        return self._exit_statuses.pop(pid)

    def ignore_exit(self, pid: int) -> None:
        """The agent killed `pid` itself and does not care how it ended."""
        if self._exit_statuses.pop(pid, None) is None:
            self._unwanted_exits.add(pid)

    def stop(self, timeout_seconds: float) -> None:
        """Closing the control socket makes the zygote exit; its processors then die with it (PDEATHSIG)."""
        self._control.close()
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            if os.waitpid(self.pid, os.WNOHANG)[0] != 0:
                return
            time.sleep(0.005)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)

    def _receive(self, deadline: float) -> Tuple[tuple, List[int]]:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("processor fork server did not answer in time")
            if not select.select([self._control], [], [], remaining)[0]:
                continue
            try:
                data, fds = _receive_with_fds(self._control, 0)
            except OSError as error:
                raise ZygoteGone(f"processor fork server is gone: {error}") from error
            if not data:
                raise ZygoteGone("processor fork server exited")
            return pickle.loads(data), fds

    def _record_exit(self, pid: int, wait_status: int) -> None:
        if pid in self._unwanted_exits:
            self._unwanted_exits.discard(pid)
        else:
            self._exit_statuses[pid] = wait_status


def _receive_with_fds(sock: socket.socket, flags: int) -> Tuple[bytes, List[int]]:
    # Not socket.recv_fds: up to Python 3.12 it ignores its flags argument, so MSG_DONTWAIT would block.
    fds = array.array("i")
    data, ancillary, _, _ = sock.recvmsg(_REPLY_BYTES, socket.CMSG_LEN(_MAX_FDS * fds.itemsize), flags)
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return data, list(fds)


def describe_wait_status(wait_status: Optional[int]) -> str:
    if wait_status is None:
        return "an unknown status"
    code = os.waitstatus_to_exitcode(wait_status)
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _serve(control: socket.socket, agent_pid: int, before_processor: Optional[Callable[[socket.socket], None]]) -> None:
    die_with_parent(agent_pid)
    # Ctrl-C reaches the whole process group, and a job manager's SIGTERM may reach every process of the job (it
    # retires the worker): the agent decides when the fork server stops. Processors set their own SIGTERM handler.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # a Python handler is what makes the wakeup fd fire
    while True:
        watched: List[Union[socket.socket, int]] = [control, wake_read]
        readable = select.select(watched, [], [], config.DEFAULT_ORPHAN_CHECK_INTERVAL_SECONDS)[0]
        if not parent_alive(agent_pid):
            return
        if wake_read in readable:
            _drain(wake_read)
            if not _report_exits(control):
                return  # the agent closed its end: it is stopping
        if control in readable:
            try:
                request = control.recv(_REPLY_BYTES)
            except ConnectionError:
                return  # the agent closed its end with exit reports still unread: it is stopping
            if not request:
                return  # the agent closed its end: it is stopping
            _, _, cgroup_procs = request.partition(b"\0")
            _fork_processor(control, (wake_read, wake_write), os.fsdecode(cgroup_procs), before_processor)


def _fork_processor(
    control: socket.socket,
    wake_fds: Tuple[int, int],
    cgroup_procs: str = "",
    before_processor: Optional[Callable[[socket.socket], None]] = None,
) -> None:
    agent_end, processor_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    progress_fd = SharedProgress.create_fd()
    (stdout_read, stdout_write), (stderr_read, stderr_write), nonce = make_pipes()
    zygote_pid = os.getpid()
    pid = os.fork()
    if pid == 0:
        exit_code = 0
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in wake_fds:
                os.close(fd)
            control.close()
            agent_end.close()
            os.close(stdout_read)
            os.close(stderr_read)
            # Its own process group, so that killing a processor also kills whatever its task started.
            os.setpgid(0, 0)
            # The OOM killer's first choice, before the agent; inside its memory limit before it runs anything.
            set_own_oom_score_adj(PROCESSOR_OOM_SCORE_ADJ)
            if cgroup_procs:
                try:
                    join_cgroup(cgroup_procs)
                except OSError as error:
                    logging.warning("processor %d runs outside its memory cgroup: %s", os.getpid(), error)
            orphan_signal_armed = die_with_parent(zygote_pid)
            if before_processor is not None:  # in its cgroup, its own process: what it loads is this processor's
                before_processor(processor_end)
            capture = OutputCapture(stdout_write, stderr_write, nonce)
            run_processor(processor_end, progress_fd, zygote_pid, not orphan_signal_armed, capture)
        except BaseException:  # noqa: B036 - report anything, then leave without running the zygote's cleanup
            logging.exception("processor failed")
            exit_code = 1
        finally:
            flush_logs()  # os._exit skips the flush at exit
            os._exit(exit_code)
    processor_end.close()
    os.close(stdout_write)
    os.close(stderr_write)
    try:
        fds = [agent_end.fileno(), progress_fd, stdout_read, stderr_read]
        socket.send_fds(control, [pickle.dumps(("forked", pid, nonce))], fds)
    except OSError:
        pass  # the agent is gone; so will we be, and the processor with us (PDEATHSIG)
    agent_end.close()
    for fd in (progress_fd, stdout_read, stderr_read):
        os.close(fd)


def _report_exits(control: socket.socket) -> bool:
    """Reap ended processors and tell the agent; False if the agent is gone."""
    while True:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return True
        try:
            control.send(pickle.dumps(("exited", pid, wait_status)))
        except OSError:
            return False


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass
