"""PPJD builder benchmark: concurrency speed-up against a slow teacher, and memory vs number of records.

    python bench/bench_ppjd_concurrency.py            # full run (about a minute on 2 CPU cores)
    python bench/bench_ppjd_concurrency.py --quick    # smaller, for a smoke check

1. **Concurrency.** The fake OpenAI-compatible server (``tests/support/fake_openai.py``, started as its
   own process so it does not share our GIL) adds ``--latency`` seconds (default 0.2) to every call. The LLM
   teacher makes three calls per record (verify, attributes, rewrite). Records per second at concurrency 32
   must be at least 20x the rate at concurrency 1 (ideal: 32x).
2. **Memory.** The programmatic teacher builds 200 and then 2000 records from a synth folder, each in a fresh
   process; the peak RSS (``ru_maxrss``) must not grow with the number of records (the build streams: the
   source is read line by line, records are appended to shards, nothing is kept per record except its key).
   Python-heap peaks (tracemalloc) are reported too.

Every metric is also printed as one line ``BENCH_RESULT {"name", "value", "target", "unit",
"higher_is_better"}`` for ``make bench`` (``bench/run_all.py``).
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

_MEMORY_CHILD = r"""
import json, resource, sys, tracemalloc
from perception_judge.ppjd.programmatic import ProgrammaticTeacher
from perception_judge.ppjd.options import BuildOptions
from perception_judge.ppjd.runner import build
from perception_judge.ppjd.sources import synthetic_source
synth_dir, out_dir, limit, trace = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
if trace:
    tracemalloc.start()
