"""VL-RewardBench (HF ``MMInstruction/VL-RewardBench``, split ``test``): each pair judged in **both orders** with our
pair prompt, a tie or a parse failure wrong; ``official.*`` is the benchmark's ``cal.py`` on every judgement, also
written in its input layout (:mod:`~perception_judge.evaluation.benchmarks.vlrb_cal`). ``docs/benchmarks.md``.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from perception_judge.evaluation.base import JudgeBackend, Suite, SuiteConfig, SuiteResult, write_samples
from perception_judge.evaluation.benchmarks import common, pairs
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks.published import DESCRIPTIONS, request_parser
from perception_judge.evaluation.benchmarks.vlrb_cal import RULE, cal_py_stops, cal_records, official_metrics

NAME = "vlrewardbench"
CATEGORIES: tuple[str, ...] = ("general", "hallucination", "reasoning")
CATEGORY_BY_PREFIX: dict[str, str] = {
    "mathverse": "reasoning",
    "mmmu": "reasoning",
    "hallucination": "hallucination",
    "rlhf": "hallucination",
    "rlaif": "hallucination",
    "wildvision": "general",
    "vlfeedback": "general",
}
"""The id prefixes of lmms-eval's VL-RewardBench task; any other prefix is ``general``."""
_TEXT_COLUMNS = ("id", "query", "question", "response", "responses", "human_ranking", "models", "category")


class VLRewardBenchOptions(common.BenchmarkOptions):
    data_dir: common.DataPath
    split: str = "test"


def category_of(record: dict[str, Any]) -> tuple[str, bool]:
    """(category, defaulted): an explicit ``category`` field, else the mapped id prefix, else "general"."""
    explicit = record.get("category")
    if isinstance(explicit, str) and explicit.strip().lower() in CATEGORIES:
        return explicit.strip().lower(), False
    prefix = str(record.get("id") or "").split("-")[0].split("_")[0].lower()
    return CATEGORY_BY_PREFIX.get(prefix, "general"), prefix not in CATEGORY_BY_PREFIX


def preferred_from_ranking(ranking: Any) -> str | None:
    """``[0, 1]`` → "A" (response 0 better), ``[1, 0]`` → "B"; None when absent or equal."""
    if not isinstance(ranking, list | tuple) or len(ranking) != 2:
        return None
    try:
        r0, r1 = float(ranking[0]), float(ranking[1])
    except (TypeError, ValueError):
        return None
    return "A" if r0 < r1 else "B" if r1 < r0 else None


def load_items(
    path: Path, split: str, images_dir: Path | None, missing_images: str
) -> tuple[list[pairs.PairItem], dict[str, int], Path]:
    """The benchmark's pairs (images loaded lazily), counts of the rows left out or adjusted, and the data path."""
    table = common.load_table(path, split, "VL-RewardBench")
    image_col = next((c for c in ("image", "image_path") if c in table.columns), None)
    if image_col is None:
        raise common.BenchmarkDataError(f"VL-RewardBench: {str(table.path)!r} has no 'image' column")
    images = common.TableImages(table, [image_col], images_dir, missing_images, "VL-RewardBench image")
    items: list[pairs.PairItem] = []
    counts = {"rows": len(table), "skipped_no_gt": 0, "category_defaulted": 0, "duplicate_ids": 0}
    seen_ids: set[str] = set()
    for i, rec in enumerate(table.view(_TEXT_COLUMNS)):
        where = f"{table.path} row {i}"
        question = common.first_field(rec, ("query", "question"))
        responses = common.first_field(rec, ("response", "responses"))
        if not isinstance(question, str):
            raise common.BenchmarkDataError(f"VL-RewardBench: {where}: no 'query' text")
        if not common.two_texts(responses):
            raise common.BenchmarkDataError(f"VL-RewardBench: {where}: 'response' must hold two strings")
        preferred = preferred_from_ranking(rec.get("human_ranking"))
        if preferred is None:
            counts["skipped_no_gt"] += 1
            continue
        group, defaulted = category_of(rec)
        counts["category_defaulted"] += defaulted
        models = rec.get("models")
        names = [str(m) for m in models] if isinstance(models, list) and len(models) == 2 else [None, None]
        record_id = str(rec.get("id") if rec.get("id") is not None else i)
        # the hub release has rows that share an id: the row index keeps their requests apart
        counts["duplicate_ids"] += record_id in seen_ids
        item_id = f"{record_id}#row{i}" if record_id in seen_ids else record_id
        seen_ids.add(item_id)
        load, check = (functools.partial(f, i, where) for f in (images.load, images.check))
        item = pairs.PairItem(
            item_id, question, list(responses), preferred, group, names, record_id, load, check
        )
        items.append(item)
    return items, counts, table.path


def run(backend: JudgeBackend, config: SuiteConfig) -> SuiteResult:
    bench = common.BenchmarkRun(NAME, backend, config)
    opts = bench.opts
    items, counts, path = load_items(opts.data_dir, opts.split, opts.images_dir, opts.missing_images)
    items = items[: config.limit]  # a None limit keeps everything
    for item in items:
        item.check_images()
    judged = bench.judge(
        items,
        lambda it: pairs.pair_requests(NAME, it, bench.images(it), parser=request_parser(opts.parser)),
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
        "prompt": "perception_judge.core.protocol.build_messages('pair'), one image, two 1-10 scores",
        "orders": "every pair judged in both orders; the swapped verdict un-swapped",
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
        "image not resized",
    }
    return bench.result(metrics, counts, protocol, "not resized")


PRIMARY = ("*.acc", "*.acc.macro", "official.acc.by_category.*", "official.n")
"""Accuracy and its macro over the three groups (each aggregation's, then cal.py's) and cal.py's groups; the first
aggregation's accuracy ranks models."""
SUITE = Suite(NAME, VLRewardBenchOptions, M.METRICS, PRIMARY, run)
