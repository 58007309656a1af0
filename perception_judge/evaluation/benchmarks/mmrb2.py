"""MMRB2, Multimodal RewardBench 2 (facebookresearch/MMRB2, arXiv 2512.16899): 4 x 1,000 pairs over text-to-image,
image editing, interleaved generation and reasoning from ``benchmark/{task}.json``, text and images interleaved;
``official.*`` is its ``compute_accuracy.py`` on what its evaluator reads from the same completions. Its licence
forbids training on it: ``build-ppjd`` refuses its files (``ppjd.sources.BENCHMARK_ONLY``). docs/benchmarks.md."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

from perception_judge.core.io import atomic_write_json
from perception_judge.core.protocol import final_answer_part
from perception_judge.evaluation.base import PARSERS, Suite
from perception_judge.evaluation.benchmarks import common, pairs, preference
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks.published import whole_completion

NAME = "mmrb2"
TASKS = ("t2i", "edit", "interleaved", "reasoning")
"""The benchmark's files, each judged with its own published prompt (``published_prompts.yaml``)."""


def _unfenced(text: str) -> str:  # api_pairwise_evaluator.py lines 69-70
    return re.sub(r"\n?```\s*$", "", re.sub(r"^```(?:json)?\s*\n?", "", text.strip()).strip())


def better_response(text: str) -> tuple[bool, Any]:
    """``api_pairwise_evaluator.py`` lines 59-75 and 119 under ``evaluate.py``'s ``except`` (143-146): (True, the
    value as it stands) or (False, None) where that code raises (the order unjudged)."""
    import json_repair

    try:
        return True, json_repair.loads(_unfenced(text))["better_response"]
    except Exception:  # the evaluator raises; evaluate.py catches every exception
        return False, None


def parse_published(text: str, n: int, reasoning: str | None = None) -> tuple[list[float] | None, str | None]:
    """A / B a verdict, another truthy value (``"tie"``, ``"a"``) judged and wrong (C), none a failure."""
    judged, value = better_response(whole_completion(text, reasoning))
    if not (judged and value):
        return None, "published rule: no better_response"
    return preference.SCORES[value if value in ("A", "B") else "C"], None


def parse_strict(text: str, n: int, reasoning: str | None = None) -> tuple[list[float] | None, str | None]:
    final, error = final_answer_part(text, reasoning)
    try:
        value = json.loads(_unfenced(final or "")).get("better_response")
    except (ValueError, AttributeError):
        return None, error or "no JSON object after the reasoning"
    return (preference.SCORES[value], None) if value in ("A", "B") else (None, "better_response not A or B")


PARSERS.update(mmrb2_published=parse_published, mmrb2_strict=parse_strict)


class MMRB2Options(preference.PreferenceOptions):
    """``data_dir``: the folder holding ``benchmark/`` (or that folder); ``tasks``: some of the four."""

    SUITE, SPLITS_KEY = NAME, "tasks"
    tasks: common.choices(TASKS) = TASKS


def _part(p: Any) -> bool:
    return isinstance(p, list) and len(p) == 2 and p[0] in ("text", "image") and isinstance(p[1], str)


Pair = preference.ContentPair


def load_items(opts: MMRB2Options, limit: int | None) -> tuple[list[Pair], dict[str, int], Path]:
    """The first ``limit`` pairs of each task (every file read first), images under the folder (a bare name also
    under ``images/``, ``input_images/``); counted out: no ``prompt_content``, no A / B ``chosen``."""
    folder = opts.data_dir / "benchmark" if (opts.data_dir / "benchmark").is_dir() else opts.data_dir
    roots = [opts.images_dir or folder, folder / "images", folder / "input_images"]
    source, items, counts = common.ImageSource(roots, opts.missing_images, "MMRB2 image"), [], {}
    for task in opts.tasks:
        path, kept = folder / f"{task}.json", []
        records = common.read_jsonl(path, f"MMRB2 {task}")
        counts |= {f"{task}.rows": len(records), f"{task}.skipped_no_prompt": 0, f"{task}.skipped_no_gt": 0}
        for i, rec in enumerate(records):
            if "prompt_content" not in rec or rec.get("chosen") not in ("A", "B"):
                counts[f"{task}.skipped_no_{'gt' if 'prompt_content' in rec else 'prompt'}"] += 1
                continue
            where, answers = f"{path} pair {i}", (rec.get("response_a"), rec.get("response_b"))
            parts = [
                rec["prompt_content"],
                *(r.get("response_content") if isinstance(r, dict) else r for r in answers),
            ]
            if not all(isinstance(p, list) and all(map(_part, p)) for p in parts):
                msg = "prompt_content and response_content must be lists of ['text' | 'image', str]"
                raise common.BenchmarkDataError(f"MMRB2: {where}: {msg}")
            refs, pid = [v for p in parts for k, v in p if k == "image"], rec.get("id", i)
            load = lambda refs=refs, w=where: [source.load(r, w) for r in refs]  # noqa: E731
            check = lambda refs=refs, w=where: [source.check(r, w) for r in refs]  # noqa: E731
            kept.append(Pair(f"{task}:{pid}", parts, rec["chosen"], task, {"id": pid}, load, check))
        items += kept[:limit]
    return items, counts, folder


