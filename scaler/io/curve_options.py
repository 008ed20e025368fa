"""The CurveZMQ key options shared by the CLIs of the scheduler's peers; argparse only, so `-h` needs no zmq."""

from __future__ import annotations

import argparse


def add_peer_key_arguments(parser: argparse.ArgumentParser, who: str) -> None:
    """--curve-secret-key and --curve-server-key, for the CLIs of the scheduler's peers (cluster, monitors)."""
    parser.add_argument(
        "--curve-secret-key",
        default=None,
        metavar="FILE",
        help=f"speak CurveZMQ: {who} NAME.key_secret file, from scaler_keygen",
    )
    parser.add_argument(
        "--curve-server-key",
        default=None,
        metavar="FILE",
        help="with CurveZMQ: the scheduler's public key file (NAME.key)",
    )
