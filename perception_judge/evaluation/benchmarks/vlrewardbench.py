"""VL-RewardBench (HF ``MMInstruction/VL-RewardBench``, split ``test``): each pair judged in **both orders** with our
pair prompt, a tie or a parse failure wrong; ``official.*`` is the benchmark's ``cal.py`` on every judgement, also
written in its input layout (:mod:`~perception_judge.evaluation.benchmarks.vlrb_cal`). ``docs/benchmarks.md``.
"""

from __future__ import annotations

from pathlib import Path

from perception_judge.evaluation.base import JudgeBackend, Suite, SuiteConfig, SuiteResult, write_samples
from perception_judge.evaluation.benchmarks import common, pairs
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks.pair_sources import vlrewardbench_items
from perception_judge.evaluation.benchmarks.published import DESCRIPTIONS, request_parser
from perception_judge.evaluation.benchmarks.vlrb_cal import RULE, cal_py_stops, cal_records, official_metrics

NAME = "vlrewardbench"


class VLRewardBenchOptions(common.BenchmarkOptions):
    SUITE = NAME
    data_dir: common.DataPath
    split: str = "test"


def run(backend: JudgeBackend, config: SuiteConfig) -> SuiteResult:
    bench = common.BenchmarkRun(NAME, backend, config)
    opts = bench.opts
    items, counts, path = vlrewardbench_items(opts.data_dir, opts.split, opts.images_dir, opts.missing_images)
    items = items[: config.limit]  # a None limit keeps everything
    for item in items:
        item.check_images()
    render = bench.prompts[""].render if bench.prompts else None  # Flex-Judge's, verbatim (its copy slip too)
    parser = request_parser(opts.parser)
    judged = bench.judge(
        items,
        lambda it: pairs.pair_requests(NAME, it, bench.images(it), parser=parser, render=render),
        "vlrewardbench",
        counts,
        lambda it: {"item_id": it.item_id, "category": it.group, "preferred": it.preferred},
    )
    metrics, per_seed = pairs.aggregated(bench, judged)
    records = cal_records(judged.items, per_seed)
    cal_path = Path(config.out_dir) / f"{NAME}.cal.jsonl"
    write_samples(cal_path, records)
    official, undefined = official_metrics(records)
    metrics |= common.prefixed("official", official)
    protocol = {
        "benchmark": "VL-RewardBench (MMInstruction/VL-RewardBench)",
        "path": str(path),
        "split": opts.split,
        "orders": "every pair judged in both orders; the swapped verdict un-swapped (Flex-Judge swaps at random, "
        "p=0.5: the same expectation)",
        "parser": DESCRIPTIONS[opts.parser],
        "correct": "the preferred response equals the human's (human_ranking); a tie or a parse failure is wrong",
        "category": "explicit 'category' field, else the id prefix mapped as in lmms-eval (unknown -> general)",
        "macro": "unweighted mean over general / hallucination / reasoning",
        "official_rule": RULE,
        "official": {
            "metrics": "official.acc (Overall), official.acc.macro, official.acc.by_category.<group>, official.n "
            "(decided items), official.n_undecided; every judgement of this call (seeds x orders) is one vote",
            "file": str(cal_path),
            "cal_py": cal_py_stops(records)
            or "the unmodified cal.py prints these numbers on the file (its k=9 lines when an item has at most 9 "
            "judgements)",
            "category": "cal.py's own source rule on the id (case-sensitive prefix), not the 'category' field",
        },
        "undefined_metrics": common.prefixed("official", undefined),
        "published_protocol": "Flex-Judge: temperature 0.6, top_p 0.95, response order swapped at random (p=0.5), "
        "image not resized; its system prompt (prompt_source) is sent verbatim, its copy slip too",
    }
    return bench.result(metrics, counts, protocol, "not resized")


PRIMARY = ("*.acc", "*.acc.macro", "official.acc.by_category.*", "official.n")
"""Accuracy and its macro over the three groups (each aggregation's, then cal.py's) and cal.py's groups; the first
aggregation's accuracy ranks models."""
SUITE = Suite(NAME, VLRewardBenchOptions, M.METRICS, PRIMARY, run)
