"""Statistics every suite and the results table share, each formula in its docstring; "no data" is ``None``, never
a silent ``0.0``. Below the suites: it imports none of them."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence


def mean(values: Iterable[float | None]) -> float | None:
    """Arithmetic mean Σx / n of the values that are not None (:func:`statistics.fmean`); None when none."""
    xs = [float(v) for v in values if v is not None]
    return statistics.fmean(xs) if xs else None


def median(values: Iterable[float | None]) -> float | None:
    """Median of the values that are not None (:func:`statistics.median`); None if there are none."""
    xs = [float(v) for v in values if v is not None]
    return statistics.median(xs) if xs else None


def rate(numerator: int, denominator: int) -> float | None:
    """``numerator / denominator``; None when the denominator is 0."""
    return numerator / denominator if denominator else None


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson correlation r = Σ(x−x̄)(y−ȳ) / sqrt(Σ(x−x̄)² · Σ(y−ȳ)²) (:func:`scipy.stats.pearsonr`),
    clamped to [−1, 1].

    None when fewer than two pairs or when either side is constant (r is undefined there; the Flex-Judge
    evaluator turns that NaN into 0, see :func:`flex_score_pearson`)."""
    if len(x) != len(y):
        raise ValueError(f"pearson needs equal lengths, got {len(x)} and {len(y)}")
    if len(x) < 2 or len(set(x)) == 1 or len(set(y)) == 1:
        return None
    from scipy.stats import pearsonr  # lazy: scipy.stats costs most of a second to import

    r = float(pearsonr(x, y).statistic)
    return None if math.isnan(r) else max(-1.0, min(1.0, r))


def mean_std(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """(mean, sample standard deviation) of the non-None, non-NaN values: x̄ = Σx / n and
    s = sqrt(Σ(x − x̄)² / (n − 1)) (ddof=1, :func:`statistics.stdev`); std is None with fewer than two values."""
    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not xs:
        return None, None
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else None)


def wilson_interval(successes: float, n: int, z: float = 1.959964) -> tuple[float, float] | None:
    """Wilson score interval of a proportion ``successes / n`` (95% for the default z):

        centre = (p + z^2 / 2n) / (1 + z^2 / n),  half = z sqrt(p (1 - p) / n + z^2 / 4n^2) / (1 + z^2 / n)

    ``successes`` may be fractional (ties as half credit); the two orders of one pair count as separate judgements
    (a somewhat narrower interval than over independent pairs). None when ``n == 0``."""
    if n <= 0:
        return None
    p = min(1.0, max(0.0, successes / n))
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)
