"""Sweep workers as Ray tasks, for clusters without SLURM: ``eval sweep RUN --ray N`` (the optional ``ray`` extra).

Each of the N tasks runs :func:`claim_worker`, the function a SLURM array task runs through ``eval sweep --claim``:
it claims cells (``evaluation.claims``), judges them and writes their cell files, never the tables. Ray schedules
the tasks (``num_gpus`` each: ``--ray-gpus``, by default 1 when the cluster has GPUs, else 0) and re-runs a task
whose node died (``max_retries``); a re-run worker takes over the dead one's cells once their leases run out, so
no cell runs twice to completion. When every task has returned, the driver collects: ``results.*`` and the report,
byte-identical to ``eval collect OUT``. Connect to a running cluster with ``--ray-address`` (``auto`` inside one;
by default a local cluster starts); every node needs the project installed and the run folder on a shared file
system.
"""

from __future__ import annotations

import argparse
import copy
from typing import Any


def claim_worker(args: argparse.Namespace) -> int:
    """One ``eval sweep --claim`` worker (the SLURM task's and the Ray task's function); returns its exit code."""
    from perception_judge.evaluation.cli import run

    worker = copy.copy(args)
    worker.claim, worker.ray = True, None
    return run(worker)


def run_on_ray(
    args: argparse.Namespace, workers: int, gpus: float | None = None, address: str | None = None
) -> tuple[list[int], dict[str, Any]]:
    """Run ``workers`` :func:`claim_worker` tasks on Ray and collect; returns their exit codes and the collect
    state (``missing`` / ``failed`` / ``claimed`` cells)."""
    try:
        import ray
    except ImportError:
        raise ImportError(
            "--ray needs the ray package: pip install 'perception-judge[ray]' (or run `eval sweep --claim` "
            "workers under SLURM, see README)"
        ) from None
    from perception_judge.evaluation.sweep import collect

    if workers < 1:
        raise ValueError(f"--ray needs at least one worker, got {workers}")
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=not args.quiet)
    try:
        if gpus is None:
            gpus = 1.0 if ray.cluster_resources().get("GPU", 0) >= 1 else 0.0
        task = ray.remote(num_gpus=gpus, num_cpus=1, max_retries=2)(claim_worker)
        codes = [int(c) for c in ray.get([task.remote(args) for _ in range(workers)])]
    finally:
        if started:
            ray.shutdown()
    _, state = collect(args.out_dir, report=not args.no_report)
    return codes, state
