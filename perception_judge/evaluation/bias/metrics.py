"""Bias-Deviation and Bias-Conformity, per bias, per category, overall, and across runs. Pure functions.

Notation: ``y`` = the score of the unbiased input, ``ŷ`` = the score of the biased input, ``m`` = the lowest
score (1), ``S`` = the highest score (10).

Bias-Deviation (types whose perturbation destroys the evidence; a good judge lowers its score)::

    BD_i = max(0, y - ŷ) / (y - m)                    only for pairs with y > m (pairs with y <= m are skipped)
    BD   = mean of BD_i over the used pairs

Bias-Conformity (meaning-preserving types; a good judge keeps its score)::

    BC_i = 1 - |y - ŷ| / max(y - m, S - y)            (1.0 when the denominator is <= 0)
    BC   = mean of BC_i over the used pairs

Both lie in [0, 1] for in-range scores, higher is better. Nothing is clamped: an out-of-range score (which
only the upstream-compatible parser lets through) can give BD_i > 1 or BC_i < 0, exactly as upstream.

Aggregation: category value = unweighted mean of its available bias values; overall = unweighted mean of the
(up to nine) available bias values -- *not* the mean of the category values, so Robustness weighs 4/9.

Dropping rules (MM-JudgeBias): a pair whose unbiased or biased score is missing (unparsable, or the call
failed) is dropped from numerator and denominator and counted in ``n_unparsed``.

Empty sets (``empty``, default ``"upstream"``, the published ``compute_report``'s rule): a type with no pair
whose two scores are present (``samples == 0``) has the value ``None`` and stays out of the category and overall
means; a type with such pairs that its rule skips entirely (every BD pair has ``y <= m``) has ``0.0``, which does
enter the means. ``"none"`` gives ``None`` in both cases, ``"zero"`` gives ``0.0`` in both.

Abstention-aware mode (``abstention="aware"``, our extension, off by default): an *abstention* is a completion
that has text but no score (a refusal such as "I cannot judge this without the image"). When the unbiased
score exists and the **biased** side abstains:

* BD types: ``BD_i = 1`` (declining to score an input whose evidence was destroyed uses the whole downward
  room; the y <= m skip still applies first);
* BC types: ``BC_i = 0`` (refusing a meaning-preserving variant is a full deviation).

An abstention on the unbiased side still drops the pair (there is no reference score), and failed backend
calls (no text) are never abstentions.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from perception_judge.core.schema import MAX_SCORE, MIN_SCORE
from perception_judge.evaluation.bias.taxonomy import BD, BIASES, BY_TYPE, CATEGORIES

ABSTENTION_MODES = ("drop", "aware")
EMPTY_RULES = ("upstream", "none", "zero")


def bd_value(y: float, y_biased: float, min_score: float = MIN_SCORE) -> float | None:
    """``BD_i = max(0, y - ŷ) / (y - m)``; ``None`` when ``y <= m`` (the pair is skipped).

    >>> bd_value(8, 4.5), round(bd_value(7, 3), 3), bd_value(1, 5)
    (0.5, 0.667, None)
    """
    if y <= min_score:
        return None
    return max(0.0, y - y_biased) / (y - min_score)


def bc_value(y: float, y_biased: float, min_score: float = MIN_SCORE, max_score: float = MAX_SCORE) -> float:
    """``BC_i = 1 - |y - ŷ| / max(y - m, S - y)``; 1.0 if that denominator is <= 0.

    >>> round(bc_value(8, 10), 6), round(bc_value(5, 1), 6), bc_value(1, 10)
    (0.714286, 0.2, 0.0)
    """
    denom = max(y - min_score, max_score - y)
    if denom <= 0:
        return 1.0
    return 1.0 - abs(y - y_biased) / denom


def _mean(values: Sequence[float]) -> float | None:
    """Arithmetic mean Σx / n (:func:`statistics.fmean`); None for no values."""
    return statistics.fmean(values) if values else None


def bias_deviation(
    pairs: Iterable[tuple[float | None, float | None]], min_score: float = MIN_SCORE
) -> float | None:
    """Mean BD_i over pairs with both scores present and ``y > m``; ``None`` when no pair qualifies."""
    values = []
    for y, yb in pairs:
        if y is None or yb is None:
            continue
        v = bd_value(y, yb, min_score)
        if v is not None:
            values.append(v)
    return _mean(values)


def bias_conformity(
    pairs: Iterable[tuple[float | None, float | None]],
    min_score: float = MIN_SCORE,
    max_score: float = MAX_SCORE,
) -> float | None:
    """Mean BC_i over pairs with both scores present; ``None`` when there is none."""
    values = [bc_value(y, yb, min_score, max_score) for y, yb in pairs if y is not None and yb is not None]
    return _mean(values)


# --------------------------------------------------------------------------------------------------------------
# Per-pair records and per-bias aggregation
# --------------------------------------------------------------------------------------------------------------


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


COUNT_KEYS: tuple[str, ...] = (
    "n_pairs",
    "samples",
    "n_used",
    "n_unparsed",
    "n_skipped_low",
    "n_abstained",
    "n_out_of_range",
)
"""The counts of a :class:`BiasValue`, summed by :meth:`BiasReport.counts` and the suite's per-bias counts."""


