"""Internal: `scaler_autoscale ADDRESS --max-workers N [options] [-- scaler_cluster options]`; or `python -m
scaler.autoscale`."""

from __future__ import annotations

import argparse
import shlex
import shutil
import signal
import sys
from typing import TYPE_CHECKING, List, Optional, Tuple

from scaler import config
from scaler.autoscale.policy import PolicySettings
from scaler.config import SETTINGS
from scaler.settings_spec import MONITOR

if TYPE_CHECKING:
    from scaler.autoscale.backends.base import Backend

# The autoscaler's defaults live here until settings are declared in one place for every CLI.
DEFAULT_MIN_WORKERS = 0
DEFAULT_WORKERS_PER_JOB = 1
DEFAULT_IDLE_SECONDS = 60.0
DEFAULT_START_TIMEOUT_SECONDS = 300.0
DEFAULT_BACKOFF_SECONDS = 30.0
DEFAULT_INTERVAL_SECONDS = 1.0
DEFAULT_STATUS_TIMEOUT_SECONDS = 10.0
DEFAULT_JOB_NAME = "scaler-workers"
DEFAULT_DEPLOYMENT = "scaler-workers"
DEFAULT_NAMESPACE = "default"
BACKENDS = ("local", "slurm", "kubernetes")

DESCRIPTION = """\
Keep the pool of Scaler workers serving the scheduler at ADDRESS between
--min-workers and --max-workers. It reads the scheduler's status on its monitor
address. When tasks wait, it starts jobs of --workers-per-job workers (a job is
a scaler_cluster process, a Slurm job or a Kubernetes replica), counting jobs
still starting; a job whose workers have had no task for --idle-seconds is
retired (SIGTERM: its workers finish their tasks and leave). Every decision is
logged with its reason."""

