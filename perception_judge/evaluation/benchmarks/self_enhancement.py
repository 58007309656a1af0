"""Self-enhancement bias: does the judge favour responses written by its own model? (protocol: ours,
judge-benchmarks.md §5; no reference implementation exists). Option ``own_model`` names the judge's model as the
candidates' name fields do; settings ``pair`` (pairs with exactly one own response, both orders) and ``score``
(MLLM-as-a-Judge ``score.jsonl``). Details: ``docs/benchmarks.md`` (self-enhancement).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, model_validator

from perception_judge.core.options import CommaList
from perception_judge.evaluation import base
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks import pair_sources as S
from perception_judge.evaluation.benchmarks import pairs
from perception_judge.evaluation.benchmarks.common import BenchmarkRun, OptPath, choices, prefixed

NAME = "self_enhancement"
SETTINGS: tuple[str, ...] = ("pair", "score")
METRICS: dict[str, base.Metric] = {
    **M.METRICS,
    "self_preference_abs": base.LOWER,
    "gap_vs_human_abs": base.LOWER,
    **dict.fromkeys(
        ("self_preference", "mean_score_gap", "acc_gap", "gap", "gap_vs_human"), base.Metric(None, ideal=0.0)
    ),
    **dict.fromkeys(("acc_own_preferred", "acc_other_preferred"), base.Metric()),
    **dict.fromkeys(
        ("own_win_rate_human", "own_win_rate_judge", "mean_own", "mean_other", "human_gap"), base.INFO
    ),
}


def _some_name(names: list[str]) -> list[str]:
    if not {normalize_name(n) for n in names} - {""}:
        raise ValueError(
            "needs the judge's own model name as it appears in the candidates' name fields (e.g. --set "
            "self_enhancement.own_model=gpt4v)"
        )
    return names


class SelfEnhancementOptions(S.PairSourceOptions):
    own_model: Annotated[CommaList, AfterValidator(_some_name)] = ()
    settings: choices(SETTINGS) | None = None
    score_file: OptPath = None

    def chosen(self) -> list[str]:
        """The settings judged: ``settings``, else both for an MLLM-as-a-Judge source, else pair."""
        return self.settings or (list(SETTINGS) if S.infer_source(self) == "mllm_judge" else ["pair"])

    def uses_pairs(self) -> bool:
        return "pair" in (self.settings or ["pair"])

    @model_validator(mode="after")
    def _score_file(self) -> SelfEnhancementOptions:
        if "score" in self.chosen() and not (self.score_file or self.data_dir):
            raise ValueError("the score setting needs the option score_file or data_dir (a path)")
        return self


def normalize_name(name: Any) -> str:
    return re.sub(r"[^a-z0-9]+", "", str(name).lower()) if name is not None else ""


def _diff(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


def pair_metrics(
    items: list[pairs.PairItem], own: list[int], scores: list[dict[str, list[float] | None]]
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
        for order in pairs.ORDERS:
            v = pairs.response_verdict(per_order[order], order)
            if v in ("A", "B"):
                wins.append(v == own_letter)
            s = pairs.response_scores(per_order[order], order)
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
    items: list[S.Item], is_own: list[bool], scores: list[list[float] | None]
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


def _own_pairs(
    items: list[pairs.PairItem], own: set[str]
) -> tuple[list[pairs.PairItem], list[int], dict[str, int]]:
    """The pairs with exactly one own response, the index of that response, and counts of the others."""
    kept: list[pairs.PairItem] = []
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


def _pair_setting(bench: BenchmarkRun, own: set[str]) -> tuple[dict, dict, dict]:
    """The pair setting's metrics and counts, and its source."""
    all_pairs, source = S.load_pair_source(bench.opts, None)
    kept, own_index, counts = _own_pairs(all_pairs, own)
    kept, own_index = kept[: bench.config.limit], own_index[: bench.config.limit]
    fields = ("item_id", "names", "preferred")
    judged = bench.judge(
        kept, lambda it: pairs.pair_requests(NAME, it, bench.images(it)), "self_enhancement pair", counts,
        lambda it: {"setting": "pair"} | {k: getattr(it, k) for k in fields},
    )  # fmt: skip
    items, own_j = judged.items, [own_index[i] for i in judged.index]
    labelled = [(it.preferred, w) for it, w in zip(items, own_j) if it.preferred in ("A", "B")]
    human_rate = M.mean(p == "AB"[w] for p, w in labelled)
    mean_runs = bench.mean(lambda seed: pair_metrics(items, own_j, pairs.order_scores(judged, seed)))
    mean_runs["pair.self_preference"] = _diff(mean_runs.get("pair.own_win_rate_judge"), human_rate)
    metrics = {"pair.own_win_rate_human": human_rate, **prefixed("mean", mean_runs)}
    metrics["pair.parse_failure_rate"] = judged.parse_failure_rate
    return metrics, {f"pair.{k}": v for k, v in sorted(counts.items())}, {"pair_source": source}


