"""The run file (``perception_judge_run.json``) and the model card (``README.md``) of a training run.

``perception_judge_run.json`` is the contract with the evaluation sweep. It is written when the run starts (a
crashed run can still be swept) and updated on every save and at the end::

    base_model      path (absolute, for local folders) or hub id the run started from, after any base merge
    model_type      e.g. "qwen2_5_vl"
    tuning          "full" | "lora"
    think_prefix    "auto" | "off"   (re-install with protocol.prepare_processor before rendering prompts)
    pixel_policy    PixelPolicy.to_dict()
    rewards         {name: weight}
    reward_options  {"ties", "tau", "think_open"}
    train_set       training-set folder (absolute)
    recipe          recipe path (absolute) or null
    args            every resolved argument, flattened
    final_metrics   last value of every logged metric (null until the run ends)
    status          "running" | "finished" | "failed"; plus data reports, checkpoints, world size, versions
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from perception_judge.core.io import atomic_write_text

CARD_FILE = "README.md"


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for pkg in (
        "perception-judge",
        "torch",
        "transformers",
        "trl",
        "peft",
        "accelerate",
        "datasets",
        "vllm",
        "deepspeed",
    ):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            continue
    return out


def final_metrics(log_history: list[dict[str, Any]]) -> dict[str, Any]:
    """The last value of every numeric metric in the trainer's log history (train and validation)."""
    out: dict[str, Any] = {}
    for entry in log_history:
        for k, v in entry.items():
            if isinstance(v, bool) or not isinstance(v, int | float):
                continue
            if isinstance(v, float) and v != v:
                continue
            out[k] = v
    return out


# ----------------------------------------------------------------------------------------------------------
# Model card
# ----------------------------------------------------------------------------------------------------------

_KEY_ARGS = (
    "learning_rate",
    "lr_scheduler_type",
    "weight_decay",
    "max_grad_norm",
    "num_generations",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "steps_per_generation",
    "max_completion_length",
    "temperature",
    "top_p",
    "top_k",
    "beta",
    "loss_type",
    "epsilon",
    "scale_rewards",
    "num_train_epochs",
    "max_steps",
    "seed",
    "use_vllm",
    "vllm_mode",
    "bf16",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
)

_METRIC_ORDER = ("reward", "reward_std", "frac_reward_zero_std", "eval_reward", "train_loss", "kl", "entropy")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def render_model_card(info: dict[str, Any], metrics: dict[str, Any] | None = None) -> str:
    args = info.get("args", {})
    tuning = info.get("tuning", "full")
    base = info.get("base_model", "?")
    lines = [
        "---",
        f"base_model: {base}",
        "library_name: " + ("peft" if tuning == "lora" else "transformers"),
        "pipeline_tag: image-text-to-text",
        "tags: [perception-judge, grpo, trl, llm-as-a-judge, multimodal]",
        "---",
        "",
        f"# {Path(str(info.get('output_dir', 'model'))).name}",
        "",
        "A multimodal LLM judge trained with GRPO by perception-judge "
        f"({'a LoRA adapter' if tuning == 'lora' else 'full fine-tuning'}). It reasons in `<think>` and then "
        "writes one `<answer>score</answer>` tag per judged response (integers 1-10).",
        "",
        "## Base model",
        "",
        f"- base: `{base}` ({info.get('model_type', '?')})",
    ]
    if info.get("base_adapter"):
        lines.append(f"- merged before training: adapter `{info['base_adapter']}`")
    lines += [
        f"- tuning: {tuning}"
        + (f" (LoRA r={args.get('lora_r')}, alpha={args.get('lora_alpha')})" if tuning == "lora" else ""),
        "",
        "## Data",
        "",
        f"- training set: `{info.get('train_set', '?')}`",
    ]
    for split, rep in (info.get("data") or {}).items():
        mix = ", ".join(f"{k} {v}" for k, v in sorted((rep.get("protocols_out") or {}).items()))
        dropped = rep.get("dropped_overlong", 0)
        lines.append(
            f"- {split}: {rep.get('rows_out', '?')} of {rep.get('rows_in', '?')} rows ({mix}); "
            f"{dropped} dropped as overlong prompts, {rep.get('dropped_by_protocol_mix', 0)} by the protocol mix"
        )
    lines += ["", "## Rewards", ""]
    for name, w in (info.get("rewards") or {}).items():
        lines.append(f"- `{name}` × {_fmt(w)}")
    opts = info.get("reward_options") or {}
    if opts:
        lines.append(
            f"- options: ties={opts.get('ties')}, tau={opts.get('tau')}, think_open={opts.get('think_open')}"
        )
    lines += [
        "",
        "## Prompts and images",
        "",
        f"- prompts: `perception_judge.core.protocol.build_messages`, rendered by `render_generation_prompt` with "
        f"`think_prefix={info.get('think_prefix')!r}` (the saved chat template is the base model's; install the "
        "prefix with `prepare_processor(processor, think_prefix)` to reproduce the training prompt exactly)",
        f"- images: pixel policy `{json.dumps(info.get('pixel_policy', {}))}`",
        "",
        "## Recipe",
        "",
        f"- recipe: `{info.get('recipe')}`"
        + (f", overrides `{' '.join(info.get('overrides') or [])}`" if info.get("overrides") else ""),
        f"- processes: {info.get('world_size', '?')}",
        "",
        "| setting | value |",
        "|---|---|",
    ]
    for k in _KEY_ARGS:
        if k in args and args[k] is not None:
            if tuning != "lora" and k.startswith("lora_"):
                continue
            if (k == "num_train_epochs" and (args.get("max_steps") or -1) > 0) or (
                k == "max_steps" and args[k] <= 0
            ):
                continue  # max_steps overrides the epochs
            lines.append(f"| {k} | {_fmt(args[k])} |")
    metrics = metrics if metrics is not None else (info.get("final_metrics") or {})
    lines += ["", "## Final metrics", ""]
    if metrics:
        lines += ["| metric | value |", "|---|---|"]
        keys = [k for k in _METRIC_ORDER if k in metrics]
        keys += sorted(
            k
            for k in metrics
            if k not in keys and (k.startswith(("rewards/", "eval_rewards/")) or "parse_failure" in k)
        )
        keys += [k for k in ("global_step", "train_runtime") if k in metrics]
        for k in keys:
            lines.append(f"| {k} | {_fmt(metrics[k])} |")
    else:
        lines.append("(the run has not finished)")
    vers = info.get("versions") or {}
    if vers:
        lines += ["", "## Versions", "", ", ".join(f"{k} {v}" for k, v in vers.items())]
    return "\n".join(lines) + "\n"


def write_model_card(
    output_dir: str | os.PathLike[str], info: dict[str, Any], metrics: dict[str, Any] | None = None
) -> Path:
    path = Path(output_dir) / CARD_FILE
    atomic_write_text(path, render_model_card(info, metrics))
    return path
