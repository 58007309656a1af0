"""``perception-judge merge-lora``: fold a LoRA adapter into its base model and save a full model folder.

    perception-judge merge-lora --base Qwen/Qwen2.5-VL-32B-Instruct --adapter sungnyun/Flex-VL-32B-LoRA \\
        --out runs/merged/flex-vl-32b --dtype bfloat16

Also merges the adapters this trainer writes (``--adapter runs/x/checkpoint-30``; the base is the run's
``base_model`` in ``perception_judge_run.json`` when ``--base`` is omitted). The processor is taken from the
adapter folder when it has one (trainer checkpoints do), else from the base.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perception_judge.core.command import Command
from perception_judge.train.memory import MODEL_SHAPES, PUBLISHED, estimate, shape_of, verdict


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--adapter", required=True, help="LoRA adapter folder or hub id")
    parser.add_argument("--base", help="base model folder or hub id (default: the adapter run's base_model)")
    parser.add_argument("--out", required=True, help="output folder for the merged model and its processor")
    dtypes = ["bfloat16", "float16", "float32", "auto"]
    parser.add_argument("--dtype", default="bfloat16", choices=dtypes, help="weights dtype")
    parser.add_argument("--trust-remote-code", action="store_true", help="allow custom model code")


def base_from_run(adapter: str) -> str | None:
    """The ``base_model`` of the run an adapter folder (or checkpoint folder inside it) belongs to."""
    from perception_judge.core.runinfo import RUN_FILE, read_run_info

    runs = [folder for folder in (Path(adapter), Path(adapter).parent) if (folder / RUN_FILE).is_file()]
    return read_run_info(runs[0]).get("base_model") if runs else None


def _run(args: argparse.Namespace) -> int:
    from perception_judge.train.models import merge_lora

    base = args.base or base_from_run(args.adapter)
    if not base:
        print(
            "merge-lora: --base is required (the adapter is not inside a run folder with perception_judge_run.json)",
            file=sys.stderr,
        )
        return 2
    out = merge_lora(base, args.adapter, args.out, dtype=args.dtype, trust_remote_code=args.trust_remote_code)
    print(f"merged {args.adapter} into {base} -> {out}")
    return 0


MERGE_LORA = Command(add_arguments=_add_arguments, run=_run, description=__doc__)


def _memory_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", help="a training recipe (YAML), e.g. recipes/flex7b.yaml")
    parser.add_argument("overrides", nargs="*", help="overrides, as train_grpo.py takes them (--key value)")
    parser.add_argument("--world", type=int, default=8, help="GPUs the run uses (default 8)")
    parser.add_argument("--gpu-gib", type=float, default=80.0, help="memory of one GPU in GiB (default 80)")
    help_ = "the model's shape (default: its config.json, else known)"
    parser.add_argument("--shape", choices=sorted(PUBLISHED), help=help_)
    parser.add_argument("--zero-stage", type=int, choices=range(4), help="ZeRO stage (default: the recipe's)")


def _model_shape(recipe: object, name: str | None) -> object:
    from transformers import AutoConfig

    model = recipe.model.model_name_or_path
    if name or model in MODEL_SHAPES:
        return PUBLISHED[name or MODEL_SHAPES[model]]
    return shape_of(AutoConfig.from_pretrained(model))


def _memory(args: argparse.Namespace) -> int:
    from perception_judge.train.recipe import RecipeError, parse_recipe, zero_stage

    try:  # bf16 and vLLM are checked on the GPU machine; the arithmetic needs neither
        recipe = parse_recipe([args.recipe, *args.passthrough, "--bf16", "false"], check_environment=False)
        shape = _model_shape(recipe, args.shape)
        stage = (zero_stage(recipe.training) or 0) if args.zero_stage is None else args.zero_stage
    except (RecipeError, OSError, ValueError) as e:
        print(f"recipe-memory: {e}", file=sys.stderr)
        return 2
    parts = estimate(recipe, shape, args.world, args.gpu_gib, stage)
    print(
        f"{args.recipe} on {args.world} x {args.gpu_gib:g} GiB, ZeRO-{stage}, per GPU, sequences at their longest"
    )
    for key, value in parts.items():
        text = f"{value:,} tokens" if isinstance(value, int) else f"{value:,.1f} GiB"
        print(f"  {key:22s} {text:>16s}")
    problem = verdict(parts, recipe, stage)
    print(f"does NOT fit: {problem}" if problem else "fits")
    return 1 if problem else 0


RECIPE_MEMORY = Command(
    add_arguments=_memory_arguments,
    run=_memory,
    passthrough=True,
    description="Per-GPU memory of a recipe (perception_judge.train.memory: the arithmetic in its docstring and "
    'in docs/training.md, "Memory on 80 GB GPUs"); exit 1 when it does not fit.',
)
