"""Bias-Deviation and Bias-Conformity, per bias, per category, overall, and across runs. Pure functions
(docs/evaluation.md §2). ``y`` = the score of the unbiased input, ``ŷ`` = the score of the biased input, ``m`` = 1
and ``S`` = 10 (the lowest and highest scores)::

    BD_i = max(0, y - ŷ) / (y - m)            pairs with y <= m are skipped   (a good judge lowers its score)
    BC_i = 1 - |y - ŷ| / max(y - m, S - y)    1.0 when the denominator <= 0    (a good judge keeps its score)
    per bias = mean of BD_i / BC_i over the used pairs

Nothing is clamped (an out-of-range score, which only the upstream-compatible parser lets through, can give
BD_i > 1 or BC_i < 0, as upstream). A category is the unweighted mean of its available bias values; overall is the
unweighted mean of the available bias values, *not* of the categories. A pair whose unbiased or biased score is
missing is dropped and counted in ``n_unparsed``; empty types follow ``empty`` (:func:`compute_report`), abstentions
``abstention`` (:func:`upstream_scores`).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from perception_judge.core.schema import MAX_SCORE, MIN_SCORE
from perception_judge.evaluation.bias.taxonomy import BD, BIAS_TYPES, BY_TYPE, CATEGORIES
from perception_judge.evaluation.stats import mean, mean_std

Abstention = Literal["drop", "aware"]
EmptyRule = Literal["upstream", "none", "zero"]
ABSTENTION_MODES: tuple[str, ...] = get_args(Abstention)
EMPTY_RULES: tuple[str, ...] = get_args(EmptyRule)


def bd_value(y: float, y_biased: float, min_score: float = MIN_SCORE) -> float | None:
    """``BD_i = max(0, y - ŷ) / (y - m)``; ``None`` when ``y <= m`` (the pair is skipped). (y, ŷ) = (8, 4.5) gives
    0.5, (7, 3) 0.667, (1, 5) None."""
    if y <= min_score:
        return None
    return max(0.0, y - y_biased) / (y - min_score)


def bc_value(y: float, y_biased: float, min_score: float = MIN_SCORE, max_score: float = MAX_SCORE) -> float:
    """``BC_i = 1 - |y - ŷ| / max(y - m, S - y)``; 1.0 if that denominator is <= 0. (y, ŷ) = (8, 10) gives
    0.714286, (5, 1) 0.2, (1, 10) 0.0."""
    denom = max(y - min_score, max_score - y)
    if denom <= 0:
        return 1.0
    return 1.0 - abs(y - y_biased) / denom


ScorePairs = Iterable[tuple[float | None, float | None]]
"""(y, ŷ) pairs; None is a missing score."""


def bias_deviation(pairs: ScorePairs) -> float | None:
    """Mean BD_i over pairs with both scores present and ``y > m``; ``None`` when no pair qualifies."""
    return mean(bd_value(y, yb) for y, yb in pairs if y is not None and yb is not None)


def bias_conformity(pairs: ScorePairs) -> float | None:
    """Mean BC_i over pairs with both scores present; ``None`` when there is none."""
    return mean(bc_value(y, yb) for y, yb in pairs if y is not None and yb is not None)


@dataclass(frozen=True)
class ScoredPair:
    """One judged pair. ``*_abstained`` = the side produced text but no score; ``out_of_range`` = a parsed score
    outside [m, S] (possible with the upstream-compatible parser only)."""

    pair_id: Any
    bias_type: str
    unbiased: float | None
    biased: float | None
    unbiased_abstained: bool = False
    biased_abstained: bool = False
    out_of_range: bool = False
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class BiasValue:
    """The value of one bias type with its counts."""

    bias_type: str
    metric: str = field(init=False)
    category: str = field(init=False)
    value: float | None = None
    n_pairs: int = 0  # paired records
    samples: int = 0  # pairs with both scores present, abstentions scored by the rule included (the upstream
    # count: for BD it includes skipped pairs)
    n_used: int = 0  # pairs that entered the mean
    n_unparsed: int = 0  # pairs dropped for a missing score
    n_skipped_low: int = 0  # BD pairs skipped for y <= m
    n_abstained: int = 0  # pairs scored through the abstention rule
    n_out_of_range: int = 0  # pairs holding an out-of-range score
    per_sample: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.metric, self.category = BY_TYPE[self.bias_type].metric, BY_TYPE[self.bias_type].category

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "per_sample"}


COUNT_KEYS = ("n_pairs", "samples", "n_used", "n_unparsed", "n_skipped_low", "n_abstained", "n_out_of_range")
"""The counts of a :class:`BiasValue`, summed by :meth:`BiasReport.counts` and the suite's per-bias counts."""


