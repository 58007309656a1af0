"""MLLM-as-a-Judge (``Dongping-Chen/MLLM-Judge``): pair, score and batch settings from the benchmark's
``Dataset/Benchmark`` files, judged with our prompts or the published ones (``prompt_source``). Pair: A if s1 > s2,
B if s1 < s2, else C; score: a 1-10 prompt's ``ceil(s/2)`` onto the human 1-5 scale (Flex-Judge's prompt asks for
1-5: the score itself); batch: slots sorted by score, ties towards the later slot. Metrics are
``{aggregation}.{setting}.{metric}.{scope}``; files, metrics, aggregations: ``docs/benchmarks.md`` (MLLM-as-a-Judge).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import model_validator

from perception_judge.evaluation.base import PARSERS, JudgeBackend, Suite, SuiteConfig, SuiteResult
from perception_judge.evaluation.benchmarks import common
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks import pair_sources as S
from perception_judge.evaluation.benchmarks.pair_sources import Item
from perception_judge.evaluation.benchmarks.published import (
    DESCRIPTIONS,
    block_ints,
    published_ranking,
    request_parser,
    tag_ints,
)

NAME = "mllm_judge"
SETTINGS: tuple[str, ...] = ("pair", "score", "batch")
AGGREGATIONS = {
    "mean": "metrics per seed, then the mean over seeds (Perception-Judge protocol)",
    "vote": "per item over seeds: pair majority vote, score median, batch mean score per slot (failures "
    "abstain); then the metrics once",
    "flex": "replica of Flex-Judge test/evaluate.py: pair vote with failures as C; score Pearson on accumulated "
    "runs (failure -1, undefined r 0), median; batch distance on accumulated runs, max; headline = macro",
}


class MLLMJudgeOptions(common.BenchmarkOptions):
    """``data_dir``: the ``Benchmark`` folder; ``*_file`` override one setting's file each."""

    SUITE, SPLITS_KEY = NAME, "settings"
    settings: common.choices(SETTINGS) = SETTINGS
    pair_file: common.OptPath = None
    score_file: common.OptPath = None
    batch_file: common.OptPath = None
    aggregation: common.choices(tuple(AGGREGATIONS)) = ("mean",)

    @model_validator(mode="after")
    def _files(self) -> MLLMJudgeOptions:
        if self.data_dir is None and (
            s := next((s for s in self.settings if not getattr(self, f"{s}_file")), None)
        ):
            raise ValueError(f"set option 'data_dir' (the MLLM-Judge Dataset/Benchmark folder) or '{s}_file'")
        return self


PARSERS["protocol_1_5"] = lambda text, n, reasoning=None: (  # the strict reading of a 1-5 prompt: 6-10 fail
    (None, "score outside the prompt's 1-5")
    if (r := PARSERS["protocol"](text, n, reasoning))[0] and r[0][0] > 5
    else r
)


def prediction(setting: str, scores: list[float] | None, parser: str = "strict", half: bool = True) -> Any:
    """The prediction of one judgment from its parsed scores: a verdict (pair), a 1-5 score (score: ``ceil(s/2)``
    of a 1-10 prompt's when ``half``) or a ranking (batch); None on a parse failure or a missing judgment. Under
    ``parser="published"`` a score above 5 on the human scale is a failure, the Perception-Judge notebook's rule
    (score cell: ``pred_score = math.ceil(v[0]/2)``; ``if pred_score > 5: pred_score = -1``); 0 and other small
    values go through as they are."""
    if scores is None:
        return None
    if setting == "pair":
        return M.pair_verdict(scores[0], scores[1])
    if setting == "score":
        mapped = M.ceil_half(scores[0]) if half else scores[0]
        return None if parser == "published" and mapped > 5 else mapped
    return M.ranking_from_scores(scores)


PUBLISHED_RULES = {
    "notebook": "Perception-Judge eval/evaluate_metric.ipynb (the mean aggregation)",
    "flex": "Flex-Judge test/evaluate.py (the flex aggregation), a score mapped by ceil(s/2) onto Flex's 1-5 prompt",
    "flex_unmapped": "Flex-Judge test/evaluate.py as it stands: the score v[0] unmapped (score.pearson_unmapped)",
}