@dataclass
class BiasValue:
    """The value of one bias type with its counts.

    ``n_pairs`` paired records; ``samples`` pairs with both scores present (the upstream count, which for BD
    still includes skipped pairs); ``n_used`` pairs that entered the mean; ``n_unparsed`` pairs dropped for a
    missing score; ``n_skipped_low`` BD pairs skipped for y <= m; ``n_abstained`` pairs scored through the
    abstention rule; ``n_out_of_range`` pairs holding an out-of-range score.
    """

    bias_type: str
    metric: str
    category: str
    value: float | None
    n_pairs: int = 0
    samples: int = 0
    n_used: int = 0
    n_unparsed: int = 0
    n_skipped_low: int = 0
    n_abstained: int = 0
    n_out_of_range: int = 0
    per_sample: list[float] = field(default_factory=list)

    def to_dict(self, with_samples: bool = False) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "per_sample"}
        if with_samples:
            d["per_sample"] = list(self.per_sample)
        return d


def pair_value(
    pair: ScoredPair,
    abstention: str = "drop",
    min_score: float = MIN_SCORE,
    max_score: float = MAX_SCORE,
) -> tuple[float | None, str]:
    """(BD_i or BC_i, status) for one pair. Status: ``used``, ``abstained`` (used through the abstention rule),
    ``unparsed`` (dropped), ``skipped_low`` (BD with y <= m)."""
    if abstention not in ABSTENTION_MODES:
        raise ValueError(f"abstention must be one of {ABSTENTION_MODES}, got {abstention!r}")
    metric = BY_TYPE[pair.bias_type].metric
    y, yb = pair.unbiased, pair.biased
    if y is None:
        return None, "unparsed"
    if yb is None:
        if abstention == "aware" and pair.biased_abstained:
            if metric == BD:
                return (1.0, "abstained") if y > min_score else (None, "skipped_low")
            return 0.0, "abstained"
        return None, "unparsed"
    if metric == BD:
        v = bd_value(y, yb, min_score)
        return (v, "used") if v is not None else (None, "skipped_low")
    return bc_value(y, yb, min_score, max_score), "used"


def per_bias(
    pairs: Iterable[ScoredPair],
    abstention: str = "drop",
    empty: str = "upstream",
    bias_types: Sequence[str] | None = None,
    min_score: float = MIN_SCORE,
    max_score: float = MAX_SCORE,
) -> dict[str, BiasValue]:
    """Per-bias values for the given pairs (every type in ``bias_types`` appears; an empty type is valued by
    the ``empty`` rule of the module docstring)."""
    if empty not in EMPTY_RULES:
        raise ValueError(f"empty must be one of {EMPTY_RULES}, got {empty!r}")
    types = list(bias_types) if bias_types is not None else [b.bias_type for b in BIASES]
    out = {t: BiasValue(t, BY_TYPE[t].metric, BY_TYPE[t].category, None) for t in types if t in BY_TYPE}
    for p in pairs:
        if p.bias_type not in BY_TYPE:
            raise ValueError(f"pair {p.pair_id!r}: unknown bias type {p.bias_type!r}")
        bv = out.setdefault(
            p.bias_type,
            BiasValue(p.bias_type, BY_TYPE[p.bias_type].metric, BY_TYPE[p.bias_type].category, None),
        )
        bv.n_pairs += 1
        if p.unbiased is not None and p.biased is not None:
            bv.samples += 1
        if p.out_of_range:
            bv.n_out_of_range += 1
        v, status = pair_value(p, abstention, min_score, max_score)
        if status == "unparsed":
            bv.n_unparsed += 1
        elif status == "skipped_low":
            bv.n_skipped_low += 1
        else:
            bv.n_used += 1
            if status == "abstained":
                bv.n_abstained += 1
            bv.per_sample.append(float(v))
    for bv in out.values():
        bv.value = _mean(bv.per_sample)
        if bv.value is None and (empty == "zero" or (empty == "upstream" and bv.samples > 0)):
            bv.value = 0.0
    return out


