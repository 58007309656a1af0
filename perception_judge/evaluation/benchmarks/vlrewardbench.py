"""VL-RewardBench (HF ``MMInstruction/VL-RewardBench``, split ``test``): image-question pairs with a human
preference between two responses (the paper says 1,250; the hub release has 1,247 rows, some sharing an id: the
suite counts what it finds, ``rows``, ``skipped_no_gt`` and ``duplicate_ids``, and every metric carries its n).

Data (option ``data_dir``): a ``datasets`` folder (``save_to_disk``, a Dataset or a DatasetDict → ``split``,
default ``test``), a parquet / JSONL file, or a folder with ``test.parquet``, ``test.jsonl`` or hub-layout
shards ``data/test-*.parquet``. Fields:

* ``query`` (or ``question``) — the question;
* ``response`` (or ``responses``) — two response strings;
* ``human_ranking`` — the rank of each response, lower is better: ``[0, 1]`` = response 0 is better,
  ``[1, 0]`` = response 1 is better (rows with equal or missing ranks are skipped and counted);
* ``image`` — an image cell (PIL / ``{bytes, path}``) or a path under ``images_dir`` (default: the data
  folder); ``image_path`` is accepted too;
* ``id`` — gives the **category** (unless a ``category`` field in {general, hallucination, reasoning} is
  present): the id's prefix before the first ``-`` then ``_``, lower-cased, mapped as in lmms-eval's
  VL-RewardBench task: mathverse, mmmu → reasoning; hallucination, rlhf, rlaif → hallucination; wildvision,
  vlfeedback → general; any other prefix → general (counted as ``category_defaulted``);
* ``models`` (optional) — the two responses' model names.

Protocol (ours; Flex-Judge leaves the metric unimplemented): our pair prompt, one image, two 1-10 scores.
Every pair is judged in **both orders** (Flex swaps at random with p = 0.5; both orders give that procedure's
expected accuracy without its variance), the swapped verdict is un-swapped, and a judgment is correct iff its
preferred response is the human's: a **tie is always wrong**, a parse failure too (reported separately as
``parse_failure_rate``). Option ``parser``: ``strict`` (default, the project's parser) or ``published`` (the
Flex-Judge script's reading, :mod:`~perception_judge.evaluation.benchmarks.published`: the first two
``<answer>`` integers anywhere in the completion, out-of-range values kept; fewer than two is a tie, ``[0, 0]``).

Metrics (``{aggregation}.`` prefix): ``acc`` — overall accuracy over all judgments (headline, comparable with
Flex's "Overall"); ``acc.macro`` — the mean over general / hallucination / reasoning (Flex's "Macro");
``acc.by_category.<c>``; ``acc_orig_order``, ``acc_swapped_order``, ``acc_both_orders``; ``order_consistency``
(same verdict after un-swapping, failures excluded); ``pred_tie_rate``. ``vote`` combines each pair's verdicts
over seeds × orders by majority (failures abstain) before scoring.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perception_judge.evaluation.base import JudgeBackend, SuiteConfig, SuiteResult
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks.common import (
    BenchmarkDataError,
    ImageSource,
    SampleWriter,
    aggregation_note,
    aggregations,
    check_known_options,
    first_field,
    judge_items,
    judge_protocol,
    judged_items,
    load_table,
    mean_over_runs,
    opt,
    opt_int,
    opt_path,
    parse_failure_rate,
    prefixed,
    prepare_image,
    suite_result,
    suite_seeds,
)
from perception_judge.evaluation.benchmarks.pairs import (
    ORIG,
    SWAP,
    PairItem,
    official_acc,
    order_metrics,
    order_verdicts,
    pair_requests,
    voted_acc,
    voted_verdicts,
)
from perception_judge.evaluation.benchmarks.published import DESCRIPTIONS, parser_option, request_parser

SUITE = "vlrewardbench"
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
OPTIONS = (
    "data_dir",
    "split",
    "images_dir",
    "aggregation",
    "chunk_size",
    "seeds",
    "image_size",
    "missing_images",
    "parser",
)
_TEXT_COLUMNS = ("id", "query", "question", "response", "responses", "human_ranking", "models", "category")
_IMAGE_COLUMNS = ("image", "image_path")


def category_of(record: dict[str, Any]) -> tuple[str, bool]:
    """(category, defaulted): an explicit ``category`` field, else the mapped id prefix, else "general"."""
    explicit = record.get("category")
    if isinstance(explicit, str) and explicit.strip().lower() in CATEGORIES:
        return explicit.strip().lower(), False
    prefix = str(record.get("id") or "").split("-")[0].split("_")[0].lower()
    if prefix in CATEGORY_BY_PREFIX:
        return CATEGORY_BY_PREFIX[prefix], False
    return "general", True


def preferred_from_ranking(ranking: Any) -> str | None:
    """``[0, 1]`` → "A" (response 0 better), ``[1, 0]`` → "B"; None when absent or equal."""
    if not isinstance(ranking, list | tuple) or len(ranking) != 2:
        return None
    try:
        r0, r1 = float(ranking[0]), float(ranking[1])
    except (TypeError, ValueError):
        return None
    return "A" if r0 < r1 else "B" if r1 < r0 else None


def load_items(options: dict[str, Any], suite: str = SUITE) -> tuple[list[PairItem], dict[str, int], Path]:
    """The benchmark's pairs (images loaded lazily), counts of skipped rows, and the data path."""
    path = opt_path(options, "data_dir", suite=suite)
    split = str(opt(options, "split", "test"))
    table = load_table(path, split, "VL-RewardBench")  # type: ignore[arg-type]
    image_col = next((c for c in _IMAGE_COLUMNS if c in table.columns), None)
    if image_col is None:
        raise BenchmarkDataError(f"VL-RewardBench: {str(table.path)!r} has no 'image' column", table.path)
    text_rows = table.view(_TEXT_COLUMNS)
    image_rows = table.view([image_col])
    base = table.path if table.path.is_dir() else table.path.parent
    images = ImageSource(
        [opt_path(options, "images_dir", required=False) or base],
        opt(options, "missing_images", "error"),
        "VL-RewardBench image",
    )
    paths = table.holds_paths(image_col)  # path cells are checked before judging (inline images need not be)
    items: list[PairItem] = []
    counts = {"rows": len(table), "skipped_no_gt": 0, "category_defaulted": 0, "duplicate_ids": 0}
    seen_ids: set[str] = set()
    for i in range(len(text_rows)):
        rec = text_rows[i]
        where = f"{table.path} row {i}"
        question = first_field(rec, ("query", "question"))
        responses = first_field(rec, ("response", "responses"))
        if not isinstance(question, str):
            raise BenchmarkDataError(f"VL-RewardBench: {where}: no 'query' text", table.path)
        if (
            not isinstance(responses, list)
            or len(responses) != 2
            or not all(isinstance(r, str) for r in responses)
        ):
            raise BenchmarkDataError(f"VL-RewardBench: {where}: 'response' must hold two strings", table.path)
        preferred = preferred_from_ranking(rec.get("human_ranking"))
        if preferred is None:
            counts["skipped_no_gt"] += 1
            continue
        category, defaulted = category_of(rec)
        counts["category_defaulted"] += defaulted
        models = rec.get("models")
        names = (
            [str(m) for m in models][:2] if isinstance(models, list) and len(models) == 2 else [None, None]
        )
        item_id = str(rec.get("id") if rec.get("id") is not None else i)
        if (
            item_id in seen_ids
        ):  # the hub release has rows that share an id: the row index keeps requests apart
            counts["duplicate_ids"] += 1
            item_id = f"{item_id}#row{i}"
        seen_ids.add(item_id)
        items.append(
            PairItem(
                item_id=item_id,
                question=question,
                responses=list(responses),
                preferred=preferred,
                group=category,
                names=names,
                load_images=lambda i=i, where=where: [images.load(image_rows[i][image_col], where)],
                check_images=(lambda i=i, where=where: images.check(image_rows[i][image_col], where))
                if paths
                else (lambda: None),
                meta={"row": i},
            )
        )
    return items, counts, table.path