def published_prediction(setting: str, completion: str, gt: Any, rule: str, half: bool = True) -> Any:
    """The prediction a published script makes of one completion (None where it finds no answer):

    * pair (both rules; ``test/mllm_as_a_judge_vllm.py`` lines 153-159, the notebook's pair cell): the first two
      tag integers, A if s1 > s2, B if s1 < s2, else C; fewer than two is a failure (their ``except``: C);
    * score: the first tag integer ``v``, ``ceil(v/2)`` of a 1-10 prompt's (``half``); the
      notebook makes a value above 5 a failure (-1), Flex keeps it (``test/evaluate.py`` lines 98-100: ``v[0]``,
      no range check, so 11 gives 6); ``flex_unmapped`` is ``v`` itself, what the unmodified script reads;
    * batch (:func:`~perception_judge.evaluation.benchmarks.published.published_ranking`): the notebook ranks the
      first ``len(gt)`` integers inside the ``<answer>`` blocks, Flex **every** tag integer (lines 131-134: one
      tag too many gives a longer ranking); none is a failure (distance 1.0)."""
    if rule not in PUBLISHED_RULES:
        raise ValueError(f"rule must be one of {list(PUBLISHED_RULES)}, got {rule!r}")
    ints = tag_ints(completion)
    if setting == "pair":
        return M.pair_verdict(ints[0], ints[1]) if len(ints) >= 2 else None
    if setting == "score":
        first = ints[0] if ints else None
        if rule == "flex_unmapped":
            return first
        mapped = None if first is None else M.ceil_half(first) if half else first
        return None if rule == "notebook" and mapped is not None and mapped > 5 else mapped
    return published_ranking(block_ints(completion)[: len(gt)] if rule == "notebook" else ints) or None


def seed_predictions(
    setting: str, judged: common.Judged, seeds: list[int], parser: str, rule: str, half: bool = True
) -> list[list[Any]]:
    """Per seed, per judged item, the prediction: read from the completion by the published ``rule`` under
    ``parser="published"`` (:func:`published_prediction`), else from the parsed scores (:func:`prediction`; the
    first score itself for ``flex_unmapped``)."""

    def one(i: int, seed: int) -> Any:
        if parser == "published":
            text = judged.completion(i, "main", seed)
            return published_prediction(setting, text, judged.items[i].gt, rule, half)
        scores = judged.scores(i, "main", seed)
        return (scores or [None])[0] if rule == "flex_unmapped" else prediction(setting, scores, half=half)

    return [[one(i, s) for i in range(len(judged.items))] for s in seeds]


