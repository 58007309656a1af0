"""The project's own recipe settings, :class:`JudgeArguments`.

A recipe (YAML) and the command line fill four dataclasses through trl's ``TrlParser``: trl's ``ScriptArguments``
(``dataset_name`` is the exported training-set folder), ``GRPOConfig`` (trainer, generation, logging) and
``ModelConfig`` (model, dtype, attention, ``use_peft``, LoRA shape), and :class:`JudgeArguments`. Field names are
unique across the four, so a flat recipe maps every key to exactly one field; ``Literal`` fields become the
parser's choices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from transformers.hf_argparser import HfArg

from perception_judge.core.schema import DEFAULT_TAU
from perception_judge.rewards import TiePolicy


@dataclass
class JudgeArguments:
    """Project-specific settings of a GRPO judge run (docs/training.md "Recipe keys")."""

    reward_funcs: list[str] = field(
        default_factory=lambda: ["judge", "format"],
        metadata={
            "help": "Reward names or dotted paths `package.module:function`; weights: `reward_weights`."
        },
    )
    reward_ties: TiePolicy = field(default="zero", metadata={"help": "Tie policy of the ranking rewards."})
    reward_tau: float = HfArg(default=DEFAULT_TAU, help="Pointwise verdict: score >= tau means correct.")
    protocol_mix: dict[str, float] | str | None = field(
        default=None,
        metadata={"help": "Protocols and proportions, e.g. `batch=0.6,pair=0.4`. Unset: all rows."},
    )
    max_prompt_tokens: int | None = HfArg(default=None, help="Longest prompt, image tokens included.")
    overlong_prompts: Literal["drop", "error"] = HfArg(default="drop", help="What longer prompts get.")
    max_train_samples: int | None = HfArg(default=None, help="At most this many training rows.")
    max_eval_samples: int | None = HfArg(default=None, help="At most this many validation rows.")
    think_prefix: Literal["auto", "off"] = HfArg(
        default="auto", help="`auto`: open <think> in the generation prompt when the chat template does not."
    )
    image_mode: str = HfArg(default="fixed", help="Pixel policy: `fixed`, `smart` or `none`.")
    image_size: int = HfArg(default=448, help="Side of the fixed square (pixels).")
    image_min_pixels: int | None = HfArg(
        default=None,
        help="Smart mode: least image area; unset: the model processor's own (Qwen3-VL: 65,536).",
    )
    image_max_pixels: int = HfArg(default=448 * 448, help="Smart mode: largest image area.")
    image_factor: int = HfArg(default=0, help="Side multiple (patch x merge); 0: from the model config.")
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
    recipe_num_processes: int | None = HfArg(default=None, help="Process count the batch geometry assumes.")
    sample_log_steps: int = HfArg(default=0, help="Write completion samples every N steps (0: never).")
    num_samples_to_log: int = HfArg(default=4, help="Completions per sample dump.")


def mapping(value: Any, key: str, default: str = "1") -> dict[str, Any]:
    """A mapping-valued recipe key as a dict: a mapping, ``"a=1,b=2"`` (the command-line form; a bare ``a`` gets
    ``default``) or None / empty (``{}``)."""
    if isinstance(value, str):
        parts = [part.partition("=") for part in value.split(",") if part.strip()]
        value = {name.strip(): item.strip() if sep else default for name, sep, item in parts}
    if not isinstance(value, dict | None):
        raise ValueError(f"{key} must be a mapping or 'name=value,...', got {value!r}")
    return dict(value or {})


def protocol_mix_dict(value: Any) -> dict[str, float] | None:
    """Normalise ``protocol_mix`` (mapping, ``"batch=0.6,pair=0.4"`` or None) to a mapping of floats."""
    mix = mapping(value, "protocol_mix")
    if not mix:
        return None
    out: dict[str, float] = {}
    for name, weight in mix.items():
        try:
            out[str(name)] = float(weight)
        except (TypeError, ValueError):
            raise ValueError(f"protocol_mix: weight of {name!r} is not a number: {weight!r}") from None
        if out[str(name)] < 0:
            raise ValueError(f"protocol_mix: weight of {name!r} is negative ({out[str(name)]})")
    if not any(w > 0 for w in out.values()):
        raise ValueError(f"protocol_mix gives no protocol a positive weight: {value!r}")
    return out
