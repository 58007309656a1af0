"""Pure metric functions for the judge benchmarks and the conventional judge biases, each formula in its docstring.
"No data" is ``None``, never a silent ``0.0``. A **verdict** is ``"A"`` (the first response is better), ``"B"`` or
``"C"`` (a tie), ``None`` a parse failure; a **ranking** is slot letters, best first (``"CABD"``). ``flex_*``
replicate Flex-Judge's ``test/evaluate.py`` aggregation over seeds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from rapidfuzz.distance import Levenshtein

from perception_judge.core.schema import SLOTS
from perception_judge.evaluation.base import COUNT, LOWER, Metric
from perception_judge.evaluation.stats import mean, median, pearson, rate  # noqa: F401 (M.mean for the suites)

VERDICTS: tuple[str, ...] = ("A", "B", "C")
_SIGN = {"A": -1, "B": 1, "C": 0}

METRICS: dict[str, Metric] = {
    **dict.fromkeys(("acc", "acc_orig_order", "acc_swapped_order"), Metric(chance=0.5)),  # a coin per pair
    "acc_both_orders": Metric(chance=0.25),
    "order_consistency": Metric(),
    **dict.fromkeys(("acc_with_tie", "acc_with_tie_compat", "acc_without_tie"), Metric()),
    **dict.fromkeys(("pearson", "pearson_compat", "pearson_unmapped"), Metric(chance=0.0)),
    **dict.fromkeys(("consistency_rate", "consistency_rate_strict"), Metric()),
    **dict.fromkeys(("parse_failure_rate", "pred_tie_rate", "tied_scores_rate"), LOWER),
    **dict.fromkeys(("norm_levenshtein", "norm_levenshtein_parsed"), LOWER),
    "first_position_win_rate": Metric(None, ideal=0.5),
    **dict.fromkeys(("n", "n_undecided"), COUNT),
}
"""What the metrics the benchmark suites share mean, by the name part that states the metric
(:meth:`perception_judge.evaluation.base.Suite.metric`); each suite adds its own."""


def ceil_half(score: float) -> int:
    """Map a 1-10 judge score onto the 1-5 human scale: ``ceil(s / 2)`` (1,2→1; 3,4→2; ...; 9,10→5), as in the
    Perception-Judge evaluation of MLLM-as-a-Judge's score setting."""
    return math.ceil(score / 2)


def pair_verdict(s1: float, s2: float) -> str:
    """``"A"`` if s1 > s2, ``"B"`` if s1 < s2, else ``"C"`` (a tie)."""
    return "A" if s1 > s2 else "B" if s1 < s2 else "C"


def swap_verdict(verdict: str | None) -> str | None:
    """The verdict with the two responses' positions exchanged (A↔B; C and None unchanged): un-swaps."""
    return {"A": "B", "B": "A"}.get(verdict, verdict) if verdict is not None else None


def ranking_from_scores(scores: Sequence[float], labels: str = SLOTS) -> str:
    """Slot letters (``labels``) sorted by score, highest first. **Ties**: the later slot comes first (D before C),
    the ordering of ``sorted(zip(scores, labels), reverse=True)`` that the published MLLM-as-a-Judge evaluators
    use, so equal scores give the same ranking as theirs: ``[3, 9, 9, 1]`` gives ``"CBAD"``."""
    if len(scores) > len(labels):
        raise ValueError(f"at most {len(labels)} scores, got {len(scores)}")
    order = sorted(range(len(scores)), key=lambda i: (scores[i], i), reverse=True)
    return "".join(labels[i] for i in order)


def levenshtein(a: str, b: str) -> int:
    """Edit distance: the fewest single-character insertions, deletions and substitutions turning a into b."""
    return Levenshtein.distance(a, b)


def normalized_levenshtein(pred: str, gt: str) -> float:
    """``levenshtein(pred, gt) / max(len(pred), len(gt))`` in [0, 1]; **lower is better**
    (:func:`rapidfuzz.distance.Levenshtein.normalized_distance`). An empty prediction against a non-empty
    ground truth gives 1.0; two empty strings give 0.0."""
    return Levenshtein.normalized_distance(pred, gt)


