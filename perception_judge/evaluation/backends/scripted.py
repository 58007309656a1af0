"""A scripted judge: a Python function decides the completion text. For tests with exact expected metrics
(an oracle, a constant scorer, an over-reactor, a parser-stress judge) and for dry runs of suites.

Built-in judges for dry runs (``--backend scripted:NAME``): ``constant`` (every score 8; ``constant:5`` for
another value), ``random`` (scores drawn from a hash of the seed and the request id), ``garbage`` (never a
parsable score). ``scripted:package.module:function`` imports any ``fn(request, sampling) -> text``.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable, Sequence
from typing import Any

from perception_judge.core.images import PixelPolicy
from perception_judge.core.schema import JudgeRequest, JudgeResult, Sampling
from perception_judge.evaluation.base import JudgeBackend, parse_result

ScriptFn = Callable[[JudgeRequest, Sampling], "str | tuple[str, str | None]"]


class ScriptedBackend(JudgeBackend):
    """``fn(request, sampling) -> text`` (or ``(text, reasoning)``); results are parsed like any backend's."""

    name = "scripted"

    def __init__(
        self,
        fn: ScriptFn,
        pixel_policy: PixelPolicy | None = None,
        label: str = "scripted",
    ) -> None:
        super().__init__(pixel_policy)
        self.fn = fn
        self.label = label
        self.calls = 0

    def judge(self, requests: Sequence[JudgeRequest], sampling: Sampling) -> list[JudgeResult]:
        out = []
        for req in requests:
            self.calls += 1
            produced = self.fn(req, sampling)
            text, reasoning = produced if isinstance(produced, tuple) else (produced, None)
            out.append(parse_result(req, text, reasoning))
        return out

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "label": self.label}


def answer_tags(*scores: int, reasoning: str = "scripted") -> str:
    """A well-formed protocol completion with the given scores."""
    return f"<think>{reasoning}</think>" + "".join(f"<answer>{s}</answer>" for s in scores)


def format_scores(request: JudgeRequest, scores: Sequence[int], reasoning: str = "scripted") -> str:
    """A well-formed completion for the request's parser: ``<answer>`` tags, or the ``### Score:`` layout."""
    if request.parser in ("mmjb", "mmjb_strict"):
        return f"<think>{reasoning}</think>### Feedback: {reasoning} ### Score: {int(scores[0])}"
    return answer_tags(*scores, reasoning=reasoning)


def _hash_score(seed: int, request_id: str, k: int) -> int:
    digest = hashlib.sha256(f"{seed}:{request_id}:{k}".encode()).digest()
    return 1 + digest[0] % 10


def constant_judge(value: int = 8) -> ScriptFn:
    def fn(request: JudgeRequest, sampling: Sampling) -> str:
        return format_scores(request, [value] * request.n_scores)

    return fn


def random_judge(request: JudgeRequest, sampling: Sampling) -> str:
    return format_scores(
        request, [_hash_score(sampling.seed, request.request_id, k) for k in range(request.n_scores)]
    )


def garbage_judge(request: JudgeRequest, sampling: Sampling) -> str:
    return "I would rather not say."


def scripted_fn(name: str) -> ScriptFn:
    """A built-in judge by name (``constant``, ``constant:5``, ``random``, ``garbage``) or ``module:function``."""
    head, _, arg = name.partition(":")
    if head == "constant":
        return constant_judge(int(arg) if arg else 8)
    if head == "random" and not arg:
        return random_judge
    if head == "garbage" and not arg:
        return garbage_judge
    if arg:
        module = importlib.import_module(head)
        fn = getattr(module, arg, None)
        if not callable(fn):
            raise ValueError(f"{head}:{arg} is not a callable scripted judge")
        return fn
    raise ValueError(
        f"unknown scripted judge {name!r}: use constant[:N], random, garbage or package.module:function"
    )


__all__ = [
    "ScriptedBackend",
    "answer_tags",
    "constant_judge",
    "format_scores",
    "garbage_judge",
    "random_judge",
    "scripted_fn",
]
