"""Pairwise items judged in both orders: the shared engine of VL-RewardBench, MJ-Bench and the position,
verbosity and self-enhancement suites. Preferences and verdicts are in **response space** (``"A"`` =
``responses[0]`` is better, ``"B"`` = ``responses[1]``, ``"C"`` = a tie): the verdict of the swapped order
(variant ``swap``) is un-swapped before it is compared.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from perception_judge.core.protocol import build_messages
from perception_judge.core.schema import JudgeRequest
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks.common import BenchmarkRun, Judged, prefixed, slug

ORIG, SWAP = "orig", "swap"
ORDERS: tuple[str, ...] = (ORIG, SWAP)


@dataclass
class PairItem:
    """Two candidates for one question (and its images), with the human preference where known."""

    item_id: str
    question: str
    responses: list[str]
    preferred: str | None  # "A" | "B" | "C" | None, in response space
    group: str = ""
    names: list[str | None] = field(default_factory=lambda: [None, None])
    record_id: str = ""  # the benchmark's own id where item_id had to be made unique (VL-RewardBench)
    load_images: Callable[[], list[Any]] = field(default=lambda: [], repr=False)
    check_images: Callable[[], None] = field(default=lambda: None, repr=False)  # fail fast on missing files


def pair_requests(
    suite: str,
    item: PairItem,
    images: Sequence[Any],
    responses: Sequence[str] | None = None,
    tag: str = "",
    swap_images: bool = False,
    parser: str = "protocol",
    render: Callable[..., list[dict[str, Any]]] | None = None,
) -> list[JudgeRequest]:
    """Pair-protocol requests for the item's two candidates (or ``responses``) in each order (variant
    ``f"{tag}{order}"``). Swapping exchanges the two responses, or the two images when ``swap_images`` (MJ-Bench:
    the candidates are images). ``render(question, responses, n_images)``: the messages (default the project's
    pair prompt; a published prompt's ``Prompt.render``)."""
    render, out = render or functools.partial(build_messages, "pair"), []
    for order in ORDERS:
        resp, imgs = list(responses or item.responses), list(images)
        if order == SWAP:
            (imgs if swap_images else resp).reverse()
        out.append(
            JudgeRequest(
                request_id=f"{suite}:{item.item_id}:{tag}{order}",
                messages=render(item.question, resp, n_images=len(imgs)),
                images=imgs,
                n_scores=2,
                parser=parser,
                meta={"variant": f"{tag}{order}", "suite": suite},
            )
        )
    return out


def slot_verdict(scores: Sequence[float] | None) -> str | None:
    """The verdict in slot terms (A = the response shown first)."""
    return None if scores is None else M.pair_verdict(scores[0], scores[1])


def response_verdict(scores: Sequence[float] | None, order: str) -> str | None:
    """The verdict in response terms (A = ``responses[0]``): the swapped order's verdict un-swapped."""
    v = slot_verdict(scores)
    return M.swap_verdict(v) if order == SWAP else v


def response_scores(scores: Sequence[float] | None, order: str) -> tuple[float, float] | None:
    """(score of responses[0], score of responses[1]) of one judgment."""
    if scores is None:
        return None
    return (scores[1], scores[0]) if order == SWAP else (scores[0], scores[1])


def order_scores(judged: Judged, seed: int) -> list[dict[str, list[float] | None]]:
    """Per judged item, its scores in each order under one seed (slot terms; None on a failure)."""
    return [{o: judged.scores(i, o, seed) for o in ORDERS} for i in range(len(judged.items))]


def order_verdicts(judged: Judged, seed: int) -> list[dict[str, str | None]]:
    """Per judged item, its verdict in each order under one seed, in response terms."""
    return [{o: response_verdict(s, o) for o, s in per.items()} for per in order_scores(judged, seed)]


def group_accuracy(
    items: Sequence[PairItem], correct: Callable[[int], float | None], idx: list[int]
) -> dict[str, float | None]:
    """``acc.by_category.<g>``: the mean of ``correct(i)`` over g's items in ``idx``; ``acc.macro``: their mean."""
    groups: dict[str, list[int]] = {}
    for i in idx:
        groups.setdefault(items[i].group, []).append(i)
    per = {g: M.mean(correct(i) for i in ids) for g, ids in sorted(groups.items())}
    return {"acc.macro": M.mean(per.values()), **{f"acc.by_category.{slug(g)}": v for g, v in per.items()}}


def order_accuracy(
    items: Sequence[PairItem], verdicts: Sequence[dict[str, str | None]]
) -> dict[str, float | None]:
    """Accuracy of one run where every item was judged in both orders (``verdicts[i][order]`` in response
    terms); a tie or a failure is wrong, items without a decisive preference are left out:

    * ``acc`` — correct judgments / judgments over both orders (the expectation of Flex-Judge's random swap);
    * ``acc_orig_order`` / ``acc_swapped_order`` — one order only; ``acc_both_orders`` — items right in both."""
    idx = [i for i, it in enumerate(items) if it.preferred in ("A", "B")]

    def right(i: int, orders: Sequence[str]) -> list[bool]:
        return [verdicts[i].get(o) == items[i].preferred for o in orders]

    return {
        "acc": M.mean(r for i in idx for r in right(i, ORDERS)),
        "acc_orig_order": M.mean(r for i in idx for r in right(i, (ORIG,))),
        "acc_swapped_order": M.mean(r for i in idx for r in right(i, (SWAP,))),
        "acc_both_orders": M.mean(all(right(i, ORDERS)) for i in idx),
    }


def order_metrics(
    items: Sequence[PairItem], verdicts: Sequence[dict[str, str | None]]
) -> dict[str, float | None]:
    """:func:`order_accuracy`, ``pred_tie_rate`` (predicted ties / parsed judgments), the accuracy per group
    (:func:`group_accuracy`) and ``order_consistency`` (:func:`~.metrics.consistency_rate` of the two orders)."""
    idx = [i for i, it in enumerate(items) if it.preferred in ("A", "B")]
    parsed = [v for vs in verdicts for v in vs.values() if v is not None]
    return {
        **order_accuracy(items, verdicts),
        "pred_tie_rate": M.rate(parsed.count("C"), len(parsed)),
        **group_accuracy(
            items, lambda i: M.mean(verdicts[i].get(o) == items[i].preferred for o in ORDERS), idx
        ),
        "order_consistency": M.consistency_rate((v[ORIG], v[SWAP]) for v in verdicts),
    }


def voted_verdicts(per_seed: Sequence[Sequence[dict[str, str | None]]], n: int) -> list[str | None]:
    """The majority verdict of each of ``n`` items over seeds × orders (``per_seed[s][i][order]``; failures
    abstain, :func:`~perception_judge.evaluation.benchmarks.metrics.vote_verdict`)."""
    return [M.vote_verdict([run[j][o] for run in per_seed for o in ORDERS]) for j in range(n)]


def voted_acc(items: Sequence[PairItem], voted: Sequence[str | None]) -> dict[str, float | None]:
    """Accuracy of one voted verdict per item (a tie or failure is wrong), overall, per group and macro, over the
    items with a decisive human preference. VL-RewardBench's official rule is another one (its ``cal.py``:
    :mod:`perception_judge.evaluation.benchmarks.vlrb_cal`)."""
    idx = [i for i, it in enumerate(items) if it.preferred in ("A", "B")]

    def correct(i: int) -> bool:
        return voted[i] == items[i].preferred

    return {"acc": M.mean(correct(i) for i in idx), **group_accuracy(items, correct, idx)}


def aggregated(
    bench: BenchmarkRun, judged: Judged, seed_metrics: Callable[..., dict[str, float | None]] = order_metrics
) -> tuple[dict[str, float | None], dict[int, list[dict[str, str | None]]]]:
    """``parse_failure_rate`` and the metrics of each of the suite's aggregations (``mean``: ``seed_metrics(items,
    verdicts)`` per seed, then the mean; ``vote``: :func:`voted_acc`), and each seed's :func:`order_verdicts`."""
    kept, per_seed = judged.items, {s: order_verdicts(judged, s) for s in bench.seeds}
    metrics: dict[str, float | None] = {"parse_failure_rate": judged.parse_failure_rate}
    for agg in bench.opts.aggregation:
        if agg == "mean":
            metrics |= prefixed(agg, bench.mean(lambda s: seed_metrics(kept, per_seed[s])))
        else:
            metrics |= prefixed(agg, voted_acc(kept, voted_verdicts(list(per_seed.values()), len(kept))))
    return metrics, per_seed
