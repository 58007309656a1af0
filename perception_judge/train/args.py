"""The project's own recipe settings, :class:`JudgeArguments`, the fourth dataclass of the recipe next to trl's
(docs/training.md "Recipe keys"). ``Literal`` fields become the parser's choices; a numeric field's type carries its
pydantic constraints (``Annotated[float, Field(gt=1, le=10)]``: the parser sees ``float``), which ``train.recipe``
checks through ``core.options`` before any model loads. The mapping keys take a YAML mapping or, on the command
line, ``KEY=VALUE,...`` (``core.options.key_values``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator
from transformers.hf_argparser import HfArg

from perception_judge.core.options import Options, Why
from perception_judge.core.schema import DEFAULT_TAU, MAX_SCORE, MIN_SCORE
from perception_judge.rewards import TiePolicy

TAU_WHY = Why(
    f"scores are {MIN_SCORE}-{MAX_SCORE} and a score >= tau counts as 'correct': at or below {MIN_SCORE} no verdict is "
    f"'incorrect', above {MAX_SCORE} none is 'correct'"
)


class ProtocolMix(Options):
    """``protocol_mix``: each protocol's relative weight; a protocol left out gets 0 (its rows are dropped)."""

    batch: float = Field(0.0, ge=0)
    pair: float = Field(0.0, ge=0)
    single: float = Field(0.0, ge=0)

    @model_validator(mode="after")
    def _one_positive(self) -> ProtocolMix:
        if not any(self.model_dump().values()):
            raise ValueError("no protocol has a positive weight")
        return self


@dataclass
class JudgeArguments:
    """Project-specific settings of a GRPO judge run (docs/training.md "Recipe keys")."""

    reward_funcs: list[str] = field(
        default_factory=lambda: ["judge", "format"],
        metadata={"help": "Reward names or dotted paths `package.module:function`; weights: reward_weights."},
    )
    reward_ties: TiePolicy = field(default="zero", metadata={"help": "Tie policy of the ranking rewards."})
    reward_tau: Annotated[float, Field(gt=MIN_SCORE, le=MAX_SCORE, allow_inf_nan=False), TAU_WHY] = HfArg(
        default=DEFAULT_TAU, help="Verdict: correct if score >= tau."
    )
    protocol_mix: dict[str, float] | str | None = field(
        default=None, metadata={"help": "ProtocolMix, e.g. `batch=0.6,pair=0.4`. Unset: all rows."}
    )
    max_prompt_tokens: Annotated[int | None, Field(ge=1)] = HfArg(default=None, help="Longest prompt.")
    overlong_prompts: Literal["drop", "error"] = HfArg(default="drop", help="What longer prompts get.")
    max_train_samples: Annotated[int | None, Field(ge=1)] = HfArg(default=None, help="Training rows.")
    max_eval_samples: Annotated[int | None, Field(ge=1)] = HfArg(default=None, help="Validation rows.")
    think_prefix: Literal["auto", "off"] = HfArg(
        default="auto", help="`auto`: open <think> in the generation prompt when the chat template does not."
    )
    pixel_policy: dict[str, Any] | str | None = field(
        default=None,
        metadata={
            "help": "core.images.PixelPolicy, e.g. `mode=fixed,size=448` (updates the recipe's); unset factor: patch "
            "x merge of the model, unset min_pixels: the model processor's least area."
        },
    )
    freeze_vision_tower: bool = HfArg(default=False, help="Freeze the vision tower (full fine-tuning).")
    lora_exclude_modules: str | None = HfArg(default=r".*visual.*", help="Modules LoRA never adapts (regex).")
    base_adapter: str | None = HfArg(default=None, help="LoRA adapter merged into the base before training.")
    merged_base_dir: str | None = HfArg(default=None, help="Where the merge goes (<output_dir>/merged_base).")
    model_provider: str | None = HfArg(
        default=None,
        help="`package.module:function` called as function(model_name_or_path, **model_provider_options) before "
        "the model loads, once every input is checked: builds or fetches the model there (docs/training.md).",
    )
    model_provider_options: dict[str, Any] | str | None = field(
        default=None, metadata={"help": "model_provider's keyword options: a mapping, or `key=value,...`."}
    )
    recipe_num_processes: Annotated[int | None, Field(ge=1)] = HfArg(default=None, help="Processes assumed.")
    skip_memory_check: bool = HfArg(default=False, help="Start even if the memory preflight refuses.")
    sample_log_steps: Annotated[int, Field(ge=0)] = HfArg(default=0, help="Samples every N steps; 0: never.")
    num_samples_to_log: Annotated[int, Field(ge=0)] = HfArg(default=4, help="Completions per sample dump.")
