"""Internal: `scaler_keygen DIRECTORY NAME...`: CurveZMQ key pairs for a scheduler, its workers, clients and
monitors."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from scaler.io.curve import generate_key_pair


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaler_keygen",
        description=(
            "Write a CurveZMQ key pair per NAME into DIRECTORY: NAME.key (public: give it to the scheduler, or the "
            "scheduler's to its peers) and NAME.key_secret (private: keep it on its host, readable by its user only)."
        ),
        epilog=(
            "Example: scaler_keygen keys scheduler worker alice; mkdir keys/authorized; "
            "cp keys/worker.key keys/alice.key keys/authorized/; "
            "scaler_scheduler tcp://0.0.0.0:2345 --curve-secret-key keys/scheduler.key_secret "
            "--curve-authorized-keys keys/authorized"
        ),
    )
    parser.add_argument("directory", help="where to write the key files (created if needed)")
    parser.add_argument("names", nargs="+", metavar="NAME", help="one key pair per name, e.g. scheduler worker alice")
    return parser


def main(argv: Optional[List[str]] = None) -> None:
    args = build_parser().parse_args(argv)
    for name in args.names:
        try:
            public_file, secret_file = generate_key_pair(args.directory, name)
        except ValueError as error:
            sys.exit(f"scaler_keygen: {error}")
        print(f"{name}: public key {public_file}, secret key {secret_file}")


if __name__ == "__main__":
    main()
