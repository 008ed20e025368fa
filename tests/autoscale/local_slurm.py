"""A real one-node Slurm cluster on this machine, for the tests: munged, slurmctld and slurmd from Debian's slurm-wlm
and munge packages, all in a private directory with their own key, socket, ports and state, so nothing in /etc is
touched and the daemons are children of the test (started in the foreground) that it stops, with every job.

What works here (no systemd, no cgroups, root): proctrack/linuxproc (processes tracked through their parents),
task/none, select/cons_tres with OverSubscribe=FORCE so that several jobs share this machine's cores. Commands find
the cluster through $SLURM_CONF, which `environment()` gives.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

import psutil

from scaler.testing.processes import wait_exited, wait_for

DAEMONS = ("munged", "slurmctld", "slurmd")


def slurm_available() -> Optional[str]:
    """None if the Slurm and munge programs are installed, else what is missing."""
    missing = [
        program for program in (*DAEMONS, "sbatch", "squeue", "scancel", "sinfo") if shutil.which(program) is None
    ]
    if missing:
        return f"not installed: {', '.join(missing)} (apt-get install slurm-wlm munge; scripts/test.sh does)"
    if os.geteuid() != 0:
        return "the one-node Slurm of the tests runs its daemons as root"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalSlurm:
    def __init__(self) -> None:
        # munged wants the directory of its socket (and those above) readable by all: not under pytest's 0700 tmp_path
        self.directory = Path(tempfile.mkdtemp(prefix="scaler-slurm-"))
        self.directory.chmod(0o755)
        self.node = socket.gethostname().split(".")[0]
        self.conf = self.directory / "slurm.conf"
        self._daemons: Dict[str, subprocess.Popen] = {}
        self._known_pids = set(psutil.pids())

    def environment(self) -> Dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *command: str, check: bool = True) -> str:
        done = subprocess.run(command, env=self.environment(), capture_output=True, text=True, timeout=30, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    # --- start ---

    def start(self) -> None:
        try:
            self._start_munge()
            self._write_conf()
            self._spawn("slurmctld", ["slurmctld", "-D", "-i"])
            wait_for(lambda: self.run("scontrol", "ping", check=False).count("UP") > 0, 30, "slurmctld to answer")
            self._spawn("slurmd", ["slurmd", "-D", "-N", self.node])
            wait_for(lambda: self.node_state() == "idle", 30, f"node {self.node} idle in sinfo", interval=0.2)
        except BaseException:
            self.stop()
            raise

    def _start_munge(self) -> None:
        keys = self.directory / "munge-key"
        keys.mkdir(mode=0o700)
        (self.directory / "run").mkdir(mode=0o755)
        (self.directory / "log").mkdir(mode=0o755)
        key = keys / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                f"--key-file={key}",
                f"--socket={self.munge_socket}",
                f"--pid-file={self.directory / 'run' / 'munged.pid'}",
                f"--log-file={self.directory / 'log' / 'munged.log'}",
                f"--seed-file={keys / 'munged.seed'}",
            ],
        )
        wait_for(self.munge_socket.exists, 15, "munged's socket")

    @property
    def munge_socket(self) -> Path:
        return self.directory / "run" / "munge.sock"

    def _write_conf(self) -> None:
        spool = self.directory / "spool"
        for sub in ("ctld", "d"):
            (spool / sub).mkdir(parents=True)
        memory_mb = int(psutil.virtual_memory().total / 2**20 * 0.9)
        cpus = os.cpu_count() or 1
        log = self.directory / "log"
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=scalertest",
                    f"SlurmctldHost={self.node}(127.0.0.1)",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    "AuthType=auth/munge",
                    f"AuthInfo=socket={self.munge_socket}",
                    "CredType=cred/munge",
                    f"SlurmctldPort={_free_port()}",
                    f"SlurmdPort={_free_port()}",
                    f"StateSaveLocation={spool / 'ctld'}",
                    f"SlurmdSpoolDir={spool / 'd'}",
                    f"SlurmctldPidFile={self.directory / 'run' / 'slurmctld.pid'}",
                    f"SlurmdPidFile={self.directory / 'run' / 'slurmd.pid'}",
                    f"SlurmctldLogFile={log / 'slurmctld.log'}",
                    f"SlurmdLogFile={log / 'slurmd.log'}",
                    "ProctrackType=proctrack/linuxproc",  # no cgroups here
                    "TaskPlugin=task/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_Core",
                    "SchedulerType=sched/backfill",
                    "SchedulerParameters=sched_interval=2,bf_interval=1",
                    "MpiDefault=none",
                    "ReturnToService=2",
                    "KillWait=5",  # scancel: SIGTERM, then SIGKILL this many seconds later
                    "MinJobAge=2",
                    "InactiveLimit=0",
                    f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
                    # several jobs share each core, as the scenarios start more workers than this machine has cores
                    f"PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE OverSubscribe=FORCE:8",
                    "",
                ]
            )
        )

    def _spawn(self, name: str, command: List[str]) -> None:
        output = open(self.directory / "log" / f"{name}.out", "wb")
        self._daemons[name] = subprocess.Popen(
            command, env=self.environment(), stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT
        )
        output.close()

    # --- looking ---

    def node_state(self) -> str:
        return self.run("sinfo", "--noheader", "--format=%T", check=False).strip()

    def jobs(self, name: Optional[str] = None) -> Dict[str, str]:
        """squeue: job id -> state, of jobs with that name (all jobs if None)."""
        command = ["squeue", "--noheader", "--format=%i|%T"]
        if name is not None:
            command.append(f"--name={name}")
        output = self.run(*command)
        return dict(line.split("|", 1) for line in output.split())

    def logs(self) -> str:
        texts = []
        for path in sorted((self.directory / "log").glob("*")):
            texts.append(f"--- {path.name}\n" + path.read_text(errors="replace")[-3000:])
        return "\n".join(texts)

    # --- stop ---

    def stop(self) -> List[str]:
        """Cancel every job, stop the daemons (slurmd, slurmctld, munged), and kill whatever they left; returns what
        had to be killed (empty when Slurm ended every job and process itself)."""
        if "slurmctld" in self._daemons and self._daemons["slurmctld"].poll() is None:
            self.run("scancel", "--full", "--user=root", check=False)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and self.run("squeue", "--noheader", check=False).strip():
                time.sleep(0.2)
        for name in reversed(DAEMONS):
            daemon = self._daemons.pop(name, None)
            if daemon is None or daemon.poll() is not None:
                continue
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(15)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        killed = []
        for process in self.leftovers():
            try:
                killed.append(f"{process.pid} {' '.join(process.cmdline())}")
                process.kill()
            except psutil.NoSuchProcess:
                pass
        wait_exited(self.leftovers(), 5)
        shutil.rmtree(self.directory, ignore_errors=True)
        return killed

    def leftovers(self) -> List[psutil.Process]:
        """Processes of this cluster still running, besides the daemons this object holds: slurmstepd and the jobs'
        processes, which all carry this cluster's SLURM_CONF in their environment (another cluster's do not)."""
        found = []
        held = {daemon.pid for daemon in self._daemons.values()}
        for process in psutil.process_iter(["pid"]):
            pid = process.info["pid"]
            if pid in self._known_pids or pid in held or pid == os.getpid():
                continue
            try:
                if process.environ().get("SLURM_CONF") == str(self.conf):
                    found.append(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        return found
