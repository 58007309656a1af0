"""Sweep workers as Ray tasks, for clusters without SLURM: ``eval sweep RUN --ray N`` (the optional ``ray`` extra).
Each task runs :func:`~perception_judge.evaluation.cli.claim_worker` (:mod:`.claims`); Ray re-runs a task whose node
died, and its worker takes over the dead one's cells once their leases run out. The driver then collects. Every node
needs the project installed and the run folder on a shared file system.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def run_on_ray(
    worker: Callable[[argparse.Namespace], int], args: argparse.Namespace, plan: Any
) -> tuple[list[int], dict[str, Any]]:
    """Run the plan's ``ray`` tasks of ``worker(args)`` (the ``--claim`` worker, a module-level function Ray can
    pickle; ``ray_gpus`` each, on ``ray_address``) and collect; returns their exit codes and the collect state
    (``missing`` / ``failed`` / ``claimed`` cells)."""
    try:
        import ray
    except ImportError:
        raise ImportError(
            "--ray needs the ray package: pip install 'perception-judge[ray]' (or run `eval sweep --claim` "
            "workers under SLURM, see README)"
        ) from None
    from perception_judge.evaluation.sweep import collect

    workers, gpus = plan.job.ray, plan.job.ray_gpus
    if workers < 1:
        raise ValueError(f"--ray needs at least one worker, got {workers}")
    started = not ray.is_initialized()
    if started:
        ray.init(address=plan.job.ray_address, include_dashboard=False, log_to_driver=not args.quiet)
    try:
        if gpus is None:
            gpus = 1.0 if ray.cluster_resources().get("GPU", 0) >= 1 else 0.0
        task = ray.remote(num_gpus=gpus, num_cpus=1, max_retries=2)(worker)
        codes = [int(c) for c in ray.get([task.remote(args) for _ in range(workers)])]
    finally:
        if started:
            ray.shutdown()
    _, state = collect(plan.out_dir, report=not plan.job.no_report)
    return codes, state
