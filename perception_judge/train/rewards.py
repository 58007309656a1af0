"""Reward wiring for the trainer: recipe names and options → trl reward callables: the judge rewards of
:data:`perception_judge.rewards.REWARDS` with the recipe's tie policy, threshold and ``think_open``, any callable by
dotted path (``package.module:function``), and two *diagnostic* rewards for random-weight models, which never write
an answer tag (docs/training.md "Rewards"):

* ``digit_fraction`` — fraction of the completion's non-space characters that are ASCII digits;
* ``completion_length`` — completion length in characters divided by 100, capped at 1.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable, Sequence
from typing import Any

from perception_judge.core.options import problem
from perception_judge.core.schema import DEFAULT_TAU
from perception_judge.rewards import REWARDS, completion_text


def _digit_fraction(text: str) -> float:
    chars = [c for c in text if not c.isspace()]
    return sum(1 for c in chars if "0" <= c <= "9") / len(chars) if chars else 0.0


def _completion_length(text: str) -> float:
    return min(len(text) / 100.0, 1.0)


def _text_reward(name: str, fn: Callable[[str], float]) -> Callable[..., list[float]]:
    """A trl reward callable of ``fn`` on the completion text alone (reasoning included); never None."""

    def reward(prompts: Any = None, completions: Sequence[Any] | None = None, **kwargs: Any) -> list[float]:
        return [float(fn((r or "") + t)) for t, r in map(completion_text, completions or [])]

    reward.__name__ = reward.__qualname__ = name
    return reward


DIAGNOSTIC_REWARDS: dict[str, Callable[..., list[float]]] = {
    "digit_fraction": _text_reward("digit_fraction", _digit_fraction),
    "completion_length": _text_reward("completion_length", _completion_length),
}


def import_callable(path: str, what: str = "reward_funcs") -> Callable[..., Any]:
    """Import ``package.module:function`` or ``package.module.function`` (``what``: the key errors name)."""
    try:
        fn = pkgutil.resolve_name(path)
    except (ImportError, ValueError, AttributeError) as e:
        raise problem(what, f"cannot import it: {e}", path) from None
    if not callable(fn):
        raise problem(what, "not callable", path)
    return fn


def check_reward_names(names: Sequence[str]) -> None:
    """Fail on unknown names (dotted paths are imported to check them); names must be unique."""
    if not names:
        raise problem("reward_funcs", "empty: name at least one reward", names)
    for i, name in enumerate(names):
        if name in names[:i]:
            raise problem("reward_funcs", f"{name!r} is listed twice", names)
        if name in REWARDS or name in DIAGNOSTIC_REWARDS:
            continue
        if ":" not in name and "." not in name:
            known = ", ".join(sorted([*REWARDS, *DIAGNOSTIC_REWARDS]))
            raise problem("reward_funcs", f"unknown reward {name!r} (known: {known} or a dotted path)", names)
        import_callable(name)


def build_rewards(
    names: Sequence[str], ties: str = "zero", tau: float = DEFAULT_TAU, think_open: bool = False
) -> list[Callable[..., Any]]:
    """The trl reward callables for ``names`` (same order), judge rewards configured with the options."""
    check_reward_names(names)
    return [
        REWARDS[name].with_options(ties=ties, tau=tau, think_open=think_open)
        if name in REWARDS
        else DIAGNOSTIC_REWARDS.get(name) or import_callable(name)
        for name in names
    ]


def reward_weight_map(names: Sequence[str], weights: Sequence[float] | None) -> dict[str, float]:
    """``{name: weight}`` as trl will apply them (default 1.0 each)."""
    if weights is None:
        return dict.fromkeys(names, 1.0)
    if len(weights) != len(names):
        what = f"{len(weights)} values for {len(names)} reward_funcs ({', '.join(names)}): give one weight per reward"
        raise problem("reward_weights", what, list(weights))
    if not any(weights):
        raise problem("reward_weights", "all 0: no reward would train; make one non-zero", list(weights))
    return {n: float(w) for n, w in zip(names, weights)}
