"""The model card (``README.md``, from ``model_card.md.jinja``) of a training run, and the values its run file
``perception_judge_run.json`` records (versions, final metrics; the fields are listed in docs/training.md "Run
folder, checkpoints, resume").
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import math
import os
from pathlib import Path
from typing import Any

from perception_judge.core.io import atomic_write_text

VERSIONED = (
    "perception-judge", "torch", "transformers", "trl", "peft", "accelerate", "datasets", "vllm", "deepspeed",
)  # fmt: skip
KEY_ARGS = (  # the settings the card's recipe table shows
    "learning_rate", "lr_scheduler_type", "weight_decay", "max_grad_norm", "num_generations",
    "per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation", "max_completion_length",
    "temperature", "top_p", "top_k", "beta", "loss_type", "epsilon", "scale_rewards", "num_train_epochs", "max_steps",
    "seed", "use_vllm", "vllm_mode", "bf16", "lora_r", "lora_alpha", "lora_dropout",
)  # fmt: skip
METRIC_ORDER = ("reward", "reward_std", "frac_reward_zero_std", "eval_reward", "train_loss", "kl", "entropy")


def versions() -> dict[str, str]:
    """Installed versions of the packages a run depends on (missing ones left out)."""
    out = {}
    for pkg in VERSIONED:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[pkg] = importlib.metadata.version(pkg)
    return out


def final_metrics(log_history: list[dict[str, Any]]) -> dict[str, Any]:
    """The last value of every numeric metric in the trainer's log history (train and validation)."""
    return {
        k: v
        for entry in log_history
        for k, v in entry.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and not math.isnan(v)
    }


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def render_model_card(info: dict[str, Any], metrics: dict[str, Any] | None = None) -> str:
    """The model card of a run (``model_card.md.jinja``) from its run-file dict; ``metrics`` default to the
    run's ``final_metrics``."""
    import jinja2

    args = info.get("args", {})
    lora = info.get("tuning", "full") == "lora"
    hidden = "num_train_epochs" if (args.get("max_steps") or -1) > 0 else "max_steps"  # max_steps wins if set
    settings = [
        (k, _fmt(args[k]))
        for k in KEY_ARGS
        if args.get(k) is not None and k != hidden and (lora or not k.startswith("lora_"))
    ]
    metrics = metrics if metrics is not None else (info.get("final_metrics") or {})
    keys = [k for k in METRIC_ORDER if k in metrics]
    keys += sorted(
        k
        for k in metrics
        if k not in keys and (k.startswith(("rewards/", "eval_rewards/")) or "parse_failure" in k)
    )
    keys += [k for k in ("global_step", "train_runtime") if k in metrics]
    template = Path(__file__).with_name("model_card.md.jinja").read_text()
    return jinja2.Template(template, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True).render(
        info=info,
        args=args,
        lora=lora,
        base=info.get("base_model", "?"),
        name=Path(str(info.get("output_dir", "model"))).name,
        pixel_policy=json.dumps(info.get("pixel_policy", {})),
        settings=settings,
        metrics=[(k, _fmt(metrics[k])) for k in keys],
        fmt=_fmt,
        protocols=lambda rep: ", ".join(
            f"{k} {v}" for k, v in sorted((rep.get("protocols_out") or {}).items())
        ),
    )


def write_model_card(
    output_dir: str | os.PathLike[str], info: dict[str, Any], metrics: dict[str, Any] | None = None
) -> Path:
    path = Path(output_dir) / "README.md"
    atomic_write_text(path, render_model_card(info, metrics))
    return path