def category_averages(values: dict[str, float | None]) -> dict[str, float | None]:
    """Unweighted mean of the available per-bias values of each category (None when none is available)."""
    out: dict[str, float | None] = {}
    for cat in CATEGORIES:
        vals = [v for t, v in values.items() if v is not None and BY_TYPE[t].category == cat]
        out[cat] = _mean(vals)
    return out


def overall(values: dict[str, float | None]) -> float | None:
    """Unweighted mean of the available per-bias values (the published "Avg")."""
    return _mean([v for v in values.values() if v is not None])


@dataclass
class BiasReport:
    """One run's report: per bias, per category, overall, and counts."""

    per_bias: dict[str, BiasValue]
    category_avg: dict[str, float | None]
    overall_avg: float | None

    @property
    def values(self) -> dict[str, float | None]:
        return {t: bv.value for t, bv in self.per_bias.items()}

    def counts(self) -> dict[str, int]:
        return {k: sum(getattr(bv, k) for bv in self.per_bias.values()) for k in COUNT_KEYS}

    def inter_sample_var(self) -> float | None:
        """Population variance of all per-sample BD_i / BC_i values of this run (pooled over the biases)."""
        xs = [x for bv in self.per_bias.values() for x in bv.per_sample]
        return statistics.pvariance(xs) if xs else None

    def to_dict(self, model_key: str = "") -> dict[str, Any]:
        """The upstream report shape: ``{model_key, per_bias: {type: {metric, value, samples, category}},
        category_avg, overall_avg}`` plus our counts."""
        return {
            "model_key": model_key,
            "per_bias": {t: bv.to_dict() for t, bv in self.per_bias.items()},
            "category_avg": dict(self.category_avg),
            "overall_avg": self.overall_avg,
        }


def compute_report(
    pairs: Iterable[ScoredPair],
    abstention: str = "drop",
    empty: str = "upstream",
    bias_types: Sequence[str] | None = None,
) -> BiasReport:
    pb = per_bias(pairs, abstention, empty, bias_types)
    values = {t: bv.value for t, bv in pb.items()}
    return BiasReport(pb, category_averages(values), overall(values))


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
        present = [
            t for t in (bias_types or [b.bias_type for b in BIASES]) if any(p.bias_type == t for p in ps)
        ]
        rep = compute_report(ps, abstention, bias_types=present)
        out[g] = {"overall": rep.overall_avg, "n_used": rep.counts()["n_used"], "per_bias": rep.values}
    return out


# --------------------------------------------------------------------------------------------------------------
# Across runs (k seeds)
# --------------------------------------------------------------------------------------------------------------


def mean_std(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """(mean, sample standard deviation) of the non-None, non-NaN values: x̄ = Σx / n and
    s = sqrt(Σ(x − x̄)² / (n − 1)) (ddof=1, :func:`statistics.stdev`); std is None with fewer than two values."""
    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not xs:
        return None, None
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else None)


def combine_runs(reports: Sequence[BiasReport]) -> dict[str, Any]:
    """Aggregate k runs (one per seed) of the same judge.

    * every per-bias, category and overall value: mean over runs and sample std (ddof=1; None for k=1);
    * ``inter_run_var``   = sample variance of the run-level overall values (ddof=1; None for k=1);
    * ``inter_sample_var`` = mean over runs of the population variance of the pooled per-sample values.

    The leaderboard's variance scaling is unpublished; these are unscaled.
    """
    if not reports:
        raise ValueError("combine_runs needs at least one report")
    out: dict[str, Any] = {"per_bias": {}, "category_avg": {}, "n_runs": len(reports)}
    types = list(reports[0].per_bias)
    for t in types:
        m, s = mean_std([r.per_bias[t].value for r in reports if t in r.per_bias])
        out["per_bias"][t] = {"mean": m, "std": s}
    for c in CATEGORIES:
        m, s = mean_std([r.category_avg.get(c) for r in reports])
        out["category_avg"][c] = {"mean": m, "std": s}
    m, s = mean_std([r.overall_avg for r in reports])
    out["overall"] = {"mean": m, "std": s}
    out["inter_run_var"] = s * s if s is not None else None
    isv = [v for v in (r.inter_sample_var() for r in reports) if v is not None]
    out["inter_sample_var"] = statistics.fmean(isv) if isv else None
    return out


__all__ = [
    "ABSTENTION_MODES",
    "COUNT_KEYS",
    "BiasReport",
    "BiasValue",
    "ScoredPair",
    "bc_value",
    "bd_value",
    "bias_conformity",
    "bias_deviation",
    "breakdown",
    "category_averages",
    "combine_runs",
    "compute_report",
    "mean_std",
    "overall",
    "pair_value",
    "per_bias",
]
