"""Pairwise items judged in both orders: the shared engine of VL-RewardBench, MJ-Bench and the position,
verbosity and self-enhancement suites (requests in both orders, verdicts, votes).

A :class:`PairItem` holds two candidates and, where known, the human preference in **response space**:
``"A"`` = ``responses[0]`` is better, ``"B"`` = ``responses[1]``, ``"C"`` = a tie, ``None`` = unknown. Each item
is judged in the original order (variant ``orig``) and with the two candidates swapped (``swap``); the swapped
verdict is un-swapped before it is compared, so "A" always means ``responses[0]``.

The pair sources the bias suites read are in :mod:`~perception_judge.evaluation.benchmarks.pair_sources`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from perception_judge.core.protocol import build_messages
from perception_judge.core.schema import JudgeRequest
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks.common import (
    Outcome,
    macro,
    slug,
)

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
    load_images: Callable[[], list[Any]] = field(default=lambda: [], repr=False)
    check_images: Callable[[], None] = field(default=lambda: None, repr=False)  # fail fast on missing files
    meta: dict[str, Any] = field(default_factory=dict)


def requests_both_orders(
    suite: str,
    item_id: str,
    question: str,
    responses: Sequence[str],
    images: Sequence[Any],
    tag: str = "",
    orders: Sequence[str] = ORDERS,
    swap_images: bool = False,
    parser: str = "protocol",
) -> list[JudgeRequest]:
    """Pair-protocol requests for two candidates in each order (variant ``f"{tag}{order}"``). Swapping
    exchanges the two responses, or the two images when ``swap_images`` (MJ-Bench: the candidates are images).
    ``parser`` is the request parser (``"published"`` for a suite's ``parser=published``)."""
    out = []
    for order in orders:
        swapped = order == SWAP
        resp = list(responses)
        imgs = list(images)
        if swapped and swap_images:
            imgs.reverse()
        elif swapped:
            resp.reverse()
        out.append(
            JudgeRequest(
                request_id=f"{suite}:{item_id}:{tag}{order}",
                messages=build_messages("pair", question, resp, n_images=len(imgs)),
                images=imgs,
                n_scores=2,
                parser=parser,
                meta={"variant": f"{tag}{order}", "suite": suite},
            )
        )
    return out


def pair_requests(
    item: PairItem,
    suite: str,
    prepare: Callable[[Any], Any] | None = None,
    swap_images: bool = False,
    parser: str = "protocol",
) -> list[JudgeRequest]:
    """The item's requests in both orders; its images are loaded once and passed through ``prepare`` (the
    suite's image policy)."""
    images = [prepare(im) if prepare else im for im in item.load_images()]
    return requests_both_orders(
        suite, item.item_id, item.question, item.responses, images, swap_images=swap_images, parser=parser
    )


def slot_verdict(outcome: Outcome | None) -> str | None:
    """The verdict in slot terms (A = the response shown first); None on failure / no judgment."""
    if outcome is None or outcome.scores is None:
        return None
    return M.pair_verdict(outcome.scores[0], outcome.scores[1])


def response_verdict(outcome: Outcome | None, order: str) -> str | None:
    """The verdict in response terms (A = ``responses[0]``): the swapped order's verdict un-swapped."""
    v = slot_verdict(outcome)
    return M.swap_verdict(v) if order == SWAP else v


def response_scores(outcome: Outcome | None, order: str) -> tuple[float, float] | None:
    """(score of responses[0], score of responses[1]) of one judgment; None on failure."""
    if outcome is None or outcome.scores is None:
        return None
    s0, s1 = outcome.scores[0], outcome.scores[1]
    return (s1, s0) if order == SWAP else (s0, s1)


def order_outcomes(
    outcomes: dict[tuple[int, str, int], Outcome], judged: Sequence[int], seed: int
) -> list[dict[str, Outcome | None]]:
    """Per judged item (``judged``: the item indices :func:`judged_items` returns), its judgment in each order
    under one seed."""
    return [{o: outcomes.get((i, o, seed)) for o in ORDERS} for i in judged]


def order_verdicts(
    outcomes: dict[tuple[int, str, int], Outcome], judged: Sequence[int], seed: int
) -> list[dict[str, str | None]]:
    """Per judged item, its verdict in each order under one seed, in response terms."""
    return [
        {o: response_verdict(v, o) for o, v in per_order.items()}
        for per_order in order_outcomes(outcomes, judged, seed)
    ]


def order_metrics(
    items: Sequence[PairItem],
    verdicts: Sequence[dict[str, str | None]],
    group_name: str = "category",
) -> dict[str, float | None]:
    """Accuracy metrics of one run where every item was judged in both orders (``verdicts[i][order]`` in
    response terms). A tie or a failure is wrong; items without a decisive preference are left out.

    * ``acc`` — correct judgments / judgments over both orders (the expectation of Flex-Judge's random swap);
    * ``acc_orig_order`` / ``acc_swapped_order`` — one order only;
    * ``acc_both_orders`` — items correct in both orders;
    * ``acc.by_{group}.<g>`` and ``acc.macro`` — per group and their unweighted mean;
    * ``pred_tie_rate`` — predicted ties / parsed judgments."""
    idx = [i for i, it in enumerate(items) if it.preferred in ("A", "B")]
    out: dict[str, float | None] = {}

    def acc(ids: list[int], orders: Sequence[str]) -> float | None:
        n = sum(len(orders) for _ in ids)
        correct = sum(verdicts[i].get(o) == items[i].preferred for i in ids for o in orders)
        return M.rate(correct, n)

    out["acc"] = acc(idx, ORDERS)
    out["acc_orig_order"] = acc(idx, (ORIG,))
    out["acc_swapped_order"] = acc(idx, (SWAP,))
    out["acc_both_orders"] = M.rate(
        sum(all(verdicts[i].get(o) == items[i].preferred for o in ORDERS) for i in idx), len(idx)
    )
    parsed = [v for i in range(len(items)) for v in verdicts[i].values() if v is not None]
    out["pred_tie_rate"] = M.rate(sum(v == "C" for v in parsed), len(parsed))
    groups: dict[str, list[int]] = {}
    for i in idx:
        groups.setdefault(items[i].group, []).append(i)
    per = {g: acc(ids, ORDERS) for g, ids in sorted(groups.items())}
    out["acc.macro"] = macro(per)
    out.update({f"acc.by_{group_name}.{slug(g)}": v for g, v in per.items()})
    return out


def vote_over(verdicts: Sequence[str | None]) -> str | None:
    """Majority verdict over seeds × orders (response terms); failures abstain."""
    return M.vote_verdict(verdicts)


def voted_verdicts(per_seed: Sequence[Sequence[dict[str, str | None]]], n: int) -> list[str | None]:
    """The :func:`vote_over` verdict of each of ``n`` items over seeds × orders (``per_seed[s][i][order]``)."""
    return [vote_over([run[j][o] for run in per_seed for o in ORDERS]) for j in range(n)]


def _vote_accuracy(
    items: Sequence[PairItem], voted: Sequence[str | None], idx: list[int], group_name: str
) -> dict[str, float | None]:
    """Accuracy of the votes of items ``idx``: overall, per group, and the macro mean over the groups present."""
    out: dict[str, float | None] = {"acc": M.rate(sum(voted[i] == items[i].preferred for i in idx), len(idx))}
    groups: dict[str, list[int]] = {}
    for i in idx:
        groups.setdefault(items[i].group, []).append(i)
    per = {
        g: M.rate(sum(voted[i] == items[i].preferred for i in ids), len(ids))
        for g, ids in sorted(groups.items())
    }
    out["acc.macro"] = macro(per)
    out.update({f"acc.by_{group_name}.{slug(g)}": v for g, v in per.items()})
    return out


def voted_acc(
    items: Sequence[PairItem], voted: Sequence[str | None], group_name: str = "category"
) -> dict[str, float | None]:
    """Accuracy of one voted verdict per item (a tie or failure is wrong), overall, per group and macro."""
    idx = [i for i, it in enumerate(items) if it.preferred in ("A", "B")]
    return _vote_accuracy(items, voted, idx, group_name)


def official_acc(
    items: Sequence[PairItem], voted: Sequence[str | None], group_name: str = "category"
) -> dict[str, float | None]:
    """VL-RewardBench's official accuracy (its ``cal.py`` rule) from the same per-item vote as :func:`voted_acc`:
    an item whose vote is a tie or has no parsed judgement leaves the denominator,

        acc = #{i : vote_i = human_i} / #{i : vote_i in {A, B}},   acc.macro = mean over the groups present,

    so it is never lower than the project's stricter ``vote.acc`` (which counts those items as wrong). ``n`` is
    the denominator."""
    idx = [i for i, it in enumerate(items) if it.preferred in ("A", "B") and voted[i] in ("A", "B")]
    return {**_vote_accuracy(items, voted, idx, group_name), "n": float(len(idx))}
