"""`make demo`'s time beside a fixed CPU calibration loop, so that a slow host can be told from a slow demo.

The calibration is a fixed amount of single-threaded work of the kinds the demo does, timed in the same run before
and after the demo: small torch matmuls (the tiny judge's arithmetic), a two-layer torch module called many times
(its per-call Python overhead) and a pure-Python loop. The demo's wall and CPU seconds divided by the calibration's
are what compare across hosts (and across loads, as far as the load holds steady: the two calibrations say how far
it did). Both modes run `perception-judge demo --fresh` in a temporary folder with the demo's own settings:

    python bench/bench_demo_time.py           # short (make bench): every stage, a tenth of its steps; ~3 min
    python bench/bench_demo_time.py --full    # the real `make demo` (seed 0): about 7 minutes on a quiet 2-core machine

Targets: the full demo's wall time under 8 minutes on the reference host (the 2-core machine this project is
built on, where one calibration takes REFERENCE_CALIBRATION_S CPU seconds), i.e. ``demo wall / calibration CPU`` at
most 480 / REFERENCE_CALIBRATION_S. The calibration's CPU seconds hardly move with load (single-threaded work);
its wall seconds do, so a wall ratio far above the CPU ratio says the host was busy, not that the demo got slower.
The short mode has no target: it tells whether the stages still run, and their shares.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import emit

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_CALIBRATION_S = 3.4  # one calibration's CPU seconds on the reference host (3.38-3.39 s measured)
TARGETS = {"full": 480.0 / REFERENCE_CALIBRATION_S, "short": None}
SHORT = ["--learnability-steps", "250", "--blind-steps", "30", "--explore-steps", "90", "--train-steps", "20"]


def calibrate(rounds: int = 1) -> dict[str, float]:
    """A fixed amount of work, one torch thread: wall and CPU seconds."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(2048, 64, generator=gen), torch.randn(64, 128, generator=gen)
    block = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.SiLU(), torch.nn.Linear(128, 64))
    small = torch.randn(8, 64, generator=gen)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(rounds):
        for _ in range(2500):  # arithmetic: the shapes of the tiny judge's batched layers
            torch.nn.functional.silu(x @ w).sum()
        with torch.no_grad():
            for _ in range(60_000):  # per-call overhead: a decode step of the tiny judge is mostly this
                block(small)
        acc = 0
        for i in range(15_000_000):  # plain Python: data preparation, rewards, the trainer's bookkeeping
            acc += (i * 7) % 13
    torch.set_num_threads(threads)
    return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}


def run_demo(out: Path, full: bool, seed: int) -> dict[str, float]:
    cmd = [sys.executable, "-m", "perception_judge.cli", "demo", "--out", str(out), "--fresh", "--seed", str(seed)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd + ([] if full else SHORT), cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(
            f"the demo failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    stages = json.loads((out / "timings.json").read_text())
    return {"wall_s": wall, "cpu_s": sum(s["cpu_s"] for s in stages.values()), "stages": stages}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="time the real demo (default: the short one)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    mode = "full" if args.full else "short"
    before = calibrate()
    with tempfile.TemporaryDirectory(prefix="pj-bench-demo-") as tmp:
        demo = run_demo(Path(tmp) / "demo", args.full, args.seed)
    after = calibrate()
    cal = {k: (before[k] + after[k]) / 2 for k in ("wall_s", "cpu_s")}
    drift = abs(before["wall_s"] - after["wall_s"]) / cal["wall_s"]
    stages = {k: v["wall_s"] for k, v in demo["stages"].items()}
    print(f"calibration before/after: {before['wall_s']:.1f} / {after['wall_s']:.1f} s wall", flush=True)
    print(f"demo ({mode}): {demo['wall_s']:.0f} s wall, {demo['cpu_s']:.0f} s CPU; stages (wall s): {stages}")
    emit("calibration_wall_s", cal["wall_s"], unit="s", higher_is_better=False, cpu_s=round(cal["cpu_s"], 2),
         drift=round(drift, 3))  # fmt: skip
    emit(f"demo_{mode}_wall_s", demo["wall_s"], 480.0 if args.full else None, "s", higher_is_better=False,
         stages=stages)  # fmt: skip
    emit(f"demo_{mode}_cpu_s", demo["cpu_s"], unit="s", higher_is_better=False)
    emit(f"demo_{mode}_wall_per_calibration_cpu", demo["wall_s"] / cal["cpu_s"], TARGETS[mode], "ratio",
         higher_is_better=False)  # fmt: skip
    emit(
        f"demo_{mode}_cpu_per_calibration", demo["cpu_s"] / cal["cpu_s"], unit="ratio", higher_is_better=False
    )


if __name__ == "__main__":
    main()
