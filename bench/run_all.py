"""Run every benchmark in bench/ and print one table of measured ratios against their targets.

Each benchmark is a standalone script ``bench/bench_*.py`` that prints, per metric, one line
``BENCH_RESULT {"name": ..., "value": ..., "target": ..., "unit": ..., "higher_is_better": true}``.
Scripts needing hardware this machine lacks (``bench/gpu_*.py``) are not run. Usage::

    python bench/run_all.py [--only NAME ...] [--json results.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MARK = "BENCH_RESULT "


def run_one(script: Path, timeout: float) -> tuple[list[dict], str | None, float]:
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, cwd=HERE.parent
        )
    except subprocess.TimeoutExpired:
        return [], f"timed out after {timeout:.0f} s", time.perf_counter() - t0
    results = []
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            with contextlib.suppress(json.JSONDecodeError):
                results.append(json.loads(line[len(MARK) :]))
    error = None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        error = f"exit {proc.returncode}: " + " | ".join(tail)
    elif not results:
        error = "printed no BENCH_RESULT line"
    return results, error, time.perf_counter() - t0


def passed(r: dict) -> bool | None:
    target, value = r.get("target"), r.get("value")
    if target is None or value is None:
        return None
    return value >= target if r.get("higher_is_better", True) else value <= target


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", help="run only scripts whose name contains one of these")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per script (default %(default)s)")
    ap.add_argument("--json", help="also write all results to this JSON file")
    args = ap.parse_args()
    scripts = sorted(HERE.glob("bench_*.py"))
    if args.only:
        scripts = [s for s in scripts if any(o in s.name for o in args.only)]
    rows, failures, all_results = [], 0, []
    for script in scripts:
        print(f"==> {script.name}", flush=True)
        results, error, secs = run_one(script, args.timeout)
        print(f"    {secs:.0f} s" + (f"  ERROR {error}" if error else ""), flush=True)
        if error:
            failures += 1
            rows.append((script.stem, "-", "-", "-", "ERROR"))
        for r in results:
            ok = passed(r)
            cmp = ">=" if r.get("higher_is_better", True) else "<="
            target = "-" if r.get("target") is None else f"{cmp} {r['target']:g}"
            rows.append(
                (
                    r["name"],
                    "-" if r.get("value") is None else f"{r['value']:.3g}",
                    target,
                    r.get("unit", ""),
                    f"not measured: {r['skipped']}"
                    if r.get("skipped")
                    else {True: "ok", False: "MISS", None: "-"}[ok],
                )
            )
            failures += ok is False
            all_results.append({**r, "script": script.name, "passed": ok})
    widths = [
        max(len(str(row[i])) for row in [("metric", "measured", "target", "unit", "status"), *rows])
        for i in range(5)
    ]
    print()
    for row in [("metric", "measured", "target", "unit", "status"), *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
    if args.json:
        Path(args.json).write_text(json.dumps(all_results, indent=2))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
