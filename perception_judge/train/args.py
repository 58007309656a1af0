"""The trainer's argument dataclasses.

A recipe (YAML) and the command line fill four dataclasses through trl's ``TrlParser``:

* :class:`JudgeScriptArguments` — trl's ``ScriptArguments`` (``dataset_name`` = the exported training-set
  folder; the validation split is ``validation``);
* ``trl.GRPOConfig`` — every trainer / generation / logging setting, unchanged;
* ``trl.ModelConfig`` — model path, dtype, attention implementation, ``use_peft`` and the LoRA shape;
* :class:`JudgeArguments` — the project's own settings below (rewards, protocol mix, think prefix, pixel
  policy, vision-tower freezing, base adapter, prompt-length policy, tracking extras).

Field names are unique across the four, so a flat recipe maps every key to exactly one field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trl import ScriptArguments

from perception_judge.core.schema import DEFAULT_TAU

IMAGE_MODES = ("fixed", "smart", "none")
THINK_PREFIXES = ("auto", "off")
OVERLONG_POLICIES = ("drop", "error")


@dataclass
class JudgeScriptArguments(ScriptArguments):
    """trl's script arguments with the split names of an exported training set."""

    dataset_test_split: str = field(
        default="validation",
        metadata={"help": "Split used for validation (the export writes `validation`); empty string: none."},
    )


@dataclass
class JudgeArguments:
    """Project-specific settings of a GRPO judge run."""

    # --- rewards ------------------------------------------------------------------------------------------
    reward_funcs: list[str] = field(
        default_factory=lambda: ["judge", "format"],
        metadata={
            "help": "Reward names (perception_judge.rewards.REWARDS, plus the diagnostic rewards of "
            "perception_judge.train.rewards) or dotted paths `package.module:function`. Weights come from "
            "`reward_weights` (GRPOConfig), one per name, default 1.0 each."
        },
    )
    reward_ties: str = field(
        default="zero",
        metadata={
            "help": "Tie policy of the ranking rewards: `zero` (published: any tie scores 0) or `half`."
        },
    )
    reward_tau: float = field(
        default=DEFAULT_TAU,
        metadata={"help": "Threshold of the pointwise verdict reward (score >= tau means correct)."},
    )

    # --- data ---------------------------------------------------------------------------------------------
    protocol_mix: dict[str, float] | str | None = field(
        default=None,
        metadata={
            "help": "Which judge protocols to train on and in what proportion, e.g. `batch=1` (published: batch "
            "only) or `batch=0.6,pair=0.2,single=0.2` (a mapping in YAML). Rows of unlisted protocols are dropped; "
            "proportions are met by subsampling without oversampling. Unset: keep every row."
        },
    )
    max_prompt_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Longest allowed prompt in tokens, image tokens included (published: 4096). Longer prompts are "
            "handled by `overlong_prompts`; the count is always reported. Unset: no limit."
        },
    )
    overlong_prompts: str = field(
        default="drop", metadata={"help": "`drop` (count, report, train without them) or `error`."}
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Use at most this many training rows (after filtering)."}
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Use at most this many validation rows (after filtering)."}
    )

    # --- prompt rendering and images ----------------------------------------------------------------------
    think_prefix: str = field(
        default="auto",
        metadata={
            "help": "`auto`: open a <think> block in the generation prompt when the chat template does not "
            "(Flex-VL / Qwen2.5-VL); `off`: leave the template alone. Training and evaluation share this setting."
        },
    )
    image_mode: str = field(
        default="fixed",
        metadata={"help": "Pixel policy: `fixed` (square of image_size), `smart` (aspect kept) or `none`."},
    )
    image_size: int = field(default=448, metadata={"help": "Side of the fixed square (pixels)."})
    image_min_pixels: int = field(default=56 * 56, metadata={"help": "Smart mode: least image area."})
    image_max_pixels: int = field(default=448 * 448, metadata={"help": "Smart mode: largest image area."})
    image_factor: int = field(
        default=0,
        metadata={
            "help": "Side multiple (patch size x merge size); 0 reads it from the model config (28 or 32)."
        },
    )

    # --- model --------------------------------------------------------------------------------------------
    freeze_vision_tower: bool = field(
        default=False, metadata={"help": "Freeze the vision tower (and its merger) during full fine-tuning."}
    )
    lora_exclude_modules: str | None = field(
        default=r".*visual.*",
        metadata={"help": "Regex of modules LoRA never adapts (default: the vision tower). Empty: none."},
    )
    base_adapter: str | None = field(
        default=None,
        metadata={
            "help": "A LoRA adapter merged into the base model before training (the flex32b recipe merges "
            "Flex-VL-32B-LoRA into Qwen2.5-VL-32B-Instruct). The merged model is saved to `merged_base_dir` once "
            "and reused."
        },
    )
    merged_base_dir: str | None = field(
        default=None,
        metadata={"help": "Where the merged base is written (default: <output_dir>/merged_base)."},
    )
    tiny_model_arch: str | None = field(
        default=None,
        metadata={
            "help": "Build a tiny random-weight model of this arch (`qwen2_5_vl`, `qwen3_vl`) at "
            "`model_name_or_path` when that folder does not exist (CPU demo and tests)."
        },
    )
    tiny_model_seed: int = field(default=0, metadata={"help": "Seed of the generated tiny model."})
    tiny_model_warm_start_steps: int = field(
        default=0,
        metadata={
            "help": "When the tiny model is built: this many supervised steps that teach it the judge output "
            "format (random scores, no preferences), so judge rewards and evaluation numbers are not all parse "
            "failures. 0 leaves the weights random."
        },
    )

    # --- run bookkeeping and tracking ---------------------------------------------------------------------
    recipe_num_processes: int | None = field(
        default=None,
        metadata={
            "help": "The number of processes (GPUs) the recipe's batch geometry assumes; the batch checks run for "
            "it too, and a run with another count is warned about (prompts per step change)."
        },
    )
    sample_log_steps: int = field(
        default=0,
        metadata={
            "help": "Every this many optimizer steps, write completion samples with their images under "
            "<output_dir>/samples/ (0: never)."
        },
    )
    num_samples_to_log: int = field(default=4, metadata={"help": "Completions per sample dump."})


def protocol_mix_dict(value: Any) -> dict[str, float] | None:
    """Normalise ``protocol_mix`` (mapping, ``"batch=0.6,pair=0.4"`` or None) to a mapping of floats."""
    if value is None or value == "" or value == {}:
        return None
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, str):
        items = []
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            name, sep, weight = part.partition("=")
            if not sep:
                name, weight = part, "1"
            items.append((name.strip(), weight.strip()))
    else:
        raise ValueError(f"protocol_mix must be a mapping or 'name=weight,...', got {value!r}")
    out: dict[str, float] = {}
    for name, weight in items:
        try:
            w = float(weight)
        except (TypeError, ValueError):
            raise ValueError(f"protocol_mix: weight of {name!r} is not a number: {weight!r}") from None
        if w < 0:
            raise ValueError(f"protocol_mix: weight of {name!r} is negative ({w})")
        out[str(name)] = w
    if not any(w > 0 for w in out.values()):
        raise ValueError(f"protocol_mix gives no protocol a positive weight: {value!r}")
    return out