def _score_setting(bench: BenchmarkRun, own: set[str]) -> tuple[dict, dict, dict]:
    """The score setting's metrics and counts, and its file."""
    opts = bench.opts
    file = S.setting_file("score", opts.score_file, opts.data_dir)
    images = S.image_source(opts.images_dir, [file], opts.missing_images)
    items, counts = S.checked_items("score", file, images, bench.config.limit)
    judged = bench.judge(
        items, lambda it: [it.request(NAME, bench.image(images.load(it.image, it.where)))], "self_enhancement score",
        counts, lambda it: {"setting": "score", "item_id": it.item_id, "name": it.names[0], "gt": it.gt},
    )  # fmt: skip
    items = judged.items
    is_own = [normalize_name(it.names[0]) in own for it in items]
    counts["own_items"] = sum(is_own)
    scores = [[judged.scores(i, "main", seed) for i in range(len(items))] for seed in bench.seeds]
    by_seed = dict(zip(bench.seeds, scores))
    metrics = prefixed("mean", bench.mean(lambda seed: score_metrics(items, is_own, by_seed[seed])))
    h_own, h_other = (M.mean(it.gt for it, o in zip(items, is_own) if o == flag) for flag in (True, False))
    metrics |= {
        "score.human_gap": _diff(h_own, h_other),
        "score.parse_failure_rate": judged.parse_failure_rate,
    }
    return metrics, {f"score.{k}": v for k, v in sorted(counts.items())}, {"score_file": str(file)}


def run(backend: base.JudgeBackend, config: base.SuiteConfig) -> base.SuiteResult:
    bench = BenchmarkRun(NAME, backend, config)
    own = {normalize_name(n) for n in bench.opts.own_model}
    settings = bench.opts.chosen()
    metrics: dict[str, float | None] = {}
    counts: dict[str, int] = {}
    protocol: dict[str, Any] = {
        "bias": "self-enhancement (protocol: ours, judge-benchmarks.md §5)",
        "own_model": sorted(own),
        "name_matching": "lower-cased, non-alphanumerics dropped, exact match against own_model aliases",
    }
    for setting, judge in (("pair", _pair_setting), ("score", _score_setting)):
        if setting in settings:
            m, c, source = judge(bench, own)
            metrics, counts, protocol = metrics | m, counts | c, protocol | source
    for name in ("mean.pair.self_preference", "mean.score.gap_vs_human"):  # bias magnitudes, to rank judges
        if name in metrics:
            metrics[f"{name}_abs"] = abs(metrics[name]) if metrics[name] is not None else None
    protocol["settings"] = settings
    protocol["prompts"] = {
        "pair": "perception_judge.core.protocol.build_messages('pair'), both orders",
        "score": "perception_judge.core.protocol.build_messages('single'), 1-10; ceil(s/2) against the human 1-5",
    }
    protocol["ideal"] = "self_preference 0, acc_gap 0, score.gap_vs_human 0"
    return bench.result(metrics, counts, protocol, "n/a (our protocol)")


PRIMARY = (
    "mean.pair.self_preference_abs",
    "mean.score.gap_vs_human_abs",
    "mean.*.self_preference",
    "mean.pair.mean_score_gap",
    "mean.*.gap_vs_human",
)
SUITE = base.Suite(NAME, SelfEnhancementOptions, METRICS, PRIMARY, run)
