"""Reward wiring for the trainer: recipe names and options → trl reward callables.

The judge rewards come from the shared registry (:data:`perception_judge.rewards.REWARDS`), configured with the
recipe's tie policy and threshold and with ``think_open`` read from the prepared chat template, so the parser
knows whether the prompt itself opened the think block.

Two *diagnostic* rewards are registered here as well. They do not measure judging quality; they exist because a
random-weight tiny model never writes a valid ``<answer>`` tag, so the judge rewards are constant zero and every
advantage is zero. A dense reward makes the mechanics (advantages, gradients, logging) observable in tests and in
the CPU demo, and gives the learning-signal check a simple verifiable target:

* ``digit_fraction`` — fraction of the completion's non-space characters that are ASCII digits;
* ``completion_length`` — completion length in characters divided by 100, capped at 1.

A recipe may also name any callable by dotted path, ``package.module:function`` (or ``package.module.function``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from perception_judge.core.schema import DEFAULT_TAU
from perception_judge.rewards import REWARDS, JudgeReward, completion_text


class DiagnosticReward:
    """A dense reward on the completion text alone; ``None`` never occurs."""

    def __init__(self, name: str, fn: Callable[[str], float]) -> None:
        self.__name__ = name
        self.name = name
        self.fn = fn

    def __call__(
        self, prompts: Any = None, completions: Sequence[Any] | None = None, **kwargs: Any
    ) -> list[float]:
        out = []
        for completion in completions or []:
            text, reasoning = completion_text(completion)
            out.append(float(self.fn((reasoning or "") + text)))
        return out

    def __repr__(self) -> str:
        return f"DiagnosticReward({self.name!r})"


def _digit_fraction(text: str) -> float:
    chars = [c for c in text if not c.isspace()]
    if not chars:
        return 0.0
    return sum(1 for c in chars if "0" <= c <= "9") / len(chars)


def _completion_length(text: str) -> float:
    return min(len(text) / 100.0, 1.0)


DIAGNOSTIC_REWARDS: dict[str, DiagnosticReward] = {
    "digit_fraction": DiagnosticReward("digit_fraction", _digit_fraction),
    "completion_length": DiagnosticReward("completion_length", _completion_length),
}


def known_reward_names() -> list[str]:
    return sorted([*REWARDS, *DIAGNOSTIC_REWARDS])


def is_dotted_path(name: str) -> bool:
    return ":" in name or ("." in name and name not in REWARDS and name not in DIAGNOSTIC_REWARDS)


def import_callable(path: str) -> Callable[..., Any]:
    """Import ``package.module:function`` or ``package.module.function``."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"reward {path!r} is not a dotted path 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"reward {path!r}: cannot import module {module_name!r}: {e}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"reward {path!r}: {module_name!r} has no callable {attr!r}")
    return fn


def check_reward_names(names: Sequence[str]) -> None:
    """Fail on unknown names (dotted paths are imported to check them); names must be unique."""
    if not names:
        raise ValueError("reward_funcs is empty: name at least one reward")
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"reward {name!r} is listed twice in reward_funcs")
        seen.add(name)
        if name in REWARDS or name in DIAGNOSTIC_REWARDS:
            continue
        if is_dotted_path(name):
            import_callable(name)
            continue
        raise ValueError(
            f"unknown reward {name!r}; known: {', '.join(known_reward_names())} or a dotted path"
        )


def reward_display_name(fn: Any, fallback: str) -> str:
    return getattr(fn, "__name__", None) or fallback


def build_rewards(
    names: Sequence[str], ties: str = "zero", tau: float = DEFAULT_TAU, think_open: bool = False
) -> list[Callable[..., Any]]:
    """The trl reward callables for ``names`` (same order), judge rewards configured with the options."""
    check_reward_names(names)
    out: list[Callable[..., Any]] = []
    for name in names:
        if name in REWARDS:
            reward: JudgeReward = REWARDS[name].with_options(ties=ties, tau=tau, think_open=think_open)
            out.append(reward)
        elif name in DIAGNOSTIC_REWARDS:
            out.append(DIAGNOSTIC_REWARDS[name])
        else:
            out.append(import_callable(name))
    return out


def reward_weight_map(names: Sequence[str], weights: Sequence[float] | None) -> dict[str, float]:
    """``{name: weight}`` as trl will apply them (default 1.0 each)."""
    if weights is None:
        return {n: 1.0 for n in names}
    if len(weights) != len(names):
        raise ValueError(
            f"reward_weights has {len(weights)} values for {len(names)} reward_funcs ({', '.join(names)}); "
            "give one weight per reward"
        )
    return {n: float(w) for n, w in zip(names, weights)}
