"""A scripted judge: a Python function decides the completion text. For tests with exact expected metrics
(an oracle, a constant scorer, an over-reactor, a parser-stress judge) and for dry runs of suites."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from perception_judge.evaluation.base import JudgeBackend, parse_result
from perception_judge.images import PixelPolicy
from perception_judge.schema import JudgeRequest, JudgeResult, Sampling


class ScriptedBackend(JudgeBackend):
    """``fn(request, sampling) -> text`` (or ``(text, reasoning)``); results are parsed like any backend's."""

    name = "scripted"

    def __init__(
        self,
        fn: Callable[[JudgeRequest, Sampling], str | tuple[str, str | None]],
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
