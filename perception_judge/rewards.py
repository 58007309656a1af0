"""Verifiable judge rewards: pure functions, and trl-compatible callables registered by name in ``REWARDS``.

Pure functions (formulas in the docstrings): :func:`ranking_reward`, :func:`pair_reward`,
:func:`verdict_reward`, :func:`format_reward`.

trl callables ``f(prompts, completions, **kwargs) -> list[float | None]`` read the ``protocol`` and
``ground_truth`` dataset columns that trl passes as keyword arguments, so one dataset can mix protocols. A
callable returns ``None`` for rows of a protocol it does not score (trl then ignores it for that row).

=====================  ===========  ========================================================================
name                   protocols    reward
=====================  ===========  ========================================================================
``batch_ranking``      batch        fraction of slot pairs ordered as in the ground-truth order string
``pair_preference``    pair         1 when the higher score goes to the labelled better response
``pointwise_verdict``  single       1 when the score is on the right side of ``tau``
``judge``              all          dispatch: batch_ranking / pair_preference / pointwise_verdict by row
``format``             all          1 for a closed think block followed by exactly the required answer tags
=====================  ===========  ========================================================================

A malformed completion never raises and never earns ranking credit; a malformed *dataset row* (unknown
protocol, bad order string) raises ``ValueError`` naming the row, because that is a data bug.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from perception_judge.core.protocol import format_ok, parse_scores
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

TIE_POLICIES = ("zero", "half")


# ----------------------------------------------------------------------------------------------------------
# Pure functions
# ----------------------------------------------------------------------------------------------------------


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
    rank_scores = [scores[SLOTS.index(slot)] for slot in order]  # best to worst by the ground truth
    if ties == "zero" and len(set(rank_scores)) != len(rank_scores):
        return 0.0
    credit = 0.0
    pairs = 0
    for better, worse in itertools.combinations(rank_scores, 2):
        pairs += 1
        if better > worse:
            credit += 1.0
        elif better == worse:
            credit += 0.5
    return credit / pairs


def pair_reward(scores: Sequence[float] | None, order: str, ties: str = "zero") -> float:
    """1 when the higher of two scores goes to the labelled better response, else 0.

    ``order`` is ``"AB"`` (Assistant 1 better) or ``"BA"``. A tie gives 0 (``ties="half"``: 1/2); a parse
    failure gives 0. This is :func:`ranking_reward` with N = 2.
    """
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
    if verdict == VERDICT_CORRECT:
        return 1.0 if score >= tau else 0.0
    return 1.0 if score < tau else 0.0


def format_reward(text: str, n: int, reasoning: str | None = None, think_open: bool = False) -> float:
    """1.0 for a closed think block followed by exactly ``n`` valid answer tags and nothing else, else 0.0."""
    return 1.0 if format_ok(text, n, reasoning=reasoning, think_open=think_open) else 0.0


def expected_n(protocol: str, ground_truth: str) -> int:
    """How many scores a row's completion must hold, from its protocol and ground truth."""
    if protocol == "single":
        return 1
    return len(ground_truth)


# ----------------------------------------------------------------------------------------------------------
# trl callables
# ----------------------------------------------------------------------------------------------------------


def completion_text(completion: Any) -> tuple[str, str | None]:
    """(final text, separately supplied reasoning or None) from a trl completion.

    trl passes ``[{"role": "assistant", "content": text}]`` for conversational datasets (possibly with a
    ``reasoning_content`` key when the tokenizer has a response schema) and plain strings otherwise.
    """
    if isinstance(completion, str):
        return completion, None
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, list) and completion:
        msg = completion[-1]
        if isinstance(msg, dict):
            content = msg.get("content")
            if isinstance(content, list):  # block content
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            reasoning = msg.get("reasoning_content") or msg.get("reasoning")
            return (content if isinstance(content, str) else ""), (reasoning if reasoning else None)
    return "", None


def verdict_score(
    text: str, reasoning: str | None, protocol: str, truth: str, ties: str, tau: float, think_open: bool
) -> float:
    """The verifiable score reward of one completion: :func:`ranking_reward` (batch rows), :func:`pair_reward`
    (pair rows) or :func:`verdict_reward` (single rows) of the scores it states."""
    parsed = parse_scores(text, expected_n(protocol, truth), reasoning=reasoning, think_open=think_open)
    if protocol == "batch":
        return ranking_reward(parsed.scores, truth, ties)
    if protocol == "pair":
        return pair_reward(parsed.scores, truth, ties)
    return verdict_reward(parsed.scores[0] if parsed.scores else None, truth, tau)


def format_score(
    text: str, reasoning: str | None, protocol: str, truth: str, ties: str, tau: float, think_open: bool
) -> float:
    """:func:`format_reward` of one completion (ties and tau play no part)."""
    return format_reward(text, expected_n(protocol, truth), reasoning, think_open)


RowScore = Callable[[str, "str | None", str, str, str, float, bool], float]