EPILOG = """\
Options after `--` go to scaler_cluster in each job (local and slurm backends),
e.g. `-- --death-timeout 60`.

examples:
  scaler_autoscale tcp://10.0.0.1:2345 --max-workers 8
  scaler_autoscale tcp://10.0.0.1:2345 --backend slurm --max-workers 64 \\
      --workers-per-job 16 --idle-seconds 120 \\
      --sbatch-option=--partition=cpu --sbatch-option=--time=04:00:00
  scaler_autoscale tcp://scaler-scheduler:2345 --backend kubernetes \\
      --deployment scaler-workers --namespace scaler --max-workers 32 \\
      --workers-per-job 4"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaler_autoscale",
        usage="%(prog)s [options] ADDRESS --max-workers N\n       [-- scaler_cluster options]",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=_Formatter,
    )
    parser.add_argument("address", metavar="ADDRESS", help="the scheduler's address, which the workers connect to")
    parser.add_argument(
        "--monitor-address",
        "-ma",
        default=None,
        metavar="ADDRESS",
        help="the scheduler's monitor address (default: as the scheduler's, ipc:///tmp/{host}_{port}_monitor)",
    )
    parser.add_argument("--backend", "-b", choices=BACKENDS, default="local", help="where jobs run")

    pool = parser.add_argument_group("pool")
    pool.add_argument(
        "--max-workers", type=int, required=True, metavar="N", help="most workers started at once (required)"
    )
    pool.add_argument(
        "--min-workers", type=int, default=DEFAULT_MIN_WORKERS, metavar="N", help="workers kept even when idle"
    )
    pool.add_argument(
        "--workers-per-job",
        type=int,
        default=DEFAULT_WORKERS_PER_JOB,
        metavar="N",
        help="workers each job runs (scaler_cluster -n)",
    )
    pool.add_argument(
        "--idle-seconds",
        type=float,
        metavar="SECONDS",
        default=DEFAULT_IDLE_SECONDS,
        help="a job whose workers have had no task this long is retired, down to what the demand wants",
    )
    pool.add_argument(
        "--start-timeout",
        type=float,
        metavar="SECONDS",
        default=DEFAULT_START_TIMEOUT_SECONDS,
        help="a running job with no worker connected after this long has failed and is cancelled",
    )
    pool.add_argument(
        "--backoff",
        type=float,
        metavar="SECONDS",
        default=DEFAULT_BACKOFF_SECONDS,
        help="after a job fails, no job starts for this long (doubled per further failure, up to 8x)",
    )
    pool.add_argument(
        "--retire-timeout",
        type=float,
        metavar="SECONDS",
        dest="retire_timeout",
        default=config.RETIRE_TIMEOUT.default,
        help="a retired job's running tasks get this long to finish (scaler_cluster's --retire-timeout), then run"
        " elsewhere; a job still there shortly after is killed (local) or scancelled (slurm)",
    )
    pool.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_INTERVAL_SECONDS,
        metavar="SECONDS",
        help="least seconds between two decisions",
    )
    pool.add_argument(
        "--status-timeout",
        type=float,
        metavar="SECONDS",
        default=DEFAULT_STATUS_TIMEOUT_SECONDS,
        help="with no status for this long, warn and decide nothing until it comes back",
    )

    jobs = parser.add_argument_group("local and slurm backends")
    jobs.add_argument(
        "--worker-command",
        default=None,
        metavar="COMMAND",
        help="the scaler_cluster command each job runs (default: this Python's `-m scaler.cluster`)",
    )
    jobs.add_argument(
        "--job-name", default=DEFAULT_JOB_NAME, metavar="NAME", help="slurm: the jobs' name (sbatch --job-name)"
    )
    jobs.add_argument(
        "--sbatch-option",
        action="append",
        default=[],
        metavar="OPTION",
        help="slurm: an sbatch option for every job, e.g. --sbatch-option=--partition=cpu (repeatable)",
    )

    kubernetes = parser.add_argument_group("kubernetes backend")
    kubernetes.add_argument("--deployment", default=DEFAULT_DEPLOYMENT, metavar="NAME", help="the workers' Deployment")
    kubernetes.add_argument("--namespace", default=DEFAULT_NAMESPACE, metavar="NAME", help="its namespace")
    kubernetes.add_argument(
        "--kubeconfig",
        default=None,
        metavar="FILE",
        help="credentials file (default: the pod's service account, else $KUBECONFIG or ~/.kube/config)",
    )

    output = parser.add_argument_group("output")
    for name in ("curve_secret_key_file", "curve_server_key_file"):
        SETTINGS[name].add_to(output, MONITOR)
    output.add_argument(
        "--timeline", default=None, metavar="FILE", help="append one JSON line per decision step: pool, demand, actions"
    )
    output.add_argument(
        "--logging-paths",
        "-lp",
        nargs="+",
        metavar="PATH",
        default=list(config.DEFAULT_LOGGING_PATHS),
        help="where to log: files, /dev/stdout or /dev/stderr",
    )
    output.add_argument(
        "--logging-level",
        "-ll",
        metavar="LEVEL",
        choices=config.LOGGING_LEVELS,
        default=config.DEFAULT_LOGGING_LEVEL,
        help="least severe level logged: " + ", ".join(config.LOGGING_LEVELS),
    )
    return parser


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written; each option's default after its help, where it has one worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default not in (None, [], argparse.SUPPRESS) and not action.required and "default" not in text:
            text += " (default: %(default)s)"
        return text


def split_worker_arguments(argv: List[str]) -> Tuple[List[str], List[str]]:
    """The autoscaler's own arguments, and those after `--` that go to scaler_cluster."""
    if "--" in argv:
        index = argv.index("--")
        return argv[:index], argv[index + 1 :]
    return argv, []


