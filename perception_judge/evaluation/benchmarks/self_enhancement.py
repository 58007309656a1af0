"""Self-enhancement bias: does the judge favour responses written by its own model? (protocol: ours,
judge-benchmarks.md §5; no reference implementation exists). Option ``own_model`` names the judge's model as the
candidates' name fields do; settings ``pair`` (pairs with exactly one own response, both orders) and ``score``
(MLLM-as-a-Judge ``score.jsonl``). Details: ``docs/benchmarks.md`` (self-enhancement).
"""

from __future__ import annotations

import re
from typing import Any

from perception_judge.core.options import CommaList
from perception_judge.evaluation.base import (
    INFO,
    LOWER,
    JudgeBackend,
    Metric,
    Suite,
    SuiteConfig,
    SuiteResult,
)
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks import mllm_judge
from perception_judge.evaluation.benchmarks.common import BenchmarkRun, OptPath, choices, prefixed
from perception_judge.evaluation.benchmarks.pair_sources import (
    PairSourceOptions,
    infer_source,
    load_pair_source,
)
from perception_judge.evaluation.benchmarks.pairs import (
    ORDERS,
    PairItem,
    order_scores,
    pair_requests,
    response_scores,
    response_verdict,
)

NAME = "self_enhancement"
SETTINGS: tuple[str, ...] = ("pair", "score")
METRICS: dict[str, Metric] = {
    **M.METRICS,
    "self_preference_abs": LOWER,
    "gap_vs_human_abs": LOWER,
    **dict.fromkeys(
        ("self_preference", "mean_score_gap", "acc_gap", "gap", "gap_vs_human"), Metric(None, ideal=0.0)
    ),
    **dict.fromkeys(("acc_own_preferred", "acc_other_preferred"), Metric()),
    **dict.fromkeys(
        ("own_win_rate_human", "own_win_rate_judge", "mean_own", "mean_other", "human_gap"), INFO
    ),
}


class SelfEnhancementOptions(PairSourceOptions):
    own_model: CommaList = ()
    settings: choices(SETTINGS) | None = None
    score_file: OptPath = None


def normalize_name(name: Any) -> str:
    return re.sub(r"[^a-z0-9]+", "", str(name).lower()) if name is not None else ""