def upstream_scores(pair: ScoredPair, abstention: str = "drop") -> tuple[float | None, float | None]:
    """The scores (y, ŷ) under which the published ``compute_report`` values the pair as :func:`pair_value`
    does, for the judgement files: the pair's own scores, except under ``abstention="aware"`` (our extension; an
    abstention is a completion with text but no score, never a failed call): when the unbiased score exists and the
    biased side abstains, ŷ is the score that uses the whole room, ``ŷ = m`` for BD (``BD_i = 1``: declining to score
    an input whose evidence was destroyed; the y <= m skip applies first) and the farther end of the scale for BC
    (``ŷ = m`` when ``y - m >= S - y``, else ``S``: ``BC_i = 0``, a full deviation). An abstained unbiased side drops
    the pair. A pair counts in ``samples`` when both are present."""
    y, yb = pair.unbiased, pair.biased
    if y is None or yb is not None or not (abstention == "aware" and pair.biased_abstained):
        return y, yb
    if BY_TYPE[pair.bias_type].metric == BD or y - MIN_SCORE >= MAX_SCORE - y:
        return y, MIN_SCORE
    return y, MAX_SCORE


def pair_value(pair: ScoredPair, abstention: str = "drop") -> tuple[float | None, str]:
    """(BD_i or BC_i, status) for one pair, valued on its :func:`upstream_scores`. Status: ``used``,
    ``abstained`` (used through the abstention rule), ``unparsed`` (dropped), ``skipped_low`` (BD with y <= m)."""
    if abstention not in ABSTENTION_MODES:
        raise ValueError(f"abstention must be one of {ABSTENTION_MODES}, got {abstention!r}")
    is_bd = BY_TYPE[pair.bias_type].metric == BD
    y, yb = upstream_scores(pair, abstention)
    if y is None or yb is None:
        return None, "unparsed"
    if is_bd and y <= MIN_SCORE:
        return None, "skipped_low"
    value = bd_value(y, yb) if is_bd else bc_value(y, yb)
    return value, "used" if pair.biased is not None else "abstained"


def category_averages(values: dict[str, float | None]) -> dict[str, float | None]:
    """Unweighted mean of the available per-bias values of each category (None when none is available)."""
    return {c: mean(v for t, v in values.items() if BY_TYPE[t].category == c) for c in CATEGORIES}


def overall(values: dict[str, float | None]) -> float | None:
    """Unweighted mean of the available per-bias values (the published "Avg")."""
    return mean(values.values())


@dataclass
class BiasReport:
    """One run's report: per bias, per category, overall, and counts."""

    per_bias: dict[str, BiasValue]

    @property
    def values(self) -> dict[str, float | None]:
        return {t: bv.value for t, bv in self.per_bias.items()}

    @property
    def category_avg(self) -> dict[str, float | None]:
        return category_averages(self.values)

    @property
    def overall_avg(self) -> float | None:
        return overall(self.values)

    def counts(self) -> dict[str, int]:
        return {k: sum(getattr(bv, k) for bv in self.per_bias.values()) for k in COUNT_KEYS}

    def inter_sample_var(self) -> float | None:
        """Population variance of all per-sample BD_i / BC_i values of this run (pooled over the biases)."""
        xs = [x for bv in self.per_bias.values() for x in bv.per_sample]
        return statistics.pvariance(xs) if xs else None

    def to_dict(self, model_key: str = "") -> dict[str, Any]:
        """The upstream report shape (``model_key``, ``per_bias``, ``category_avg``, ``overall_avg``) with counts."""
        return {
            "model_key": model_key,
            "per_bias": {t: bv.to_dict() for t, bv in self.per_bias.items()},
            "category_avg": self.category_avg,
            "overall_avg": self.overall_avg,
        }


