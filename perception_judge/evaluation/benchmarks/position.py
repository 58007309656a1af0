"""Position bias: every pair of a pair source (:mod:`.pair_sources`) judged with our pair prompt as (r0, r1) and
as (r1, r0), under every seed (protocol: ours, judge-benchmarks.md §5; ``docs/benchmarks.md``).
"""

from __future__ import annotations

from perception_judge.evaluation.base import JudgeBackend, Metric, Suite, SuiteConfig, SuiteResult
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks import pairs
from perception_judge.evaluation.benchmarks.common import BenchmarkRun, prefixed
from perception_judge.evaluation.benchmarks.pair_sources import PairSourceOptions, load_pair_source

NAME = "position"


def position_metrics(
    items: list[pairs.PairItem], scores: list[dict[str, list[float] | None]]
) -> dict[str, float | None]:
    """Position metrics of one run (``scores[i][order]``: item i's scores in that order):

    * ``consistency_rate`` — pairs with the same verdict after un-swapping (a tie twice counts) / pairs parsed in
      both orders; ``consistency_rate_strict`` counts a pair with a failure as inconsistent;
    * ``first_position_win_rate`` — among decisive judgments, the share won by the response shown first (0.5 =
      neutral);
    * ``position_score_bias`` — mean score(first slot) − score(second slot) over parsed judgments (0 = neutral);
    * ``pred_tie_rate``; where the source has a human preference, :func:`~.pairs.order_accuracy`."""
    verdicts = [{o: pairs.response_verdict(s[o], o) for o in pairs.ORDERS} for s in scores]
    both = [(v[pairs.ORIG], v[pairs.SWAP]) for v in verdicts]
    slots = [pairs.slot_verdict(s[o]) for s in scores for o in pairs.ORDERS]
    parsed = [v for v in slots if v is not None]
    out: dict[str, float | None] = {
        "consistency_rate": M.consistency_rate(both),
        "consistency_rate_strict": M.consistency_rate(both, failure="inconsistent"),
        "first_position_win_rate": M.first_position_win_rate(slots),
        "position_score_bias": M.mean(
            s[o][0] - s[o][1] for s in scores for o in pairs.ORDERS if s[o] is not None
        ),
        "pred_tie_rate": M.rate(parsed.count("C"), len(parsed)),
    }
    if any(it.preferred in ("A", "B") for it in items):
        out |= pairs.order_accuracy(items, verdicts)
    return out


def run(backend: JudgeBackend, config: SuiteConfig) -> SuiteResult:
    bench = BenchmarkRun(NAME, backend, config)
    items, source = load_pair_source(bench.opts, config.limit)
    counts: dict[str, int] = {"pairs": len(items)}
    judged = bench.judge(
        items,
        lambda it: pairs.pair_requests(NAME, it, bench.images(it)),
        "position",
        counts,
        lambda it: {"item_id": it.item_id, "group": it.group, "preferred": it.preferred},
    )

    means = bench.mean(lambda seed: position_metrics(judged.items, pairs.order_scores(judged, seed)))
    metrics = {"parse_failure_rate": judged.parse_failure_rate, **prefixed("mean", means)}
    protocol = {
        "bias": "position (protocol: ours, judge-benchmarks.md §5)",
        **source,
        "prompt": "perception_judge.core.protocol.build_messages('pair'), two 1-10 scores",
        "orders": "each pair judged as (r0, r1) and (r1, r0); verdicts compared after un-swapping",
        "ideal": "consistency_rate 1.0, first_position_win_rate 0.5, position_score_bias 0",
    }
    return bench.result(metrics, counts, protocol, "n/a (our protocol)")


METRICS = {**M.METRICS, "position_score_bias": Metric(None, ideal=0.0)}
PRIMARY = ("mean.consistency_rate", "mean.first_position_win_rate")
SUITE = Suite(NAME, PairSourceOptions, METRICS, PRIMARY, run, from_run="trainset_dir")
