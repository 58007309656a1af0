"""Multimodal RewardBench (facebookresearch/multimodal_rewardbench): about 5,000 (image, question, two responses,
better one) triplets from ``data/all_data.json`` or a hub mirror's parquet; ``official.*`` is its
``scripts/2_get_accuracy.py`` on the Output1-first completions. docs/benchmarks.md."""

from __future__ import annotations

import functools
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

from perception_judge.core.protocol import final_answer_part
from perception_judge.evaluation.base import PARSERS, Suite, write_samples
from perception_judge.evaluation.benchmarks import common, pairs, preference
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks.published import whole_completion

NAME, WHAT = "multimodal_rewardbench", "Multimodal RewardBench"
COLUMNS = ("ID", "Text", "Output1", "Output2", "Better", "Category")


def category_of(item_id: str, category: str) -> str:
    """``2_get_accuracy.py`` lines 29-39: safety and reasoning split by the ID prefix ("pairs", "math"; any case)."""
    if category == "safety":
        return "safety/bias" if item_id.lower().startswith("pairs") else "safety/toxicity"
    if category == "reasoning":
        return "reasoning/math" if item_id.lower().startswith("math") else "reasoning/coding"
    return category


def verdict(text: str) -> str | None:
    """``2_get_accuracy.py`` lines 13-19 before its random draw: "[[A]]" anywhere (even beside "[[B]]") -> A."""
    return "A" if "[[A]]" in text else "B" if "[[B]]" in text else None


def parse_published(text: str, n: int, reasoning: str | None = None) -> tuple[list[float] | None, str | None]:
    v = verdict(whole_completion(text, reasoning))  # no verdict: a failure (the random draw is official.*'s)
    return (preference.SCORES[v], None) if v else (None, "published rule: neither [[A]] nor [[B]]")


def parse_strict(text: str, n: int, reasoning: str | None = None) -> tuple[list[float] | None, str | None]:
    final, error = final_answer_part(text, reasoning)
    found = [v for v in "AB" if f"[[{v}]]" in (final or "")]
    return (preference.SCORES[found[0]], None) if len(found) == 1 else (None, error or "not one verdict")


PARSERS.update(mmrb_published=parse_published, mmrb_strict=parse_strict)


def load_items(opts: Any, limit: int | None) -> tuple[list[preference.ContentPair], dict[str, int], Path]:
    """The first ``limit`` pairs in file order (images loaded lazily) and counts of the rows left out."""
    d = opts.data_dir
    prepared = [f for f in (d / "data" / "all_data.json", d / "all_data.json", d) if f.is_file()]
    try:  # the prepared release (or a file named directly), else the hub mirror's parquet (split test)
        table = common.load_table(prepared[0] if prepared else d, None if prepared else "test", WHAT)
    except common.BenchmarkFileMissing as e:
        raise common.BenchmarkFileMissing(f"{e}; or data/all_data.json") from None
    if missing := [c for c in (*COLUMNS, "Image") if c not in table.columns]:
        raise common.BenchmarkDataError(f"{WHAT}: {str(table.path)!r} has no column {missing}")
    images = common.TableImages(table, ["Image"], opts.images_dir, opts.missing_images, f"{WHAT} image")
    items, counts = [], {"rows": len(table), "skipped_no_gt": 0}
    for i, rec in enumerate(table.view(COLUMNS)):
        where, texts = f"{table.path} row {i}", [rec.get(c) for c in ("Text", "Output1", "Output2")]
        if not all(isinstance(t, str) for t in texts):
            msg = "'Text', 'Output1' and 'Output2' must be text (0_download_data.py fills in 'Text')"
            raise common.BenchmarkDataError(f"{WHAT}: {where}: {msg}")
        if (preferred := {"Output1": "A", "Output2": "B"}.get(str(rec.get("Better")))) is None:
            counts["skipped_no_gt"] += 1
            continue
        ident = str(rec["ID"] if rec.get("ID") is not None else i)
        parts = [[["image", None], ["text", texts[0]]], [["text", texts[1]]], [["text", texts[2]]]]
        load, check = (functools.partial(f, i, where) for f in (images.load, images.check))
        group, record = category_of(ident, str(rec.get("Category"))), {"Category": rec.get("Category")}
        items.append(preference.ContentPair(ident, parts, preferred, group, record, load, check))
    return items[:limit], counts, table.path


class MRBOptions(preference.PreferenceOptions):
    SUITE = NAME


def published_messages(prompts: dict, item: preference.ContentPair, parts: list[Any]) -> list[dict[str, Any]]:
    """The published request (lines 44-59): the judge prompt with the question and both answers, then the image."""
    values = {"question": parts[0][1][1], "answer_a": parts[1][0][1], "answer_b": parts[2][0][1]}
    return prompts[""].messages(values)


def official(judged: common.Judged, seed: int, out: Path, protocol: dict[str, Any]) -> dict[str, Any]:
    """``2_get_accuracy.py`` on one seed's Output1-first completions, also written in its input layout."""
    draw, hits, lines = random.Random(123), defaultdict(list), []  # random.seed(123) once per run (line 23)
    for i, item in enumerate(judged.items):
        text = judged.completion(i, pairs.ORIG, seed)
        right = (verdict(text) or ("A" if draw.random() < 0.5 else "B")) == item.preferred
        hits["all"].append(right)
        hits[item.group].append(right)
        lines.append({"ID": item.item_id, "Label": item.preferred, "output": text, "Meta": item.record})
    write_samples(out / f"{NAME}.official.seed{seed}.jsonl", lines)
    protocol.setdefault("official_files", []).append(f"{NAME}.official.seed{seed}.jsonl")
    by = {f"acc.by_category.{common.slug(g)}": M.mean(v) for g, v in sorted(hits.items()) if g != "all"}
    return {"acc": M.mean(hits["all"]), "n": len(lines), **by}


PARSER_RULES = {
    "published": ("mmrb_published", "'[[A]]' in the whole completion -> A, else '[[B]]' -> B, else a failure"),
    "strict": ("mmrb_strict", "exactly one of [[A]] / [[B]] after the reasoning"),
}  # fmt: skip
RULE = (
    "2_get_accuracy.py: the Output1-first completion, '[[A]]' in it -> A, else '[[B]]' -> B, else a random A/B "
    "(random.seed(123) once per run, draws in file order); micro accuracy overall and per category (safety and "
    "reasoning split by the ID prefix); GPT-4o judged that one order only"
)
SPEC = preference.Benchmark(NAME, load_items, published_messages, PARSER_RULES, official, RULE)
PRIMARY = ("mean.acc", "mean.acc_both_orders", "official.acc", "official.acc.by_category.*")
"""The project's accuracy (it ranks models) and both-orders accuracy, then the script's overall and per category."""
RUN = functools.partial(preference.run, SPEC)
SUITE = Suite(NAME, MRBOptions, preference.METRICS, PRIMARY, RUN)
