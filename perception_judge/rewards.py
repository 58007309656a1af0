"""Verifiable judge rewards: pure functions (formula in each docstring) and the trl reward callables of
``REWARDS`` (docs/training.md "Rewards"). A callable reads the ``protocol`` and ``ground_truth`` columns trl passes as
keyword arguments and returns None for rows of a protocol it does not score; a malformed completion never raises
and earns nothing, a malformed dataset row raises ``ValueError`` naming the row (a data bug).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any, Literal, get_args

from perception_judge.core.protocol import ParseResult, expected_scores, format_ok, parse_scores
from perception_judge.core.schema import (
    COL_GROUND_TRUTH,
    COL_PROTOCOL,
    DEFAULT_TAU,
    PROTOCOLS,
    SLOTS,
    VERDICT_CORRECT,
    VERDICTS,
    validate_ground_truth,
    validate_order,
)

TiePolicy = Literal["zero", "half"]
TIE_POLICIES: tuple[str, ...] = get_args(TiePolicy)


def ranking_reward(scores: Sequence[float] | None, order: str, ties: str = "zero") -> float:
    """Fraction of response pairs that the scores order the same way as the ground-truth order string.

    ``scores[i]`` is the score of slot ``SLOTS[i]``; ``order`` lists slots best to worst (``"BCA"``: B best).

        R = (1 / C(N, 2)) * sum over pairs (u above v in order) of  c(s_u, s_v)
        c = 1 if s_u > s_v, 0 if s_u < s_v, and for s_u == s_v:
            ties="zero": the whole reward is 0 as soon as any two scores tie (the published behaviour)
            ties="half": the tied pair counts 1/2

    Equivalently R = 1 - KendallTauDistance / C(N, 2) when there are no ties. For N = 3 this reproduces the
    published table: 1, 2/3, 1/3, 0. ``scores=None`` (a parse failure) gives 0.
    """
    if ties not in TIE_POLICIES:
        raise ValueError(f"ties must be one of {TIE_POLICIES}, got {ties!r}")
    validate_order(order)
    if scores is None:
        return 0.0
    if len(scores) != len(order):
        raise ValueError(f"{len(scores)} scores for an order string of {len(order)} slots ({order!r})")
    ranked = [scores[SLOTS.index(slot)] for slot in order]  # best to worst by the ground truth
    if ties == "zero" and len(set(ranked)) != len(ranked):
        return 0.0
    pairs = list(itertools.combinations(ranked, 2))
    concordant = sum(1.0 if better > worse else 0.5 if better == worse else 0.0 for better, worse in pairs)
    return concordant / len(pairs)


def pair_reward(scores: Sequence[float] | None, order: str, ties: str = "zero") -> float:
    """1 when the higher of two scores goes to the labelled better response, else 0. ``order`` is ``"AB"``
    (Assistant 1 better) or ``"BA"``. A tie gives 0 (``ties="half"``: 1/2); a parse failure gives 0. This is
    :func:`ranking_reward` with N = 2."""
    validate_order(order, 2)
    return ranking_reward(scores, order, ties)


def verdict_reward(score: float | None, verdict: str, tau: float = DEFAULT_TAU) -> float:
    """Pointwise verdict: 1 when the score falls on the right side of the threshold ``tau``.

        R = 1[s >= tau]  if verdict == "correct"    (the response is r_c)
        R = 1[s <  tau]  if verdict == "incorrect"  (a perturbed response)

    A parse failure (``score=None``) gives 0.
    """
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
    if score is None:
        return 0.0
    return float(score >= tau if verdict == VERDICT_CORRECT else score < tau)


def format_reward(text: str, n: int, reasoning: str | None = None, think_open: bool = False) -> float:
    """1.0 for a closed think block followed by exactly ``n`` valid answer tags and nothing else, else 0.0."""
    return 1.0 if format_ok(text, n, reasoning=reasoning, think_open=think_open) else 0.0


def completion_text(completion: Any) -> tuple[str, str | None]:
    """(final text, separately supplied reasoning or None) of a trl completion: a plain string, or the
    conversational ``[{"role": "assistant", "content": text}]`` (block content allowed, with a
    ``reasoning_content`` key when the tokenizer has a response schema)."""
    if isinstance(completion, str):
        return completion, None
    if isinstance(completion, dict):
        completion = [completion]
    msg = completion[-1] if isinstance(completion, list) and completion else None
    if not isinstance(msg, dict):
        return "", None
    content = msg.get("content")
    if isinstance(content, list):  # block content
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    reasoning = msg.get("reasoning_content") or msg.get("reasoning") or None
    return (content if isinstance(content, str) else ""), reasoning


@dataclasses.dataclass(eq=False)
class JudgeReward:
    """A named, configurable trl reward callable: :meth:`score` of every row whose protocol is in
    ``protocols``, None for the others (trl skips those); trl logs it under ``__name__``
    (``rewards/<name>/mean``). ``think_open``: the rendered prompt ends inside an open think block (read from
    the chat template), so a completion that never writes ``</think>`` is unclosed and earns nothing.
    ``log_parse_failures``: also log ``<name>/parse_failure_rate`` through trl's ``log_metric``."""

    name: str
    protocols: tuple[str, ...]
    ties: str = "zero"
    tau: float = DEFAULT_TAU
    think_open: bool = False
    log_parse_failures: bool = False

    def __post_init__(self) -> None:
        if self.ties not in TIE_POLICIES:
            raise ValueError(f"ties must be one of {TIE_POLICIES}, got {self.ties!r}")
        self.tau = float(self.tau)
        self.__name__ = self.name

    def with_options(self, **options: Any) -> JudgeReward:
        """A copy with some options changed (``ties``, ``tau``, ``think_open``)."""
        if unknown := set(options) - {"ties", "tau", "think_open"}:
            raise ValueError(f"reward {self.name!r} has no option(s) {sorted(unknown)}")
        return dataclasses.replace(self, **options)

    def parse(self, text: str, reasoning: str | None, protocol: str, truth: str) -> ParseResult:
        n = expected_scores(protocol, len(truth))
        return parse_scores(text, n, reasoning=reasoning, think_open=self.think_open)

    def score(
        self, text: str, reasoning: str | None, protocol: str, truth: str, parsed: ParseResult | None = None
    ) -> float:
        """:func:`ranking_reward` (batch rows), :func:`pair_reward` (pair rows) or :func:`verdict_reward` (single
        rows) of the scores the completion states (``parsed``: its :meth:`parse`, when already at hand)."""
        scores = (parsed or self.parse(text, reasoning, protocol, truth)).scores
        if protocol == "batch":
            return ranking_reward(scores, truth, self.ties)
        if protocol == "pair":
            return pair_reward(scores, truth, self.ties)
        return verdict_reward(scores[0] if scores else None, truth, self.tau)

    def __call__(
        self, prompts: list[Any] | None = None, completions: list[Any] | None = None, **kwargs: Any
    ) -> list[float | None]:
        for col in (COL_PROTOCOL, COL_GROUND_TRUTH):
            if kwargs.get(col) is None:
                raise KeyError(
                    f"reward {self.name!r} needs the dataset column {col!r} (trl passes dataset columns as "
                    "keyword arguments; keep remove_unused_columns=False)"
                )
        out: list[float | None] = []
        failures: list[bool] = []
        rows = zip(completions or [], kwargs[COL_PROTOCOL], kwargs[COL_GROUND_TRUTH], strict=True)
        for i, (completion, protocol, truth) in enumerate(rows):
            try:
                validate_ground_truth(protocol, truth)
            except ValueError as e:
                raise ValueError(f"row {i}: {e}") from None
            if protocol not in self.protocols:
                out.append(None)
                continue
            text, reasoning = completion_text(completion)
            parsed = self.parse(text, reasoning, protocol, truth) if self.log_parse_failures else None
            out.append(self.score(text, reasoning, protocol, truth, parsed))  # each completion parsed once
            if parsed is not None:
                failures.append(not parsed.ok)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and failures:
            log_metric(f"{self.name}/parse_failure_rate", sum(failures) / len(failures))
        return out


class FormatReward(JudgeReward):
    """The ``format`` reward: :func:`format_reward` of every row (ties and tau play no part)."""

    def score(
        self, text: str, reasoning: str | None, protocol: str, truth: str, parsed: ParseResult | None = None
    ) -> float:
        return format_reward(text, expected_scores(protocol, len(truth)), reasoning, self.think_open)


REWARDS: dict[str, JudgeReward] = {
    "batch_ranking": JudgeReward("batch_ranking", ("batch",), log_parse_failures=True),
    "pair_preference": JudgeReward("pair_preference", ("pair",)),
    "pointwise_verdict": JudgeReward("pointwise_verdict", ("single",)),
    "judge": JudgeReward("judge", PROTOCOLS, log_parse_failures=True),
    "format": FormatReward("format", PROTOCOLS),
}


def get_reward(name: str, **options: Any) -> JudgeReward:
    """Look a reward up by name (clear error for unknown names) and apply options."""
    if name not in REWARDS:
        raise KeyError(f"unknown reward {name!r}; registered: {', '.join(sorted(REWARDS))}")
    return REWARDS[name].with_options(**options) if options else REWARDS[name]