def parse_arguments(argv: Optional[List[str]] = None) -> Tuple[argparse.Namespace, PolicySettings, List[str]]:
    """(the autoscaler's options, the policy's settings, the arguments for scaler_cluster), or exit status 2."""
    parser = build_parser()
    own, worker_arguments = split_worker_arguments(list(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(own)
    for name in ("interval", "status_timeout", "retire_timeout"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    try:
        settings = PolicySettings(
            max_workers=args.max_workers,
            min_workers=args.min_workers,
            workers_per_job=args.workers_per_job,
            idle_seconds=args.idle_seconds,
            start_timeout_seconds=args.start_timeout,
            backoff_seconds=args.backoff,
            retire_timeout_seconds=args.retire_timeout,
        )
    except ValueError as error:
        parser.error(str(error).replace("_", "-"))
    if args.backend == "kubernetes" and (worker_arguments or args.worker_command):
        parser.error("the kubernetes backend starts no scaler_cluster: set its options in the Deployment's pods")
    if args.backend == "slurm" and shutil.which("sbatch") is None:
        parser.error("the slurm backend needs sbatch, squeue and scancel on PATH")
    return args, settings, worker_arguments


def make_backend(args: argparse.Namespace, workers_per_job: int, worker_arguments: List[str]) -> Backend:
    """The backend the options ask for; BackendError (or ValueError) if it cannot be set up."""
    from scaler.autoscale.backends.base import WorkerCommand, default_worker_command

    base = shlex.split(args.worker_command) if args.worker_command else default_worker_command()
    # the jobs' workers retire within the autoscaler's deadline (an explicit one after `--` still wins)
    options = (*config.RETIRE_TIMEOUT.to_argv(args.retire_timeout), *worker_arguments)
    command = WorkerCommand(tuple(base), args.address, workers_per_job, options)
    if args.backend == "local":
        from scaler.autoscale.backends.local import LocalBackend

        return LocalBackend(command, args.retire_timeout)
    if args.backend == "slurm":
        from scaler.autoscale.backends.slurm import SlurmBackend

        return SlurmBackend(command, args.retire_timeout, args.job_name, args.sbatch_option)
    from scaler.autoscale.backends.kubernetes import KubernetesBackend

    return KubernetesBackend(args.deployment, args.namespace, args.kubeconfig)


def main(argv: Optional[List[str]] = None) -> None:
    args, settings, worker_arguments = parse_arguments(argv)
    # imported after parsing, so that -h answers fast
    import logging

    from scaler.autoscale.backends.base import BackendError
    from scaler.autoscale.policy import ScalingPolicy
    from scaler.autoscale.runner import Autoscaler
    from scaler.io.curve_keys import load_peer_keys
    from scaler.io.sockets import check_resolvable, validate_address
    from scaler.logs import setup_logging
    from scaler.monitor.subscriber import StatusSubscriber

    setup_logging(args.logging_paths, args.logging_level)
    try:
        address = validate_address(args.address)
        monitor_address = validate_address(args.monitor_address or config.default_monitor_address(address))
        check_resolvable(monitor_address)  # here, where a bad address ends with a message, not a traceback
        curve = load_peer_keys(args.curve_secret_key_file, args.curve_server_key_file)
        backend = make_backend(args, settings.workers_per_job, worker_arguments)
    except (TypeError, ValueError, BackendError) as error:
        sys.exit(f"scaler_autoscale: {error}")
    try:
        timeline = open(args.timeline, "a") if args.timeline else None
    except OSError as error:
        sys.exit(f"scaler_autoscale: cannot write --timeline {args.timeline}: {error.strerror}")

    stopping: List[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, frame: stopping.append(number))
    logging.info(
        "scaler_autoscale: workers %d..%d in jobs of %d, idle %gs, start timeout %gs, backoff %gs; status from %s",
        settings.min_workers,
        settings.max_workers,
        settings.workers_per_job,
        settings.idle_seconds,
        settings.start_timeout_seconds,
        settings.backoff_seconds,
        monitor_address,
    )
    logging.info("scaler_autoscale: backend %s", backend.describe())
    try:
        with StatusSubscriber(monitor_address, args.status_timeout, curve) as subscriber:
            Autoscaler(ScalingPolicy(settings), backend, timeline).run(
                subscriber, args.interval, lambda: bool(stopping)
            )
    finally:
        if timeline is not None:
            timeline.close()
    logging.info("scaler_autoscale: stopped (%s)", signal.Signals(stopping[0]).name)


if __name__ == "__main__":
    main()