summary = build(synthetic_source(synth_dir), ProgrammaticTeacher(), BuildOptions(out=out_dir, concurrency=4, limit=limit, progress=False))
peak_heap = tracemalloc.get_traced_memory()[1] if trace else None
print(json.dumps({"processed": summary.records_new + summary.failed_new,
                  "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "peak_heap": peak_heap}))
"""


def emit(name: str, value: float, target: float | None, unit: str, higher_is_better: bool = True) -> None:
    record = {"name": name, "value": round(value, 4), "target": target, "unit": unit}
    record["higher_is_better"] = higher_is_better
    print("BENCH_RESULT " + json.dumps(record))


def start_server(latency: float) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "support" / "fake_openai.py"), "--latency", str(latency)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    line = proc.stdout.readline().strip() if proc.stdout else ""
    if not line.startswith("READY "):
        proc.kill()
        raise RuntimeError(f"fake server did not start: {line!r}")
    return proc, line.split(" ", 1)[1]


class ItemsSource:
    """A build source over items already in memory (PIL images): the build waits on the teacher alone."""

    name = "items"

    def __init__(self, items: list) -> None:
        self.items = items

    def __iter__(self):
        return iter(self.items)

    def estimate_count(self) -> int:
        return len(self.items)

    def describe(self) -> dict:
        return {"kind": "items", "name": self.name, "count": len(self.items)}


def throughput(url: str, concurrency: int, n: int, workdir: Path) -> dict:
    from perception_judge import synth
    from perception_judge.ppjd.options import BuildOptions, TeacherOptions
    from perception_judge.ppjd.runner import build
    from perception_judge.ppjd.teacher import LLMTeacher

    items = synth.generate_items(n, seed=100 + concurrency, text_only_fraction=0.0)
    teacher = LLMTeacher(
        TeacherOptions(base_urls=[url], model="fake-teacher", concurrency=concurrency, timeout_s=30)
    )
    out = workdir / f"ppjd-c{concurrency}"
    t0 = time.perf_counter()
    summary = build(ItemsSource(items), teacher, BuildOptions(out=str(out), progress=False))
    elapsed = time.perf_counter() - t0
    processed = summary.records_new + summary.failed_new
    return {
        "concurrency": concurrency,
        "records": processed,
        "elapsed_s": elapsed,
        "records_per_s": processed / elapsed,
        "requests": summary.usage.get("requests", 0),
    }


def memory(synth_dir: Path, n: int, workdir: Path, trace: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = workdir / f"mem-{n}-{int(trace)}"
    res = subprocess.run(
        [sys.executable, "-c", _MEMORY_CHILD, str(synth_dir), str(out), str(n), "1" if trace else "0"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer records (a smoke run; ratios are noisier)")
    p.add_argument("--latency", type=float, default=0.2, help="seconds the fake teacher adds per call (0.2)")
    p.add_argument("--high", type=int, default=32, help="the high concurrency (32)")
    p.add_argument("--mem-small", type=int, default=200)
    p.add_argument("--mem-large", type=int, default=2000)
    args = p.parse_args(argv)
    n_low = 4 if args.quick else 6
    n_high = args.high * (4 if args.quick else 8)
    mem_large = 600 if args.quick else args.mem_large

    ok = True
    with tempfile.TemporaryDirectory(prefix="bench-ppjd-") as tmp:
        work = Path(tmp)
        proc, url = start_server(args.latency)
        try:
            throughput(url, 1, 1, work / "warmup")  # imports and the first connection, not timed below
            low = throughput(url, 1, n_low, work)
            high = throughput(url, args.high, n_high, work)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        ratio = high["records_per_s"] / low["records_per_s"]
        ideal = args.high
        print(f"\nconcurrency (fake teacher latency {args.latency:.2f} s/call, 3 calls per record)")
        for r in (low, high):
            print(
                f"  c={r['concurrency']:<3} {r['records']:>4} records in {r['elapsed_s']:6.2f} s  "
                f"-> {r['records_per_s']:7.2f} records/s ({r['requests']} requests)"
            )
        print(f"  speed-up c={args.high} vs c=1: {ratio:.1f}x (target >= 20x, ideal {ideal}x)")
        emit("ppjd_records_per_s_c1", low["records_per_s"], None, "records/s")
        emit(f"ppjd_records_per_s_c{args.high}", high["records_per_s"], None, "records/s")
        emit(f"ppjd_speedup_c{args.high}_vs_c1", ratio, 20.0, "x")
        ok &= ratio >= 20.0

        from perception_judge import synth

        synth_dir = work / "synth"
        t0 = time.perf_counter()
        synth.write_synthetic(synth_dir, mem_large, seed=1)
        print(
            f"\nmemory (programmatic teacher, synth folder of {mem_large} items written in {time.perf_counter() - t0:.1f} s)"
        )
        small = memory(synth_dir, args.mem_small, work, trace=False)
        large = memory(synth_dir, mem_large, work, trace=False)
        small_t = memory(synth_dir, args.mem_small, work, trace=True)
        large_t = memory(synth_dir, mem_large, work, trace=True)
        rss_ratio = large["maxrss_kib"] / small["maxrss_kib"]
        heap_growth_kib = (large_t["peak_heap"] - small_t["peak_heap"]) / 1024
        per_record_b = (large_t["peak_heap"] - small_t["peak_heap"]) / max(
            1, large_t["processed"] - small_t["processed"]
        )
        for r, t in ((small, small_t), (large, large_t)):
            print(
                f"  {r['processed']:>5} records: peak RSS {r['maxrss_kib'] / 1024:7.1f} MiB, "
                f"peak Python heap {t['peak_heap'] / 2**20:6.2f} MiB"
            )
        print(
            f"  peak RSS ratio {mem_large} vs {args.mem_small} records: {rss_ratio:.3f}x (target <= 1.10x, flat); "
            f"peak heap growth {heap_growth_kib:.0f} KiB ({per_record_b:.0f} bytes per extra record)"
        )
        emit(
            f"ppjd_peak_rss_ratio_{mem_large}_vs_{args.mem_small}",
            rss_ratio,
            1.10,
            "x",
            higher_is_better=False,
        )
        emit("ppjd_peak_heap_growth_bytes_per_record", per_record_b, 1024.0, "bytes", higher_is_better=False)
        ok &= rss_ratio <= 1.10 and per_record_b <= 1024
    print("\nPASS" if ok else "\nFAIL: a target was missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
