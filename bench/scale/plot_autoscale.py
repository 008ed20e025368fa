"""The Slurm elastic-pool scenario's timeline as a picture: workers and Slurm jobs over time, with its events.

    python -m bench.scale.plot_autoscale  # runs the scenario (tests/autoscale/test_slurm.py), then plots
    python -m bench.scale.plot_autoscale --timeline FILE  # plots a timeline the scenario kept (SCALER_SLURM_TIMELINE)

Needs the `plot` extra (matplotlib) and, to run the scenario, what scripts/test.sh installs (slurm-wlm, munge; root).
Prints the events in seconds from the burst, and writes docs/images/autoscale-slurm.png unless --output says where.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_scenario(timeline: Path) -> None:
    environment = {**os.environ, "SCALER_SLURM_TIMELINE": str(timeline)}
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/autoscale/test_slurm.py",
        "-k",
        "elastic",
    ]
    subprocess.run(command, cwd=ROOT, env=environment, check=True, timeout=300)


def plot(record: dict, output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = record["settings"]
    samples = record["samples"]
    times = [sample["t"] for sample in samples]
    figure, axes = plt.subplots(figsize=(9, 4.2), dpi=110)
    axes.step(times, [s["workers"] for s in samples], where="post", label="workers connected", linewidth=2.2)
    axes.step(times, [s["busy"] for s in samples], where="post", label="workers with a task", linewidth=1.2)
    axes.step(
        times,
        [s["jobs_running"] * settings["workers_per_job"] for s in samples],
        where="post",
        label=f"Slurm jobs RUNNING (x{settings['workers_per_job']} workers)",
        linestyle="--",
        linewidth=1.4,
    )
    pending = [s["jobs_pending"] * settings["workers_per_job"] for s in samples]
    if any(pending):
        axes.step(times, pending, where="post", label="Slurm jobs PENDING (x workers)", linestyle=":", linewidth=1.4)
    axes.axhline(settings["max_workers"], color="grey", linewidth=0.8, linestyle=":")
    axes.text(times[0], settings["max_workers"] + 0.1, "--max-workers", color="grey", fontsize=8)
    top = settings["max_workers"] + 1.4
    for index, (name, seconds) in enumerate(record["events"].items()):
        axes.axvline(seconds, color="black", alpha=0.25, linewidth=0.8)
        axes.text(seconds, top - 0.32 * (index % 4), f" {name} ({seconds:.1f}s)", fontsize=7.5, va="top")
    axes.set_ylim(-0.2, top + 0.2)
    axes.set_xlim(min(times), max(times))
    axes.set_xlabel("seconds from the burst")
    axes.set_ylabel("workers")
    axes.set_title(
        f"scaler_autoscale --backend slurm: {settings['tasks']} tasks, jobs of {settings['workers_per_job']} workers, "
        f"--idle-seconds {settings['idle_seconds']:g}, status every {settings['interval']:g}s",
        fontsize=9.5,
    )
    axes.legend(loc="center right", fontsize=8)
    axes.grid(alpha=0.2)
    figure.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timeline", type=Path, help="a timeline the Slurm scenario kept; default: run it now")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "images" / "autoscale-slurm.png")
    args = parser.parse_args()
    timeline = args.timeline
    if timeline is None:
        timeline = Path(tempfile.mkdtemp()) / "timeline.json"
        run_scenario(timeline)
    record = json.loads(timeline.read_text())
    print(f"timeline: {timeline}")
    for name, seconds in record["events"].items():
        print(f"{seconds:7.2f} s  {name}")
    print("    t (s)  workers  busy  jobs running  jobs pending   (where any changes)")
    previous = None
    for sample in record["samples"]:
        row = (sample["workers"], sample["busy"], sample["jobs_running"], sample["jobs_pending"])
        if row != previous:
            print(f"  {sample['t']:7.2f}  {row[0]:7d}  {row[1]:4d}  {row[2]:12d}  {row[3]:12d}")
            previous = row
    plot(record, args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
