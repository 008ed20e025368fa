"""Take README's screenshots of scaler_top and scaler_ui against a live cluster running tasks.

    .venv/bin/python -m tests.monitor.make_screenshots [--seconds 60] [--out docs/images]

Starts a scheduler, `scaler_cluster -n 4`, scaler_ui and scaler_top (in tmux) from their CLIs, keeps the workers busy
with a varying stream of tasks, then renders tmux's screen as HTML and photographs it and the web page with headless
Chromium. Prints the terminal text too. Not a test: it needs a minute and leaves only the two PNG files behind.
"""

from __future__ import annotations

import argparse
import html
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import List

from scaler import Client
from scaler.config import default_monitor_address
from scaler.testing.processes import ROOT, ScalerProcess, free_tcp_address, wait_for
from tests.monitor.browser import chromium_command, remove_profile
from tests.monitor.terminal import Tmux

TERMINAL_WIDTH, TERMINAL_HEIGHT = 120, 24


def price_option(seed: int) -> float:
    """A stand-in for real work: a short Monte Carlo estimate whose cost varies from task to task."""
    generator = random.Random(seed)
    paths = 200 + seed % 1500
    return sum(max(0.0, 100 * math.exp(generator.gauss(0, 0.2)) - 100) for _ in range(paths)) / paths


def simulate(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def keep_busy(address: str, stop: threading.Event) -> None:
    """A task stream whose rate swings slowly, so the charts have a shape; a bounded number in flight."""
    started = time.monotonic()
    with Client(address) as client:
        in_flight: List = []
        seed = 0
        while not stop.is_set():
            phase = math.sin((time.monotonic() - started) / 8)
            while len(in_flight) < 120:
                seed += 1
                if seed % 3:
                    in_flight.append(client.submit(price_option, seed))
                else:
                    in_flight.append(client.submit(simulate, 0.004 + 0.012 * (1 + phase)))
            done, in_flight = in_flight[:40], in_flight[40:]
            for future in done:
                future.result()


def ansi_to_html(text: str) -> str:
    """capture-pane -e output as HTML: bold and reverse video are all scaler_top uses."""
    pieces, bold, reverse = [], False, False
    for chunk in re.split(r"(\x1b\[[0-9;]*m)", text):
        if chunk.startswith("\x1b["):
            for code in chunk[2:-1].split(";") or ["0"]:
                if code in ("", "0"):
                    bold = reverse = False
                bold = True if code == "1" else False if code == "22" else bold
                reverse = True if code == "7" else False if code == "27" else reverse
            continue
        if chunk:
            classes = " ".join(name for name, on in (("b", bold), ("r", reverse)) if on)
            escaped = html.escape(chunk)
            pieces.append(f'<span class="{classes}">{escaped}</span>' if classes else escaped)
    return "".join(pieces)


def photograph(url: str, path: str, width: int, height: int) -> None:
    profile = tempfile.mkdtemp(prefix="scaler-chromium-")
    try:
        command = chromium_command(
            profile, f"--window-size={width},{height}", "--virtual-time-budget=4000", f"--screenshot={path}", url
        )
        subprocess.run(command, capture_output=True, timeout=120, check=True)
    finally:
        remove_profile(profile)


def terminal_png(screen: str, path: str, work: str) -> None:
    page = os.path.join(work, "terminal.html")
    with open(page, "w") as file:
        file.write(
            "<!DOCTYPE html><meta charset='utf-8'><style>"
            "body{margin:0;background:#101317}"
            "pre{margin:0;padding:14px 16px;color:#d6dde6;font:14px/17px 'DejaVu Sans Mono',monospace}"
            ".b{font-weight:bold;color:#ffffff}.r{background:#d6dde6;color:#101317}"
            f"</style><pre>{ansi_to_html(screen)}</pre>"
        )
    photograph(f"file://{page}", path, TERMINAL_WIDTH * 17 // 2 + 32, TERMINAL_HEIGHT * 17 + 28)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the cluster works before the pictures")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "images"), help="folder for the PNG files")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="scaler-shots-")
    address = free_tcp_address()
    monitor = default_monitor_address(address)  # what users see: the scheduler started without --monitor-address
    port = free_tcp_address().rsplit(":", 1)[1]
    processes: List[ScalerProcess] = []
    tmux, stop = Tmux(), threading.Event()
    busy = threading.Thread(target=keep_busy, args=(address, stop), daemon=True)
    try:
        processes.append(ScalerProcess("scaler.scheduler", [address], f"{work}/scheduler.log"))
        processes[-1].wait_for_output("Scheduler: listening on")
        processes.append(ScalerProcess("scaler.cluster", ["-n", "4", address], f"{work}/cluster.log"))
        processes[-1].wait_for_output("Worker[3] started")
        processes.append(ScalerProcess("scaler.monitor.ui.app", [monitor, "--port", port], f"{work}/ui.log"))
        processes[-1].wait_for_output("scaler_ui: serving")
        busy.start()
        tmux.start([sys.executable, "-m", "scaler.monitor.top", monitor], TERMINAL_WIDTH, TERMINAL_HEIGHT)
        wait_for(lambda: tmux.screen().count("W|") == 4, 30, "four workers in scaler_top")
        time.sleep(args.seconds)  # the charts need history: this is a wait for content, not for a condition
        screen = tmux._tmux("capture-pane", "-p", "-e", "-t", "main")
        print(tmux.screen())
        terminal_png(screen, os.path.join(args.out, "scaler_top.png"), work)
        photograph(f"http://127.0.0.1:{port}/", os.path.join(args.out, "scaler_ui.png"), 1400, 880)
    finally:
        stop.set()
        busy.join(30)
        tmux.kill()
        for process in reversed(processes):
            process.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
