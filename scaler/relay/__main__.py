"""Internal: `python -m scaler.relay`, the data relay, by hand (to try it: the scheduler forks its own, see
scaler/scheduler/relay_process.py)."""

from __future__ import annotations

import argparse
import signal

from scaler.io.curve_keys import load_server_keys
from scaler.logs import setup_logging
from scaler.relay.relay import run_relay


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m scaler.relay",
        description="Pass held results and kept objects between Scaler peers that cannot reach each other. The"
        " scheduler starts one beside itself; see docs/guide/data.md.",
    )
    parser.add_argument("host", help="the interface to listen on, as the scheduler's address has it (0.0.0.0: all)")
    parser.add_argument("--max-frame-bytes", type=int, default=512 * 1024 * 1024, help="the scheduler's frame limit")
    parser.add_argument("--parent-pid", type=int, default=None, help="exit once this process is no longer the parent")
    parser.add_argument("--curve-secret-key", default=None, help="the scheduler's key pair (NAME.key_secret)")
    parser.add_argument("--curve-authorized-keys", default=None, help="the directory of the public keys it accepts")
    parser.add_argument("--logging-paths", nargs="+", default=["/dev/stdout"], help="where to log")
    parser.add_argument("--logging-level", default="INFO", help="DEBUG, INFO, WARNING...")
    args = parser.parse_args()
    setup_logging(args.logging_paths, args.logging_level)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a KeyboardInterrupt: the loop closes its socket
    curve = load_server_keys(args.curve_secret_key, args.curve_authorized_keys)
    run_relay(args.host, args.max_frame_bytes, None, args.parent_pid, curve)


if __name__ == "__main__":
    main()