def _diff(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


def pair_metrics(
    items: list[PairItem], own: list[int], scores: list[dict[str, list[float] | None]]
) -> dict[str, float | None]:
    """One run; ``own[i]``: the index (0/1) of item i's own response, ``scores[i][order]``.

    ``pair.own_win_rate_judge``: decisive judgments preferring the own response / decisive judgments;
    ``pair.mean_score_gap`` = mean score(own) − score(other); ``pair.acc_own_preferred`` /
    ``pair.acc_other_preferred``: accuracy on pairs where the human prefers the own / the other response (a tie
    or failure wrong), ``pair.acc_gap`` their difference."""
    wins: list[bool] = []
    gaps: list[float] = []
    hits: dict[bool, list[bool]] = {True: [], False: []}
    for it, w, per_order in zip(items, own, scores):
        own_letter = "AB"[w]
        for order in ORDERS:
            v = response_verdict(per_order[order], order)
            if v in ("A", "B"):
                wins.append(v == own_letter)
            s = response_scores(per_order[order], order)
            if s is not None:
                gaps.append(s[w] - s[1 - w])
            if it.preferred in ("A", "B"):
                hits[it.preferred == own_letter].append(v == it.preferred)
    acc_own, acc_other = M.mean(hits[True]), M.mean(hits[False])
    return {
        "pair.own_win_rate_judge": M.mean(wins),
        "pair.mean_score_gap": M.mean(gaps),
        "pair.acc_own_preferred": acc_own,
        "pair.acc_other_preferred": acc_other,
        "pair.acc_gap": _diff(acc_own, acc_other),
    }


def score_metrics(
    items: list[mllm_judge.Item], is_own: list[bool], scores: list[list[float] | None]
) -> dict[str, float | None]:
    """One run: ``score.gap`` = mean judge score of own − other responses (1-10); ``score.gap_vs_human`` =
    mean(ceil(s/2) − human | own) − mean(ceil(s/2) − human | other) on the 1-5 scale (0 = unbiased)."""
    parsed = [
        (own, s[0], M.ceil_half(s[0]) - it.gt) for it, own, s in zip(items, is_own, scores) if s is not None
    ]
    m_own, m_other = (M.mean(raw for o, raw, _ in parsed if o == own) for own in (True, False))
    r_own, r_other = (M.mean(res for o, _, res in parsed if o == own) for own in (True, False))
    return {
        "score.mean_own": m_own,
        "score.mean_other": m_other,
        "score.gap": _diff(m_own, m_other),
        "score.gap_vs_human": _diff(r_own, r_other),
    }


def _own_pairs(items: list[PairItem], own: set[str]) -> tuple[list[PairItem], list[int], dict[str, int]]:
    """The pairs with exactly one own response, the index of that response, and counts of the others."""
    kept: list[PairItem] = []
    own_index: list[int] = []
    counts = {"pairs": len(items), "skipped_no_own": 0, "skipped_both_own": 0}
    for it in items:
        flags = [normalize_name(n) in own for n in it.names]
        if sum(flags) == 1:
            kept.append(it)
            own_index.append(flags.index(True))
        else:
            counts["skipped_no_own" if sum(flags) == 0 else "skipped_both_own"] += 1
    return kept, own_index, counts


def run(backend: JudgeBackend, config: SuiteConfig) -> SuiteResult:
    bench = BenchmarkRun(NAME, backend, config)
    opts = bench.opts
    own = {normalize_name(n) for n in opts.own_model} - {""}
    if not own:
        raise ValueError(
            f"suite {NAME!r} needs option 'own_model': the judge's own model name as it appears in the "
            "candidates' name fields (e.g. --set self_enhancement.own_model=gpt4v)"
        )
    settings = opts.settings or (list(SETTINGS) if infer_source(opts) == "mllm_judge" else ["pair"])
    pair_source: dict[str, Any] = {}
    score_file = None
    if "pair" in settings:  # read everything before any judging
        all_pairs, pair_source = load_pair_source(opts, None, NAME)
        pairs, own_index, pair_counts = _own_pairs(all_pairs, own)
        pairs, own_index = pairs[: config.limit], own_index[: config.limit]
    if "score" in settings:
        score_file = mllm_judge.setting_file("score", opts.score_file, opts.data_dir)
        images = mllm_judge.image_source(opts.images_dir, [score_file], opts.missing_images)
        score_items, score_counts = mllm_judge.checked_items("score", score_file, images, config.limit)

    metrics: dict[str, float | None] = {}
    counts: dict[str, int] = {}
    if "pair" in settings:
        judged = bench.judge(
            pairs,
            lambda it: pair_requests(NAME, it, bench.images(it)),
            "self_enhancement pair",
            pair_counts,
            lambda it: {"setting": "pair"} | {k: getattr(it, k) for k in ("item_id", "names", "preferred")},
        )
        items_j, own_j = judged.items, [own_index[i] for i in judged.index]
        labelled = [(it.preferred, w) for it, w in zip(items_j, own_j) if it.preferred in ("A", "B")]
        human_rate = M.mean(p == "AB"[w] for p, w in labelled)
        mean_runs = bench.mean(lambda seed: pair_metrics(items_j, own_j, order_scores(judged, seed)))
        mean_runs["pair.self_preference"] = _diff(mean_runs.get("pair.own_win_rate_judge"), human_rate)
        metrics["pair.own_win_rate_human"] = human_rate
        metrics |= prefixed("mean", mean_runs)
        metrics["pair.parse_failure_rate"] = judged.parse_failure_rate
        counts |= {f"pair.{k}": v for k, v in sorted(pair_counts.items())}

    if "score" in settings:
        judged_s = bench.judge(
            score_items,
            lambda it: [it.request(NAME, bench.image(images.load(it.image, it.where)))],
            "self_enhancement score",
            score_counts,
            lambda it: {"setting": "score", "item_id": it.item_id, "name": it.names[0], "gt": it.gt},
        )
        items_s = judged_s.items
        is_own = [normalize_name(it.names[0]) in own for it in items_s]
        score_counts["own_items"] = sum(is_own)

        def score_run(seed: int) -> dict[str, float | None]:
            return score_metrics(
                items_s, is_own, [judged_s.scores(i, "main", seed) for i in range(len(items_s))]
            )

        metrics |= prefixed("mean", bench.mean(score_run))
        h_own, h_other = (
            M.mean(it.gt for it, o in zip(items_s, is_own) if o == flag) for flag in (True, False)
        )
        metrics["score.human_gap"] = _diff(h_own, h_other)
        metrics["score.parse_failure_rate"] = judged_s.parse_failure_rate
        counts |= {f"score.{k}": v for k, v in sorted(score_counts.items())}

    # bias magnitudes, for ranking judges
    for name in ("mean.pair.self_preference", "mean.score.gap_vs_human"):
        if name in metrics:
            metrics[f"{name}_abs"] = abs(metrics[name]) if metrics[name] is not None else None
    protocol = {
        "bias": "self-enhancement (protocol: ours, judge-benchmarks.md §5)",
        "own_model": sorted(own),
        "name_matching": "lower-cased, non-alphanumerics dropped, exact match against own_model aliases",
        **({"pair_source": pair_source} if pair_source else {}),
        **({"score_file": str(score_file)} if score_file else {}),
        "settings": settings,
        "prompts": {
            "pair": "perception_judge.core.protocol.build_messages('pair'), both orders",
            "score": "perception_judge.core.protocol.build_messages('single'), 1-10; ceil(s/2) against the human 1-5",
        },
        "ideal": "self_preference 0, acc_gap 0, score.gap_vs_human 0",
    }
    return bench.result(metrics, counts, protocol, "n/a (our protocol)")


PRIMARY = (
    "mean.pair.self_preference_abs",
    "mean.score.gap_vs_human_abs",
    "mean.*.self_preference",
    "mean.*.gap_vs_human",
)
SUITE = Suite(NAME, SelfEnhancementOptions, METRICS, PRIMARY, run)