class JudgeReward:
    """A named, configurable trl reward callable: ``score`` (:func:`verdict_score` or :func:`format_score`) on
    every row whose protocol is in ``protocols``, None on the others (trl skips those).

    trl logs each reward under ``__name__`` (``rewards/<name>/mean``). ``think_open`` tells the parser that
    the rendered prompt ends inside an open think block (the trainer sets it from the chat template), so a
    completion that never writes ``</think>`` is unclosed and earns nothing. With ``log_parse_failures`` the
    reward also logs ``<name>/parse_failure_rate`` through trl's ``log_metric``.
    """

    def __init__(
        self,
        name: str,
        protocols: tuple[str, ...],
        ties: str = "zero",
        tau: float = DEFAULT_TAU,
        think_open: bool = False,
        score: RowScore = verdict_score,
        log_parse_failures: bool = False,
    ) -> None:
        if ties not in TIE_POLICIES:
            raise ValueError(f"ties must be one of {TIE_POLICIES}, got {ties!r}")
        self.__name__ = name
        self.name = name
        self.protocols = protocols
        self.ties = ties
        self.tau = float(tau)
        self.think_open = think_open
        self.score = score
        self.log_parse_failures = log_parse_failures

    def with_options(self, **options: Any) -> JudgeReward:
        """A copy with some options changed (``ties``, ``tau``, ``think_open``)."""
        unknown = set(options) - {"ties", "tau", "think_open"}
        if unknown:
            raise ValueError(f"reward {self.name!r} has no option(s) {sorted(unknown)}")
        kwargs = {"ties": self.ties, "tau": self.tau, "think_open": self.think_open, **options}
        return type(self)(
            self.name, self.protocols, score=self.score, log_parse_failures=self.log_parse_failures, **kwargs
        )

    def __repr__(self) -> str:
        return f"JudgeReward({self.name!r}, ties={self.ties!r}, tau={self.tau}, think_open={self.think_open})"

    # one row -----------------------------------------------------------------------------------------------
    def score_row(self, text: str, reasoning: str | None, protocol: str, ground_truth: str) -> float | None:
        if protocol not in self.protocols:
            return None
        return self.score(text, reasoning, protocol, ground_truth, self.ties, self.tau, self.think_open)

    # the trl contract --------------------------------------------------------------------------------------
    def __call__(
        self, prompts: list[Any] | None = None, completions: list[Any] | None = None, **kwargs: Any
    ) -> list[float | None]:
        completions = completions or []
        protocols = kwargs.get(COL_PROTOCOL)
        truths = kwargs.get(COL_GROUND_TRUTH)
        for col, values in ((COL_PROTOCOL, protocols), (COL_GROUND_TRUTH, truths)):
            if values is None:
                raise KeyError(
                    f"reward {self.name!r} needs the dataset column {col!r} (trl passes dataset columns as "
                    "keyword arguments; keep remove_unused_columns=False)"
                )
            if len(values) != len(completions):
                raise ValueError(
                    f"column {col!r} has {len(values)} values for {len(completions)} completions"
                )
        out: list[float | None] = []
        failures = 0
        scored = 0
        for i, (completion, protocol, truth) in enumerate(zip(completions, protocols, truths)):
            try:
                validate_ground_truth(protocol, truth)
            except ValueError as e:
                raise ValueError(f"row {i}: {e}") from None
            text, reasoning = completion_text(completion)
            value = self.score_row(text, reasoning, protocol, truth)
            out.append(value)
            if value is not None and self.log_parse_failures:
                scored += 1
                n = expected_n(protocol, truth)
                if not parse_scores(text, n, reasoning=reasoning, think_open=self.think_open).ok:
                    failures += 1
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and scored:
            log_metric(f"{self.name}/parse_failure_rate", failures / scored)
        return out


RewardFn = Callable[..., list[float | None]]

REWARDS: dict[str, JudgeReward] = {
    "batch_ranking": JudgeReward("batch_ranking", ("batch",), log_parse_failures=True),
    "pair_preference": JudgeReward("pair_preference", ("pair",)),
    "pointwise_verdict": JudgeReward("pointwise_verdict", ("single",)),
    "judge": JudgeReward("judge", PROTOCOLS, log_parse_failures=True),
    "format": JudgeReward("format", PROTOCOLS, score=format_score),
}


def get_reward(name: str, **options: Any) -> JudgeReward:
    """Look a reward up by name (clear error for unknown names) and apply options."""
    if name not in REWARDS:
        raise KeyError(f"unknown reward {name!r}; registered: {', '.join(sorted(REWARDS))}")
    reward = REWARDS[name]
    return reward.with_options(**options) if options else reward


__all__ = [
    "REWARDS",
    "TIE_POLICIES",
    "JudgeReward",
    "completion_text",
    "expected_n",
    "format_reward",
    "format_score",
    "get_reward",
    "pair_reward",
    "ranking_reward",
    "verdict_reward",
    "verdict_score",
]