def run(backend: JudgeBackend, config: SuiteConfig) -> SuiteResult:
    options = dict(config.options)
    check_known_options(options, OPTIONS, SUITE)
    aggs = aggregations(options, ("mean", "vote"))
    batch_size = opt_int(options, "chunk_size", 64) or 64
    image_size = opt_int(options, "image_size", None)
    seeds = suite_seeds(options, config)
    parser = parser_option(options, SUITE)
    items, counts, path = load_items(options)
    if config.limit is not None:
        items = items[: config.limit]
    for item in items:
        item.check_images()

    with SampleWriter(config.out_dir, SUITE) as writer:
        outcomes = judge_items(
            backend,
            items,
            lambda it: pair_requests(
                it,
                SUITE,
                prepare=lambda im: prepare_image(im, backend, image_size),
                parser=request_parser(parser),
            ),
            seeds=seeds,
            sampling=config.sampling,
            batch_size=batch_size,
            writer=writer,
            counts=counts,
            desc="vlrewardbench",
            log_fields=lambda it: {"item_id": it.item_id, "category": it.group, "preferred": it.preferred},
        )
        samples_path = writer.samples_path

    judged, kept = judged_items(items, outcomes, counts)
    per_seed = [order_verdicts(outcomes, judged, s) for s in seeds]
    metrics: dict[str, float | None] = {"parse_failure_rate": parse_failure_rate(counts)}
    per_seed_metrics = {}
    for agg in aggs:
        if agg == "mean":
            runs = []
            for s, verdicts in zip(seeds, per_seed):
                r = order_metrics(kept, verdicts)
                r["order_consistency"] = M.consistency_rate((v[ORIG], v[SWAP]) for v in verdicts)
                per_seed_metrics[f"seed{s}"] = r
                runs.append(r)
            metrics.update(prefixed("mean", mean_over_runs(runs) if runs else _empty()))
        else:
            metrics.update(prefixed("vote", voted_acc(kept, voted_verdicts(per_seed, len(kept)))))
    metrics.update(prefixed("official", official_acc(kept, voted_verdicts(per_seed, len(kept)))))

    protocol = {
        "benchmark": "VL-RewardBench (MMInstruction/VL-RewardBench)",
        "path": str(path),
        "split": str(opt(options, "split", "test")),
        "prompt": "perception_judge.core.protocol.build_messages('pair'), one image, two 1-10 scores",
        "orders": "every pair judged in both orders; the swapped verdict un-swapped",
        "parser": DESCRIPTIONS[parser],
        "correct": "the preferred response equals the human's (human_ranking); a tie or a parse failure is wrong",
        "category": "explicit 'category' field, else the id prefix mapped as in lmms-eval (unknown -> general)",
        "macro": "unweighted mean over general / hallucination / reasoning",
        "official": "official.acc / official.acc.macro: the official cal.py rule on the per-item vote over seeds x "
        "orders: items whose vote is a tie or unparsed leave the denominator (official.n); the project's acc counts "
        "them as wrong",
        "aggregation": {
            a: {
                "mean": "metrics per seed, then the mean over seeds",
                "vote": "per pair, majority verdict over seeds x orders (failures abstain), then accuracy",
            }[a]
            for a in aggs
        },
        "published_protocol": "Flex-Judge: temperature 0.6, top_p 0.95, response order swapped at random (p=0.5), "
        "image not resized",
        **aggregation_note(aggs, seeds),
        **judge_protocol(backend, config, image_size, "not resized", seeds=seeds),
    }
    return suite_result(SUITE, metrics, protocol, counts, samples_path, per_seed_metrics, f"{aggs[0]}.acc")


def _empty() -> dict[str, float | None]:
    return {
        k: None
        for k in (
            "acc",
            "acc.macro",
            "acc_orig_order",
            "acc_swapped_order",
            "acc_both_orders",
            "order_consistency",
        )
    }