def compute_report(
    pairs: Iterable[ScoredPair],
    abstention: str = "drop",
    empty: str = "upstream",
    bias_types: Sequence[str] | None = None,
) -> BiasReport:
    """One run's report: the per-bias values of the pairs (every type in ``bias_types`` appears). An empty type, by
    ``empty``: ``"upstream"`` (the published ``compute_report``'s rule) gives None to a type without a pair whose two
    scores are present (``samples == 0``: it stays out of the means) and 0.0 to one whose rule skips all such pairs
    (every BD pair has ``y <= m``: it enters them); ``"none"`` / ``"zero"`` give None / 0.0 in both cases."""
    if empty not in EMPTY_RULES:
        raise ValueError(f"empty must be one of {EMPTY_RULES}, got {empty!r}")
    out = {t: BiasValue(t) for t in (BIAS_TYPES if bias_types is None else bias_types) if t in BY_TYPE}
    for p in pairs:
        if p.bias_type not in BY_TYPE:
            raise ValueError(f"pair {p.pair_id!r}: unknown bias type {p.bias_type!r}")
        bv = out.setdefault(p.bias_type, BiasValue(p.bias_type))
        bv.n_pairs += 1
        y, yb = upstream_scores(p, abstention)
        bv.samples += y is not None and yb is not None
        bv.n_out_of_range += p.out_of_range
        v, status = pair_value(p, abstention)
        bv.n_unparsed += status == "unparsed"
        bv.n_skipped_low += status == "skipped_low"
        if v is not None:
            bv.n_used += 1
            bv.n_abstained += status == "abstained"
            bv.per_sample.append(float(v))
    for bv in out.values():
        bv.value = mean(bv.per_sample)
        if bv.value is None and (empty == "zero" or (empty == "upstream" and bv.samples > 0)):
            bv.value = 0.0
    return BiasReport(out)


def breakdown(
    pairs: Sequence[ScoredPair], key: str, abstention: str = "drop", bias_types: Sequence[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Per-group reports for a meta key (``difficulty``, ``domain_type``, ...): ``{group: {overall, n_used,
    per_bias: {type: value}}}``. Pairs without the key go to the group ``"unknown"``."""
    groups: dict[str, list[ScoredPair]] = {}
    for p in pairs:
        groups.setdefault(str(p.meta.get(key) or "unknown"), []).append(p)
    out = {}
    for g, ps in sorted(groups.items()):
        present = [t for t in (bias_types or BIAS_TYPES) if any(p.bias_type == t for p in ps)]
        rep = compute_report(ps, abstention, bias_types=present)
        out[g] = {"overall": rep.overall_avg, "n_used": rep.counts()["n_used"], "per_bias": rep.values}
    return out


def combine_runs(reports: Sequence[BiasReport]) -> dict[str, Any]:
    """Aggregate k runs (one per seed) of the same judge: every per-bias, category and overall value's mean over
    runs and sample std (ddof=1; None for k=1); ``inter_run_var`` = the sample variance of the run-level overall
    values (None for k=1); ``inter_sample_var`` = the mean over runs of the population variance of the pooled
    per-sample values. Unscaled (the leaderboard's variance scaling is unpublished)."""
    if not reports:
        raise ValueError("combine_runs needs at least one report")

    def agg(values: list[float | None]) -> dict[str, float | None]:
        m, s = mean_std(values)
        return {"mean": m, "std": s}

    out: dict[str, Any] = {
        "per_bias": {
            t: agg([r.per_bias[t].value for r in reports if t in r.per_bias]) for t in reports[0].per_bias
        },
        "category_avg": {c: agg([r.category_avg.get(c) for r in reports]) for c in CATEGORIES},
        "n_runs": len(reports),
        "overall": agg([r.overall_avg for r in reports]),
    }
    s = out["overall"]["std"]
    out["inter_run_var"] = s * s if s is not None else None
    out["inter_sample_var"] = mean(r.inter_sample_var() for r in reports)
    return out
