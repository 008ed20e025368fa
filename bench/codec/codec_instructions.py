"""Instructions per encode/decode of the benchmark messages, counted by valgrind: a measure other load cannot skew.

    python3 -m bench.codec.codec_instructions                 # Task and TaskResult, both operations
    python3 -m bench.codec.codec_instructions WorkerHeartbeat --loops 2000

For each message and operation it runs this file twice under ``valgrind --tool=callgrind`` (after a warm-up, 0 and
then N operations) and prints the difference divided by N. It measures the codec of the checkout it is in, like
bench/codec/codec.py; run it from another checkout to compare versions. Needs valgrind (apt-get install valgrind).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

WARM_UP = 2000


def run_loop(message: str, operation: str, loops: int) -> None:
    """The measured program: WARM_UP then ``loops`` operations."""
    from bench.codec.codec import MESSAGES
    from scaler.protocol import decode_frame, encode

    msg = MESSAGES[message]
    func, arg = (encode, msg) if operation == "encode" else (decode_frame, encode(msg))
    for _ in range(WARM_UP + loops):
        func(arg)


def instructions(message: str, operation: str, loops: int) -> int:
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable]
    command += ["-m", "bench.codec.codec_instructions", "--run", message, operation, str(loops)]
    root = Path(__file__).resolve().parents[2]  # where `-m bench...` finds this checkout
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=True, cwd=root)
    found = re.search(r"Collected : (\d+)", result.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{result.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("messages", nargs="*", default=["Task", "TaskResult"], help="names from bench/codec/codec.py")
    parser.add_argument("--loops", type=int, default=5000, help="operations counted (default: %(default)s)")
    parser.add_argument("--run", nargs=3, metavar=("MESSAGE", "OPERATION", "LOOPS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        run_loop(args.run[0], args.run[1], int(args.run[2]))
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    for message in args.messages:
        for operation in ("encode", "decode"):
            per_op = (instructions(message, operation, args.loops) - instructions(message, operation, 0)) / args.loops
            print(f"{message:<28}{operation:<8}{per_op:>10,.0f} instructions")


if __name__ == "__main__":
    main()
