"""The project's own recipe settings, :class:`JudgeArguments`, the fourth dataclass of the recipe next to trl's
(docs/training.md "Recipe keys"). ``Literal`` fields become the parser's choices, and a numeric field's type carries
its :class:`Range` (``Annotated[float, Range("(1, 10]")]``: the parser sees ``float``, :func:`declared_ranges` the
range), which ``train.recipe`` checks before any model loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, get_type_hints

from transformers.hf_argparser import HfArg

from perception_judge.core.schema import DEFAULT_TAU, MAX_SCORE, MIN_SCORE
from perception_judge.rewards import TiePolicy


@dataclass(frozen=True)
class Range:
    """A numeric interval written as in mathematics, ``"(0, inf)"``, ``"[1, 10]"`` (NaN lies in none); ``also``:
    values allowed besides; ``text``: the range as the message states it (default ``in <interval>``); ``why``:
    appended to the message."""

    interval: str
    also: tuple[float, ...] = ()
    text: str = ""
    why: str = ""

    def problem(self, key: str, value: Any) -> str | None:
        """Why ``value`` of ``key`` is out of range; None when it is inside or not a number (lists: every item)."""
        if isinstance(value, list | tuple):
            return next((p for v in value if (p := self.problem(key, v))), None)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        lo, hi = (float(x) for x in self.interval[1:-1].split(","))
        above = lo < value or (self.interval[0] == "[" and value == lo)
        if (above and (value < hi or (self.interval[-1] == "]" and value == hi))) or value in self.also:
            return None
        why = f": {self.why}" if self.why else ""
        return f"{key} must be {self.text or 'in ' + self.interval}, got {value!r}{why}"


GE0, GE1 = Range("[0, inf)"), Range("[1, inf)")
TAU = Range(
    f"({MIN_SCORE}, {MAX_SCORE}]",
    why=f"scores are {MIN_SCORE}-{MAX_SCORE} and a score >= tau counts as 'correct': at or below {MIN_SCORE} no "
    f"verdict is 'incorrect', above {MAX_SCORE} none is 'correct'",
)


def declared_ranges(*classes: type) -> dict[str, Range]:
    """The :class:`Range` every field of these dataclasses declares in its type."""
    hints = {k: v for cls in classes for k, v in get_type_hints(cls, include_extras=True).items()}
    return {
        k: r for k, hint in hints.items() for r in getattr(hint, "__metadata__", ()) if isinstance(r, Range)
    }


@dataclass
class JudgeArguments:
    """Project-specific settings of a GRPO judge run (docs/training.md "Recipe keys")."""

    reward_funcs: list[str] = field(
        default_factory=lambda: ["judge", "format"],
        metadata={"help": "Reward names or dotted paths `package.module:function`; weights: reward_weights."},
    )
    reward_ties: TiePolicy = field(default="zero", metadata={"help": "Tie policy of the ranking rewards."})
    reward_tau: Annotated[float, TAU] = HfArg(default=DEFAULT_TAU, help="Verdict: correct if score >= tau.")
    protocol_mix: dict[str, float] | str | None = field(
        default=None,
        metadata={"help": "Protocols and proportions, e.g. `batch=0.6,pair=0.4`. Unset: all rows."},
    )
    max_prompt_tokens: Annotated[int | None, GE1] = HfArg(default=None, help="Longest prompt, in tokens.")
    overlong_prompts: Literal["drop", "error"] = HfArg(default="drop", help="What longer prompts get.")
    max_train_samples: Annotated[int | None, GE1] = HfArg(default=None, help="At most N training rows.")
    max_eval_samples: Annotated[int | None, GE1] = HfArg(default=None, help="At most N validation rows.")
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
    image_factor: Annotated[int, GE0] = HfArg(default=0, help="Side multiple; 0: patch x merge.")
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
    recipe_num_processes: Annotated[int | None, GE1] = HfArg(default=None, help="Processes assumed.")
    skip_memory_check: bool = HfArg(default=False, help="Start even if the memory preflight refuses.")
    sample_log_steps: Annotated[int, GE0] = HfArg(default=0, help="Samples every N steps; 0: never.")
    num_samples_to_log: Annotated[int, GE0] = HfArg(default=4, help="Completions per sample dump.")


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
