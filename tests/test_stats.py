"""The shared statistics (perception_judge.evaluation.stats): the Wilson interval against its formula written out
here, and its edges (one judgement, a perfect score, a count above n)."""

from __future__ import annotations

import math

import pytest

from perception_judge.evaluation import stats

Z = 1.959964


def _wilson(successes: float, n: int) -> tuple[float, float]:
    """Wilson's score interval, written out: (p + z²/2n ± z sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)."""
    p = successes / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return centre - half, centre + half


def test_wilson_interval_is_the_formula_for_fractional_and_single_judgements():
    for successes, n in ((3, 7), (2.5, 5), (45, 50), (0.5, 1), (1, 2)):
        assert stats.wilson_interval(successes, n) == pytest.approx(_wilson(successes, n), abs=1e-12)
    # one judgement is a sample too: right, the interval is [1 / (1 + z²), 1]
    assert stats.wilson_interval(1, 1) == pytest.approx((1 / (1 + Z * Z), 1.0), abs=1e-12)
    assert stats.wilson_interval(0, 1) == pytest.approx((0.0, Z * Z / (1 + Z * Z)), abs=1e-12)
    assert stats.wilson_interval(0, 0) is None and stats.wilson_interval(3, -1) is None


def test_wilson_interval_stays_within_zero_and_one():
    """A perfect score's interval ends at 1.0 at most: unclamped, the formula's rounding gives 1.0000000000000002
    for n = 20, 32, 38, ... (a rate above 1 in the results). A count above n (a caller's rounding) reads as n."""
    for n in range(1, 101):
        lo, hi = stats.wilson_interval(n, n)
        assert hi <= 1.0 and hi == pytest.approx(1.0) and 0.0 < lo < 1.0, n
        assert 0.0 <= stats.wilson_interval(0, n)[0] < 1e-12
    assert stats.wilson_interval(15, 10) == stats.wilson_interval(10, 10)
