"""``perception-judge merge-lora``: fold a LoRA adapter into its base model and save a full model folder.

    perception-judge merge-lora --base Qwen/Qwen2.5-VL-32B-Instruct --adapter sungnyun/Flex-VL-32B-LoRA \\
        --out runs/merged/flex-vl-32b --dtype bfloat16

Also merges the adapters this trainer writes (``--adapter runs/x/checkpoint-30``; the base is the run's
``base_model`` in ``perception_judge_run.json`` when ``--base`` is omitted). The processor is taken from the
adapter folder when it has one (trainer checkpoints do), else from the base.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from perception_judge.core.command import Command
from perception_judge.core.io import check_writable
from perception_judge.core.options import Flag, Options, add_flags, options_from_args, problem
from perception_judge.train.memory import MODEL_SHAPES, PUBLISHED, estimate, shape_of, verdict


class MergeLoraOptions(Options):
    adapter: str
    """LoRA adapter folder or hub id"""
    base: str | None = None
    """base model folder or hub id (default: the adapter run's base_model)"""
    out: str
    """output folder for the merged model and its processor"""
    dtype: Literal["bfloat16", "float16", "float32", "auto"] = "bfloat16"
    """weights dtype"""
    trust_remote_code: bool = False
    """allow custom model code"""


def base_from_run(adapter: str) -> str | None:
    """The ``base_model`` of the run an adapter folder (or checkpoint folder inside it) belongs to."""
    from perception_judge.core.runinfo import RUN_FILE, read_run_info

    runs = [folder for folder in (Path(adapter), Path(adapter).parent) if (folder / RUN_FILE).is_file()]
    return read_run_info(runs[0]).get("base_model") if runs else None


def _run(args: argparse.Namespace) -> int:
    from perception_judge.train.models import merge_lora

    o = options_from_args(MergeLoraOptions, args)
    check_writable(o.out, "the merged model", "--out DIR")  # before the base model loads
    if not (base := o.base or base_from_run(o.adapter)):
        raise problem("base", "required, not given (no run file beside the adapter names it)")
    out = merge_lora(base, o.adapter, o.out, dtype=o.dtype, trust_remote_code=o.trust_remote_code)
    print(f"merged {o.adapter} into {base} -> {out}")
    return 0


MERGE_LORA = Command(add_arguments=lambda p: add_flags(p, MergeLoraOptions), run=_run, description=__doc__)


class MemoryOptions(Options):
    recipe: Annotated[str, Flag("recipe")]
    """a training recipe (YAML), e.g. recipes/flex7b.yaml; overrides follow it as train_grpo.py takes them"""
    world: int = Field(8, ge=1)
    """GPUs the run uses"""
    gpu_gib: float = Field(80.0, gt=0)
    """memory of one GPU in GiB"""
    shape: Literal[tuple(sorted(PUBLISHED))] | None = None  # type: ignore[valid-type]
    """the model's shape (default: its config.json, else known)"""
    zero_stage: int | None = Field(None, ge=0, le=3)
    """ZeRO stage (default: the recipe's)"""


def _model_shape(recipe: object, name: str | None) -> object:
    from transformers import AutoConfig

    model = recipe.model.model_name_or_path
    if name or model in MODEL_SHAPES:
        return PUBLISHED[name or MODEL_SHAPES[model]]
    return shape_of(AutoConfig.from_pretrained(model))


def _memory(args: argparse.Namespace) -> int:
    from perception_judge.train.recipe import parse_recipe, zero_stage

    o = options_from_args(MemoryOptions, args)
    # bf16 and vLLM are checked on the GPU machine; the arithmetic needs neither
    recipe = parse_recipe([o.recipe, *args.passthrough, "--bf16", "false"], check_environment=False)
    shape = _model_shape(recipe, o.shape)
    stage = (zero_stage(recipe.training) or 0) if o.zero_stage is None else o.zero_stage
    parts = estimate(recipe, shape, o.world, o.gpu_gib, stage)
    print(f"{o.recipe} on {o.world} x {o.gpu_gib:g} GiB, ZeRO-{stage}, per GPU, sequences at their longest")
    for key, value in parts.items():
        text = f"{value:,} tokens" if isinstance(value, int) else f"{value:,.1f} GiB"
        print(f"  {key:22s} {text:>16s}")
    problem = verdict(parts, recipe, stage)
    print(f"does NOT fit: {problem}" if problem else "fits")
    return 1 if problem else 0


RECIPE_MEMORY = Command(
    add_arguments=lambda p: add_flags(p, MemoryOptions),
    run=_memory,
    passthrough=True,
    description="Per-GPU memory of a recipe (perception_judge.train.memory: the arithmetic in its docstring and "
    'in docs/training.md, "Memory on 80 GB GPUs"); exit 1 when it does not fit.',
)