def _groups(items: list[Item]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, it in enumerate(items):
        out.setdefault(it.dataset, []).append(i)
    return dict(sorted(out.items()))


def _scoped(name: str, items: list[Item], fn: Callable[[list[int]], float | None]) -> dict[str, float | None]:
    """``fn(indices) -> value`` evaluated on all items (micro), per subset, and their macro mean."""
    per = {ds: fn(idx) for ds, idx in _groups(items).items()}
    return {
        f"{name}.micro": fn(list(range(len(items)))),
        f"{name}.macro": M.mean(per.values()),
        **{f"{name}.by_dataset.{common.slug(ds)}": v for ds, v in per.items()},
    }


def run_metrics(setting: str, items: list[Item], preds: list[Any]) -> dict[str, float | None]:
    """Metrics of one run (one seed, or the voted predictions) of one setting."""
    gts = [it.gt for it in items]

    def acc(idx: list[int], with_tie: bool, failure: str) -> float | None:
        return M.pair_accuracy(
            [preds[i] for i in idx], [gts[i] for i in idx], with_tie=with_tie, failure=failure
        )

    def pearson(idx: list[int], failed: float | None) -> float | None:
        pairs = [(preds[i] if preds[i] is not None else failed, gts[i]) for i in idx]
        kept = [(float(p), float(g)) for p, g in pairs if p is not None]
        return M.pearson([p for p, _ in kept], [g for _, g in kept])

    def distance(idx: list[int], parsed_only: bool) -> float | None:
        kept = [i for i in idx if not (parsed_only and preds[i] is None)]
        return M.mean(M.normalized_levenshtein(preds[i] or "", gts[i]) for i in kept)

    variants = {
        "pair": [
            ("acc_with_tie", acc, (True, "wrong")),
            ("acc_with_tie_compat", acc, (True, "tie")),
            ("acc_without_tie", acc, (False, "wrong")),
        ],
        "score": [("pearson", pearson, (None,)), ("pearson_compat", pearson, (-1.0,))],
        "batch": [("norm_levenshtein", distance, (False,)), ("norm_levenshtein_parsed", distance, (True,))],
    }[setting]
    out: dict[str, float | None] = {}
    for name, fn, args in variants:
        out |= _scoped(f"{setting}.{name}", items, lambda idx, fn=fn, args=args: fn(idx, *args))
    return out


def voted_predictions(
    setting: str, per_seed: list[list[list[float] | None]], parser: str = "strict", half: bool = True
) -> list[Any]:
    """Item-level combination over seeds (failures abstain; None when every seed failed): pair majority vote,
    score median, batch the ranking of the mean score per slot."""
    out: list[Any] = []
    for i in range(len(per_seed[0]) if per_seed else 0):
        parsed = [run[i] for run in per_seed if run[i] is not None]
        if setting == "pair":
            out.append(M.vote_verdict(prediction("pair", s) for s in parsed))
        elif setting == "score":
            out.append(M.median(prediction("score", s, parser, half) for s in parsed))  # median skips None
        elif parsed:
            k = min(len(s) for s in parsed)  # published batch rankings can be shorter
            out.append(M.ranking_from_scores([sum(s[j] for s in parsed) / len(parsed) for j in range(k)]))
        else:
            out.append(None)
    return out


def flex_metrics(
    setting: str, items: list[Item], preds: list[list[Any]], score_name: str = "score.pearson"
) -> dict[str, float | None]:
    """Flex-Judge's ``test/evaluate.py`` aggregation of per-seed predictions ``preds[seed][item]`` (read by
    :func:`published_prediction` with ``rule="flex"`` under ``parser=published``): pair vote with failures as C,
    each subset rounded to 3 decimals before their mean ("Ave"); score Pearson on the runs' accumulated lists
    (failure -1), median (named ``score_name``); batch mean distance on accumulated runs, maximum; each "Ave"
    rounded to 3 decimals."""
    gts = [it.gt for it in items]
    out: dict[str, float | None] = {}
    if setting == "pair":
        voted = [M.vote_verdict((run[i] or "C") for run in preds) for i in range(len(items))]
        for name, with_tie in (("acc_with_tie", True), ("acc_without_tie", False)):

            def acc(idx: list[int], w: bool = with_tie) -> float | None:
                return M.pair_accuracy(
                    [voted[i] for i in idx], [gts[i] for i in idx], with_tie=w, failure="tie"
                )

            scoped = _scoped(f"pair.{name}", items, acc)
            per = {k: _round3(v) for k, v in scoped.items() if ".by_dataset." in k}
            out |= scoped | per | {f"pair.{name}.macro": _round3(M.mean(per.values()))}
        return out
    if setting == "score":
        name = score_name

        def subset(idx: list[int]) -> float | None:
            runs = [[float(run[i]) if run[i] is not None else -1.0 for i in idx] for run in preds]
            return M.flex_score_pearson(runs, [float(gts[i]) for i in idx])

    else:
        name = "batch.norm_levenshtein"

        def subset(idx: list[int]) -> float | None:
            return M.flex_batch_distance(
                [[M.normalized_levenshtein(run[i] or "", gts[i]) for i in idx] for run in preds]
            )

    per = {ds: subset(idx) for ds, idx in _groups(items).items()}
    # the script averages the unrounded subsets, then rounds "Ave"
    out[f"{name}.macro"] = _round3(M.mean(per.values()))
    return out | {f"{name}.by_dataset.{common.slug(ds)}": _round3(v) for ds, v in per.items()}


def _round3(value: float | None) -> float | None:
    """Flex-Judge's printed precision: ``round(x, 3)`` (None stays None)."""
    return None if value is None else round(value, 3)


def aggregated(
    agg: str, setting: str, bench: common.BenchmarkRun, judged: common.Judged, half: bool = True
) -> dict[str, float | None]:
    """One aggregation's metrics of one setting (:data:`AGGREGATIONS`): ``mean`` on the notebook's reading,
    ``vote`` on the parsed scores, ``flex`` on Flex-Judge's (with ``score.pearson_unmapped`` beside the score; equal
    to it on a 1-5 prompt, ``half`` False)."""
    kept, parser = judged.items, bench.opts.parser
    if agg == "mean":
        runs = seed_predictions(setting, judged, bench.seeds, parser, "notebook", half)
        return bench.mean(lambda s: run_metrics(setting, kept, runs[bench.seeds.index(s)]))
    if agg == "vote":
        per_seed = [[judged.scores(i, "main", s) for i in range(len(kept))] for s in bench.seeds]
        return run_metrics(setting, kept, voted_predictions(setting, per_seed, parser, half))
    result = flex_metrics(setting, kept, seed_predictions(setting, judged, bench.seeds, parser, "flex", half))
    if setting == "score":  # the unmodified script's own number: v[0] of the 1-10 answer, unmapped
        raw = seed_predictions(setting, judged, bench.seeds, parser, "flex_unmapped")
        result |= flex_metrics(setting, kept, raw, "score.pearson_unmapped")
    return result


def run(backend: JudgeBackend, config: SuiteConfig) -> SuiteResult:
    bench = common.BenchmarkRun(NAME, backend, config)
    opts = bench.opts
    files = {s: S.setting_file(s, getattr(opts, f"{s}_file"), opts.data_dir) for s in opts.settings}
    images = S.image_source(opts.images_dir, list(files.values()), opts.missing_images)
    # read every file and find every image before any judging
    loaded = {s: S.checked_items(s, files[s], images, config.limit) for s in opts.settings}
    metrics: dict[str, float | None] = {}
    counts: dict[str, int] = {}
    for setting, (items, set_counts) in loaded.items():
        prompt, parser = bench.prompts.get(setting), request_parser(opts.parser, prefix=setting == "batch")
        half = prompt is None or prompt.scale != (1, 5)  # ceil(s/2) onto the human 1-5 unless asked for 1-5
        parser = "protocol_1_5" if parser == "protocol" and not half else parser
        judged = bench.judge(
            items,
            lambda it, parser=parser, prompt=prompt: [
                it.request(NAME, bench.image(images.load(it.image, it.where)), parser, prompt)
            ],
            f"mllm_judge {setting}",
            set_counts,
            lambda it: {k: getattr(it, k) for k in ("setting", "item_id", "row", "dataset", "gt")},
        )
        kept = judged.items
        per_seed = [[judged.scores(i, "main", s) for i in range(len(kept))] for s in bench.seeds]
        metrics[f"{setting}.parse_failure_rate"] = judged.parse_failure_rate
        if setting == "batch":
            tied = sum(1 for run in per_seed for s in run if s and len(set(s)) != len(s))
            metrics["batch.tied_scores_rate"] = M.rate(tied, set_counts.get("judgments", 0))
        for agg in opts.aggregation:
            metrics |= common.prefixed(agg, aggregated(agg, setting, bench, judged, half))
        counts |= {f"{setting}.{k}": v for k, v in sorted(set_counts.items())}

    protocol = {
        "benchmark": "MLLM-as-a-Judge (Dongping-Chen/MLLM-Judge, Dataset/Benchmark)",
        "files": {s: str(p) for s, p in files.items()},
        "parser": DESCRIPTIONS[opts.parser],
        "pair_verdict": "A if s1 > s2, B if s1 < s2, else C",
        "score_mapping": "none: the published prompt asks for 1-5 (6-10 a failure under the strict parser)"
        if "score" in bench.prompts and bench.prompts["score"].scale == (1, 5)
        else "ceil(s/2): judge 1-10 onto the human 1-5 scale",
        "batch_prediction": "slots sorted by score, highest first; equal scores: the later slot first",
        "batch_gt_field": "human or human_answer; records with no ranking or <= 2 letters skipped",
        "scopes": "micro = pooled over all items; macro = unweighted mean over original_dataset subsets",
        "failures": (
            "published: mean (the Perception-Judge notebook) makes a score with ceil(s/2) > 5 a failure and ranks the "
            "first len(gt) integers of the <answer> blocks; flex (Flex-Judge test/evaluate.py) keeps any score "
            "(11 -> 6) and ranks every tag, even one too many; "
            if opts.parser == "published"
            else ""
        )
        + "strict metrics count a parse failure as wrong (pair) / excluded (pearson) / 1.0 (batch); "
        "*_compat metrics treat it as the published evaluators do (C / -1)",
        "aggregation": {a: AGGREGATIONS[a] for a in opts.aggregation},
    }
    return bench.result(metrics, counts, protocol, "448x448 square, aspect ignored", published_sampling=True)


PRIMARY = ("*.pair.acc_without_tie.micro", "*.pair.acc_without_tie.macro", "*.pair.acc_with_tie.micro", *(
    f"*.{name}.{scope}" for name in ("score.pearson_compat", "batch.norm_levenshtein") for scope in ("micro", "macro")
), "flex.*.macro")  # fmt: skip
"""Each setting's headline, then Flex-Judge Table 1's numbers; the first reported one (the first aggregation's)
ranks models."""
SUITE = Suite(NAME, MLLMJudgeOptions, M.METRICS, PRIMARY, run)
