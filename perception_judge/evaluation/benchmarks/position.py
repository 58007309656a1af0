"""Position bias: every pair judged in both orders (protocol: ours, judge-benchmarks.md §5).

Pairs come from any pair source (:mod:`perception_judge.evaluation.benchmarks.pairs`: MLLM-as-a-Judge
``pair.jsonl``, VL-RewardBench, a PPJD training-set split, or a generic pairs JSONL). Each pair is judged with
our pair prompt as (r0, r1) and as (r1, r0), under every seed.

Metrics (per seed, then the mean over seeds; prefix ``mean.``):

* ``consistency_rate`` — pairs with the same verdict after un-swapping (a tie twice counts as consistent) /
  pairs parsed in both orders. 1.0 = no position effect. ``consistency_rate_strict`` counts a pair with a
  parse failure in either order as inconsistent.
* ``first_position_win_rate`` — among decisive judgments (both orders pooled), the share won by the response
  shown first. 0.5 = position-neutral (each pair appears once in each position).
* ``position_score_bias`` — mean over parsed judgments of score(first slot) − score(second slot); 0 =
  neutral, > 0 favours the first slot (content cancels out across the two orders).
* ``pred_tie_rate`` — predicted ties / parsed judgments.
* where the source has a human preference: ``acc`` (both orders pooled), ``acc_orig_order``,
  ``acc_swapped_order``, ``acc_both_orders`` (a tie or failure is wrong).

``parse_failure_rate`` (all judgments, every seed) is reported outside the aggregation.
"""

from __future__ import annotations

from typing import Any

from perception_judge.evaluation.base import JudgeBackend, SuiteConfig, SuiteResult
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks.common import (
    Outcome,
    SampleWriter,
    check_known_options,
    judge_items,
    judge_protocol,
    judged_items,
    mean_over_runs,
    opt_int,
    parse_failure_rate,
    prefixed,
    prepare_image,
    suite_result,
)
from perception_judge.evaluation.benchmarks.pair_sources import SOURCE_OPTIONS, load_pair_source
from perception_judge.evaluation.benchmarks.pairs import (
    ORDERS,
    ORIG,
    SWAP,
    PairItem,
    order_outcomes,
    pair_requests,
    response_verdict,
    slot_verdict,
)

SUITE = "position"
OPTIONS = (*SOURCE_OPTIONS, "chunk_size", "image_size")


def position_metrics(
    items: list[PairItem], outcomes: list[dict[str, Outcome | None]]
) -> dict[str, float | None]:
    """Position metrics of one run; ``outcomes[i][order]`` is item i's judgment in that order."""
    pairs = [(response_verdict(o.get(ORIG), ORIG), response_verdict(o.get(SWAP), SWAP)) for o in outcomes]
    slots = [slot_verdict(o.get(order)) for o in outcomes for order in ORDERS]
    gaps = [
        oc.scores[0] - oc.scores[1]
        for o in outcomes
        for oc in (o.get(ORIG), o.get(SWAP))
        if oc is not None and oc.scores is not None
    ]
    parsed = [v for v in slots if v is not None]
    out: dict[str, float | None] = {
        "consistency_rate": M.consistency_rate(pairs),
        "consistency_rate_strict": M.consistency_rate(pairs, failure="inconsistent"),
        "first_position_win_rate": M.first_position_win_rate(slots),
        "position_score_bias": M.mean(gaps),
        "pred_tie_rate": M.rate(sum(v == "C" for v in parsed), len(parsed)),
    }
    labelled = [i for i, it in enumerate(items) if it.preferred in ("A", "B")]
    if labelled:

        def acc(orders: tuple[str, ...]) -> float | None:
            hits = sum(
                response_verdict(outcomes[i].get(o), o) == items[i].preferred
                for i in labelled
                for o in orders
            )
            return M.rate(hits, len(labelled) * len(orders))

        out["acc"] = acc(ORDERS)
        out["acc_orig_order"] = acc((ORIG,))
        out["acc_swapped_order"] = acc((SWAP,))
        out["acc_both_orders"] = M.rate(
            sum(
                all(response_verdict(outcomes[i].get(o), o) == items[i].preferred for o in ORDERS)
                for i in labelled
            ),
            len(labelled),
        )
    return out


def run(backend: JudgeBackend, config: SuiteConfig) -> SuiteResult:
    options = dict(config.options)
    check_known_options(options, OPTIONS, SUITE)
    batch_size = opt_int(options, "chunk_size", 64) or 64
    image_size = opt_int(options, "image_size", None)
    seeds = [int(s) for s in config.seeds] or [0]
    items, source = load_pair_source(options, config.limit, SUITE)
    counts: dict[str, int] = {"pairs": len(items)}
    with SampleWriter(config.out_dir, SUITE) as writer:
        outcomes = judge_items(
            backend,
            items,
            lambda it: pair_requests(it, SUITE, prepare=lambda im: prepare_image(im, backend, image_size)),
            seeds=seeds,
            sampling=config.sampling,
            batch_size=batch_size,
            writer=writer,
            counts=counts,
            desc="position",
            log_fields=lambda it: {"item_id": it.item_id, "group": it.group, "preferred": it.preferred},
        )
        samples_path = writer.samples_path
    judged, kept = judged_items(items, outcomes, counts)
    runs = []
    per_seed: dict[str, Any] = {}
    for s in seeds:
        r = position_metrics(kept, order_outcomes(outcomes, judged, s))
        per_seed[f"seed{s}"] = r
        runs.append(r)
    metrics: dict[str, float | None] = {
        "parse_failure_rate": parse_failure_rate(counts),
        **prefixed("mean", mean_over_runs(runs)),
    }
    protocol = {
        "bias": "position (protocol: ours, judge-benchmarks.md §5)",
        **source,
        "prompt": "perception_judge.core.protocol.build_messages('pair'), two 1-10 scores",
        "orders": "each pair judged as (r0, r1) and (r1, r0); verdicts compared after un-swapping",
        "ideal": "consistency_rate 1.0, first_position_win_rate 0.5, position_score_bias 0",
        "aggregation": {"mean": "metrics per seed, then the mean over seeds"},
        **judge_protocol(backend, config, image_size, "n/a (our protocol)"),
    }
    return suite_result(SUITE, metrics, protocol, counts, samples_path, per_seed, "mean.consistency_rate")
