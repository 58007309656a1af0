"""The learnability check of the tiny substrate (docs/tiny-substrate.md): supervised training on the PPJD verdict
target with the true value as the think (GRPO's upper bound on the same model and data), then greedy held-out pair
accuracy through the ``hf`` backend and the perception suite's requests and metrics, with real and with mismatched
images. Pass: r_c vs r_rp >= :data:`TARGET_ACCURACY`, the mismatched-image control <= :data:`CONTROL_CEILING`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import Field

from perception_judge.core.command import Command
from perception_judge.core.io import atomic_write_text, check_writable
from perception_judge.core.options import Options, add_flags, options_from_args
from perception_judge.core.schema import DEFAULT_TAU
from perception_judge.tiny.world import TINY_FAMILIES, TinyFamilies

TARGET_ACCURACY = 0.95
CONTROL_CEILING = 0.6


def heldout_records(n: int, seed: int, families: Any = None) -> list[Any]:
    """``n`` tiny-world records of ``families`` (default both) as perception-suite records (images at the tiny
    judge's 56 px)."""
    from perception_judge.evaluation.perception import Record
    from perception_judge.tiny.supervised import tiny_records

    return [
        Record(r["key"], r["question"], [r["image"]], r["responses"]) for r in tiny_records(n, seed, families)
    ]


def score_pairs(
    model_dir: str | Path, records: list[Any], image_control: str = "none", batch_size: int = 32
) -> dict[str, Any]:
    """Greedy pair judgements (both orders) of ``records`` by the model in ``model_dir``; the perception suite's
    metrics (:func:`perception_judge.evaluation.perception.score_seed`)."""
    from perception_judge.core.images import PixelPolicy
    from perception_judge.core.schema import Sampling
    from perception_judge.evaluation.backends.hf import HFBackend
    from perception_judge.evaluation.perception import apply_image_control, build_requests, score_seed

    recs = apply_image_control(records, image_control, seed=0)
    requests = build_requests(recs, ["pair"], "random", 0, style="tiny")
    backend = HFBackend(
        model_dir,
        pixel_policy=PixelPolicy(mode="fixed", size=56, factor=28),
        batch_size=batch_size,
        dtype="float32",
        device="cpu",
        progress=False,
    )
    try:
        results = backend.judge(requests, Sampling(temperature=0.0, max_new_tokens=16, seed=0))
    finally:
        backend.close()
    metrics, counts, _ = score_seed(requests, results, tau=DEFAULT_TAU)
    return {"metrics": metrics, "counts": counts}


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_check(
    steps: int = 2000,
    seed: int = 0,
    n_heldout: int = 200,
    heldout_seed: int = 7_777,
    arch: str = "qwen2_5_vl",
    work_dir: str | Path | None = None,
    progress: bool = False,
    keep_model: str | Path | None = None,
    threads: int = 1,
    families: Any = None,
) -> dict[str, Any]:
    """Run the check; returns the measurements and ``passed``. ``keep_model`` saves the supervised judge there.
    ``threads``: torch threads while it runs (one is as fast for this model, and the float reduction order, hence
    the draw, then does not depend on the machine's core count). ``families``: the tiny families trained and held
    out (default both)."""
    from perception_judge.tiny.models import make_tiny_model
    from perception_judge.tiny.supervised import supervised_tiny_judge

    with _torch_threads(threads), tempfile.TemporaryDirectory(prefix="pj-learnability-") as tmp:
        model_dir = make_tiny_model(arch, Path(work_dir or tmp) / "model", seed=seed)
        train = supervised_tiny_judge(
            model_dir,
            steps,
            think_source="truth",
            seed=seed,
            progress=progress,
            data_worker=True,
            families=families,
        )
        records = heldout_records(n_heldout, heldout_seed, families)
        real = score_pairs(model_dir, records, "none")["metrics"]
        control = score_pairs(model_dir, records, "mismatched")["metrics"]
        if keep_model:
            import shutil

            shutil.rmtree(keep_model, ignore_errors=True)
            shutil.copytree(model_dir, keep_model)
    result = {
        "arch": arch,
        "seed": seed,
        "train": train,
        "n_heldout_records": n_heldout,
        "heldout": {k: real[k] for k in real if k.startswith("pair_acc")},
        "mismatched": {k: control[k] for k in control if k.startswith("pair_acc")},
        "chance": 0.5,
        "target": {"c_vs_rp": TARGET_ACCURACY, "mismatched_c_vs_rp_max": CONTROL_CEILING},
    }
    result["passed"] = bool(
        (real["pair_acc_c_vs_rp"] or 0) >= TARGET_ACCURACY
        and (control["pair_acc_c_vs_rp"] or 0) <= CONTROL_CEILING
    )
    return result


class LearnabilityOptions(Options):
    steps: int = Field(2000, ge=1)
    """supervised steps (batch 32)"""
    seed: int = 0
    """model and training seed"""
    heldout: int = Field(200, ge=1)
    """held-out records"""
    heldout_seed: int = 7_777
    """seed of the held-out records"""
    families: TinyFamilies = TINY_FAMILIES
    """tiny families trained and held out, comma-separated"""
    out: str | None = None
    """write the result as JSON here"""
    keep_model: str | None = None
    """save the supervised judge in this folder"""
    progress: bool = True
    """progress bar"""


def _run(args: argparse.Namespace) -> int:
    o = options_from_args(LearnabilityOptions, args, "learnability")
    if o.out:  # before minutes of training
        check_writable(Path(o.out).parent, "the result", "--out FILE")
    if o.keep_model:
        check_writable(o.keep_model, "the model", "--keep-model DIR")
    result = run_check(
        o.steps,
        o.seed,
        o.heldout,
        o.heldout_seed,
        progress=o.progress,
        keep_model=o.keep_model,
        families=o.families,
    )
    if o.out:
        atomic_write_text(o.out, json.dumps(result, indent=2) + "\n")
    h, m = result["heldout"], result["mismatched"]
    print(
        f"learnability: held-out r_c vs r_rp {h['pair_acc_c_vs_rp']:.3f} "
        f"[{h['pair_acc_c_vs_rp_ci95_lo']:.2f}, {h['pair_acc_c_vs_rp_ci95_hi']:.2f}], r_c vs r_rp+r "
        f"{h['pair_acc_c_vs_rp_r']:.3f}; mismatched images {m['pair_acc_c_vs_rp']:.3f} (chance 0.5) -> "
        f"{'PASS' if result['passed'] else 'FAIL'} in {result['train']['seconds']:.0f} s of training"
    )
    return 0 if result["passed"] else 1


COMMAND = Command(
    lambda p: add_flags(p, LearnabilityOptions),
    _run,
    "The learnability check of the tiny substrate: supervised training on the PPJD verdict target, then held-out "
    "pair accuracy with real and with mismatched images; exit 1 when it fails (docs/tiny-substrate.md).",
)
