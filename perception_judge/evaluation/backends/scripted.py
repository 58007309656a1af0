"""A scripted judge: a Python function writes the completion. For tests with exact expected metrics and dry runs:
``constant`` (every score 8; ``constant:5`` for another value), ``random`` (scores from a hash of the seed and the
request id), ``garbage`` (never a parsable score), or ``package.module:function`` (``fn(request, sampling) -> text``).
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from perception_judge.core.images import PixelPolicy
from perception_judge.core.options import Options
from perception_judge.core.schema import JudgeRequest, JudgeResult, Sampling
from perception_judge.evaluation.base import JudgeBackend, parse_result

ScriptFn = Callable[[JudgeRequest, Sampling], "str | tuple[str, str | None]"]


class ScriptedOptions(Options):
    """``fn``: a built-in judge's name, ``module:function``, or (in Python) the function itself."""

    fn: Any = "constant"
    label: str | None = None


class ScriptedBackend(JudgeBackend):
    """``fn(request, sampling) -> text`` (or ``(text, reasoning)``) or its name (:func:`scripted_fn`)."""

    name = "scripted"
    Options = ScriptedOptions
    target = "fn"

    @classmethod
    def judge_keys(cls, spec: Mapping[str, Any], name: str, given: set[str]) -> dict[str, Any]:
        # no adapter: one function stands in for any judge
        return {} if "fn" in given else {"fn": spec.get("fn")}

    @classmethod
    def check_judge(cls, spec: Mapping[str, Any], options: Options) -> None:
        scripted_fn(options.fn if "fn" in options.model_fields_set else spec.get("fn") or options.fn)

    def __init__(
        self,
        fn: ScriptFn | str = "constant",
        pixel_policy: PixelPolicy | dict | None = None,
        label: str | None = None,
    ) -> None:
        super().__init__(pixel_policy)
        self.fn = scripted_fn(fn)
        self.label = label or (f"scripted-{fn}" if isinstance(fn, str) else "scripted")
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


def random_judge(request: JudgeRequest, sampling: Sampling) -> str:
    """Scores 1-10 drawn from a hash of the seed, the request id and the score's place."""
    digests = (
        hashlib.sha256(f"{sampling.seed}:{request.request_id}:{k}".encode()).digest()
        for k in range(request.n_scores)
    )
    return format_scores(request, [1 + d[0] % 10 for d in digests])


def garbage_judge(request: JudgeRequest, sampling: Sampling) -> str:
    return "I would rather not say."


def scripted_fn(name: str | ScriptFn) -> ScriptFn:
    """A built-in judge by name (``constant``, ``constant:5``, ``random``, ``garbage``), ``module:function`` or the
    function itself."""
    if callable(name):
        return name
    head, _, arg = name.partition(":")
    if head == "constant":
        value = int(arg) if arg else 8
        return lambda request, sampling: format_scores(request, [value] * request.n_scores)
    if not arg and head in ("random", "garbage"):
        return random_judge if head == "random" else garbage_judge
    if not arg:
        raise ValueError(
            f"unknown scripted judge {name!r}: use constant[:N], random, garbage or package.module:function"
        )
    fn = getattr(importlib.import_module(head), arg, None)
    if not callable(fn):
        raise ValueError(f"{head}:{arg} is not a callable scripted judge")
    return fn