def published_messages(prompts: dict, item: preference.ContentPair, parts: list[Any]) -> list[dict[str, Any]]:
    """The published request (``api_pairwise_evaluator.py`` lines 101-109): the task's judge prompt as it stands
    (its JSON braces never formatted), then the prompt's and the two responses' parts in order, each group after
    its label."""
    head = [prompts[item.group].text("user"), "[ORIGINAL PROMPT TO MODEL:]"]
    labels = head, ["[RESPONSE A:]"], ["[RESPONSE B:]"]
    return preference.user_turn([p for ls, ps in zip(labels, parts) for p in [["text", t] for t in ls] + ps])


def flip(value: Any) -> Any:
    """``compute_accuracy.py`` lines 39-46: A <-> B, anything else as it is."""
    return "B" if value == "A" else "A" if value == "B" else value


def official(
    judged: common.Judged, seed: int, out: Path, protocol: dict[str, Any]
) -> dict[str, float | None]:
    """``compute_accuracy.py`` (lines 77-105 per task, 201-211 Overall) on one seed's judgements, also written as
    its predictions files (``{id: {forward: [{judgement}], reverse: ...}}``, ``[]`` for an unjudged order)."""
    tally = {t: [0, 0] for t in dict.fromkeys(it.group for it in judged.items)}  # correct, judged
    files = {t: {} for t in tally}
    for i, item in enumerate(judged.items):
        entry = files[item.group][item.record["id"]] = {}
        for order, key in ((pairs.ORIG, "forward"), (pairs.SWAP, "reverse")):
            ok, value = better_response(judged.completion(i, order, seed))
            entry[key] = [{"judgement": value, "evaluator": NAME, "metadata": {}}] if ok else []
            if ok and value:
                tally[item.group][0] += (flip(value) if key == "reverse" else value) == item.preferred
                tally[item.group][1] += 1
    for task, predictions in files.items():
        name = f"{NAME}.official.seed{seed}.{task}.json"
        atomic_write_json(out / name, predictions, fsync=False)
        protocol.setdefault("official_files", []).append(name)
    accs = {f"acc.by_category.{t}": M.rate(c, n) for t, (c, n) in tally.items()}
    correct, n = (sum(v) for v in zip(*tally.values())) if tally else (0, 0)
    metrics = {"acc": M.rate(correct, n), "acc.macro": M.mean(accs.values()), "n": n, **accs}
    return metrics


PARSER_RULES = {
    "published": ("mmrb2_published", "better_response as the published evaluator reads it; A / B a verdict, "
                  "another value judged and wrong, none a failure"),
    "strict": ("mmrb2_strict", "a JSON object after the reasoning whose better_response is A or B"),
}  # fmt: skip
RULE = (
    "compute_accuracy.py on what api_pairwise_evaluator.py reads: the completion without its ```json fence, "
    "json_repair.loads, 'better_response' as it stands (any exception: that order unjudged); forward (a as A) and "
    "reverse (b as A, flipped) scored alone; acc = correct / judged ('tie' and other truthy values judged, wrong); "
    "acc pools the tasks (Overall), acc.macro is the README's Avg. (mean of the task accuracies)"
)
SPEC = preference.Benchmark(NAME, load_items, published_messages, PARSER_RULES, official, RULE)
PRIMARY = (
    "mean.acc",
    "mean.acc_both_orders",
    "official.acc",
    "official.acc.macro",
    "official.acc.by_category.*",
)
"""The project's accuracy (it ranks models) and both-orders accuracy, then the script's Overall, Avg., per task."""
SUITE = Suite(NAME, MMRB2Options, preference.METRICS, PRIMARY, functools.partial(preference.run, SPEC))