def pair_accuracy(
    preds: Sequence[str | None], gts: Sequence[str], *, with_tie: bool, failure: str = "wrong"
) -> float | None:
    """Accuracy of pair verdicts against human labels in {A, B, C}.

    * ``with_tie=True``: over **all** items, correct iff pred == gt (a predicted C is right when gt is C).
    * ``with_tie=False``: items whose **gt** is C are dropped; a predicted C counts as wrong.
    * ``failure="wrong"`` (ours): a parse failure (None) is wrong. ``failure="tie"``: a failure counts as the
      verdict C, as in the published Flex-Judge / Perception-Judge evaluators (so it is *right* when gt is C).

    None when no item is left."""
    if failure not in ("wrong", "tie"):
        raise ValueError(f"failure must be 'wrong' or 'tie', got {failure!r}")
    correct = total = 0
    for pred, gt in zip(preds, gts, strict=True):
        if not with_tie and gt == "C":
            continue
        total += 1
        if pred is None and failure == "tie":
            pred = "C"
        correct += pred is not None and pred == gt
    return rate(correct, total)


def vote_verdict(verdicts: Iterable[str | None]) -> str | None:
    """Majority verdict over runs: A = −1, B = +1, C = 0, take the sign of the sum (0 → C). Parse failures
    (None) abstain; None when every run failed. With failures counted as C this is Flex-Judge's vote."""
    parsed = [v for v in verdicts if v is not None]
    if not parsed:
        return None
    total = sum(_SIGN[v] for v in parsed)
    return "A" if total < 0 else "B" if total > 0 else "C"


def consistency_rate(
    pairs: Iterable[tuple[str | None, str | None]], failure: str = "exclude"
) -> float | None:
    """Share of pairs judged the same way in both orders: each element is (verdict in the original order,
    verdict in the swapped order **already un-swapped**); consistent iff the two are equal (C == C counts).

    ``failure="exclude"``: pairs with a parse failure in either order are left out. ``failure="inconsistent"``:
    they count as inconsistent. None when no pair is left."""
    if failure not in ("exclude", "inconsistent"):
        raise ValueError(f"failure must be 'exclude' or 'inconsistent', got {failure!r}")
    pairs = [(a, b) for a, b in pairs if failure == "inconsistent" or (a is not None and b is not None)]
    return rate(sum(a is not None and a == b for a, b in pairs), len(pairs))


def first_position_win_rate(slot_verdicts: Iterable[str | None]) -> float | None:
    """Among decisive judgments (verdict A or B, in **slot** terms, i.e. not un-swapped), the share won by the
    response shown first: #A / (#A + #B). 0.5 is position-neutral when each pair is judged in both orders.
    Ties and failures are left out; None when there is no decisive judgment."""
    verdicts = list(slot_verdicts)
    return rate(verdicts.count("A"), verdicts.count("A") + verdicts.count("B"))


def flex_score_pearson(runs_pred: Sequence[Sequence[float]], human: Sequence[float]) -> float | None:
    """Flex-Judge's score metric for one subset: run j's Pearson r is computed on the **concatenation** of
    runs 0..j (its lists are never reset), an undefined r counts as 0, and the reported value is the median
    of the k cumulative r values. Callers encode parse failures as −1 beforehand, as Flex does."""
    if not runs_pred:
        return None
    xs: list[float] = []
    ys: list[float] = []
    rs: list[float] = []
    for run in runs_pred:
        xs.extend(run)
        ys.extend(human)
        r = pearson(xs, ys)
        rs.append(0.0 if r is None else r)
    return median(rs)


def flex_batch_distance(runs_dist: Sequence[Sequence[float]]) -> float | None:
    """Flex-Judge's batch metric for one subset: after run j the mean distance over runs 0..j (accumulated,
    never reset), and the reported value is the **maximum** of those k means."""
    acc: list[float] = []
    means: list[float] = []
    for run in runs_dist:
        acc.extend(run)
        if acc:
            means.append(sum(acc) / len(acc))
    return max(means) if means else None
