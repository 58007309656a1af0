"""MMRB2, Multimodal RewardBench 2 (facebookresearch/MMRB2, arXiv 2512.16899): 4 x 1,000 human-preference pairs
over text-to-image, image editing, interleaved generation and reasoning, from ``benchmark/{task}.json`` (built from
the hub or from the sources); prompts and responses interleave text and several images, all sent in order.
``official.*``: its ``compute_accuracy.py`` on the judgements its evaluator reads from the same completions, also
written as its predictions files. Its licence forbids training on it (``build-ppjd`` refuses its files).
"""

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
TASKS = {"t2i": "image", "edit": "edit", "interleaved": "interleaved", "reasoning": "reasoning"}
"""Benchmark file -> the published evaluator's ``task_type`` (which picks its judge prompt)."""
CRITERIA = {  # evaluation_prompts.py: each task's criteria in order, their meaning in our words
    "image": "faithfulness_to_prompt: composition, objects, attributes and spatial relations as the prompt says|"
    "text_rendering: text drawn in the images (spelling, legibility)|input_faithfulness: the input image's key "
    "elements and style kept|image_consistency: several images consistent with each other|text_image_alignment: "
    "text and images match|text_quality: correct, coherent text|overall_quality: quality, realism, no artifacts",
    "edit": "text_faithfulness: the editing instruction followed|image_faithfulness: the input image's composition, "
    "lighting, style and background kept|overall_image_quality: no artifacts or distortions from the edit|"
    "text_rendering: text drawn in the images (spelling, legibility)",
    "interleaved": "text_faithfulness: the instruction followed|image_faithfulness: the input image's key elements "
    "kept|overall_image_quality: quality of the generated images|congruence: several images consistent with each "
    "other|text_image_alignment: text and images work together|text_quality: correct, coherent text|"
    "text_rendering: text drawn in the images (spelling, legibility)",
}
IMPARTIAL = (
    "Be impartial: neither the order of the responses, their length nor the models' names may sway you."
)
JSON_ANSWER = '"better_response": "A" or "B"'


def judge_prompt(task: str) -> str:
    """The published judge prompt of a task (``evaluation_prompts.py``), our wording, its JSON keys."""
    if task == "reasoning":
        return (
            "Act as an impartial judge of the responses two AI assistants gave to the question below: choose the one "
            "that follows the instructions and answers better (helpfulness, relevance, accuracy, depth, detail). "
            f'Compare them first and explain briefly. {IMPARTIAL} Answer in JSON: {{"reasoning": "...", {JSON_ANSWER}}}'
        )
    rubric = [c.split(": ") for c in CRITERIA[task].split("|")]
    keys = ", ".join(f'"{k}": "..."' for k, _ in [*rubric, ("comparison_summary", "")])
    return (
        f"You are an expert judge of AI-generated {task} responses. Compare two responses to the same prompt and "
        f"decide which is better. {IMPARTIAL} [ORIGINAL PROMPT TO MODEL:] is the instruction both models received "
        "(with its input image, if any); [RESPONSE A:] and [RESPONSE B:] are their responses. For each criterion, "
        "reason step by step about which response is better (Not Applicable when it does not apply):\n"
        + "\n".join(f"- {k}: {v}" for k, v in rubric)
        + "\nThen score 1-6 (6: A much better, 5: A better, 4: A slightly better or equal, 3: B slightly better or "
        "equal, 2: B better, 1: B much better) and give a conservative confidence in 0.0-1.0 (mostly 0.2-0.5). "
        f'Always answer in JSON: {{"reasoning": {{{keys}}}, "score": <1-6>, {JSON_ANSWER}, "confidence": <0.0-1.0>, '
        '"confidence_rationale": "..."}'
    )


class NeedsJsonRepair(Exception):
    """A completion that is not JSON: only ``json_repair`` (not installed) reads it as the published code does."""


_FENCES = (re.compile(r"^```(?:json)?\s*\n?"), re.compile(r"\n?```\s*$"))


def _unfenced(text: str) -> str:
    return _FENCES[1].sub("", _FENCES[0].sub("", text.strip()).strip())


def better_response(text: str) -> tuple[bool, Any]:
    """``api_pairwise_evaluator.py`` lines 59-75 and 119 under ``evaluate.py``'s ``except`` (143-146): (True, the
    ``better_response`` value as it stands) or (False, None) when that code raises (the order unjudged). Valid
    JSON is read with ``json.loads`` (what ``json_repair.loads`` returns for it), the rest needs ``json_repair``."""
    try:
        try:
            parsed = json.loads(_unfenced(text))
        except ValueError:
            try:
                import json_repair
            except ImportError:
                raise NeedsJsonRepair(text[:80]) from None
            parsed = json_repair.loads(_unfenced(text))
        return True, parsed["better_response"]
    except NeedsJsonRepair:
        raise
    except Exception:  # the published evaluator raises; evaluate.py catches every exception
        return False, None


def flip(value: Any) -> Any:
    """``compute_accuracy.py`` ``flip_judgement`` (lines 39-46): A <-> B, anything else unchanged."""
    return "B" if value == "A" else "A" if value == "B" else value


def parse_published(text: str, n: int, reasoning: str | None = None) -> tuple[list[float] | None, str | None]:
    """:func:`better_response` of the whole completion: "A" / "B" a verdict, another truthy value (``"tie"``,
    ``"a"``) judged and wrong (C), no value a failure."""
    try:
        judged, value = better_response(whole_completion(text, reasoning))
    except NeedsJsonRepair:
        return None, "published rule: not JSON and json_repair is not installed (pip install json-repair)"
    if not (judged and value):
        return None, "published rule: no better_response"
    return preference.SCORES[value if value in ("A", "B") else "C"], None


def parse_strict(text: str, n: int, reasoning: str | None = None) -> tuple[list[float] | None, str | None]:
    final, error = final_answer_part(text, reasoning)
    try:
        value = json.loads(_unfenced(final or ""))
    except ValueError:
        return None, error or "no JSON object after the reasoning"
    verdict = value.get("better_response") if isinstance(value, dict) else None
    return (
        (preference.SCORES[verdict], None) if verdict in ("A", "B") else (None, "better_response not A or B")
    )


PARSERS.update(mmrb2_published=parse_published, mmrb2_strict=parse_strict)


class MMRB2Options(preference.PreferenceOptions):
    """``data_dir``: the folder holding ``benchmark/`` (or that folder); ``tasks``: some of t2i, edit,
    interleaved, reasoning."""

    tasks: common.choices(tuple(TASKS)) = tuple(TASKS)


def _is_parts(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(p, list) and len(p) == 2 and p[0] in ("text", "image") and isinstance(p[1], str)
        for p in value
    )


def load_task(
    folder: Path, task: str, opts: MMRB2Options
) -> tuple[list[preference.ContentPair], dict[str, int]]:
    """The pairs of ``{task}.json`` (image paths under the folder; bare names also under ``images/`` and
    ``input_images/``); counted out: no ``prompt_content`` (a prompt the build could not rebuild), no A / B
    ``chosen``."""
    path = folder / f"{task}.json"
    records = common.read_jsonl(path, f"MMRB2 {task}")
    roots = [opts.images_dir or folder, folder / "images", folder / "input_images"]
    source = common.ImageSource(roots, opts.missing_images, f"MMRB2 {task} image")
    items, counts = [], {"rows": len(records), "skipped_no_prompt": 0, "skipped_no_gt": 0}
    for i, rec in enumerate(records):
        where = f"{path} pair {i}"
        if "prompt_content" not in rec:
            counts["skipped_no_prompt"] += 1
            continue
        parts = [
            rec["prompt_content"],
            *((rec.get(k) or {}).get("response_content") for k in ("response_a", "response_b")),
        ]
        if not all(map(_is_parts, parts)):
            msg = "prompt_content and response_content must be lists of ['text' | 'image', str]"
            raise common.BenchmarkDataError(f"MMRB2: {where}: {msg}", path)
        if rec.get("chosen") not in ("A", "B"):
            counts["skipped_no_gt"] += 1
            continue
        refs = [v for p in parts for k, v in p if k == "image"]
        items.append(
            preference.ContentPair(
                item_id=f"{task}:{rec.get('id', i)}",
                parts=parts,
                preferred=rec["chosen"],
                group=task,
                record={"id": rec.get("id", i)},
                load_images=lambda refs=refs, w=where: [source.load(r, w) for r in refs],
                check_images=lambda refs=refs, w=where: [source.check(r, w) for r in refs],
            )
        )
    return items, counts


def load_items(
    opts: MMRB2Options, limit: int | None
) -> tuple[list[preference.ContentPair], dict[str, int], Path]:
    """The first ``limit`` pairs of each task, every file read before any judging."""
    folder = opts.data_dir / "benchmark" if (opts.data_dir / "benchmark").is_dir() else opts.data_dir
    loaded = {t: load_task(folder, t, opts) for t in opts.tasks}
    counts = {f"{t}.{k}": v for t, (_, c) in loaded.items() for k, v in c.items()}
    return [it for items, _ in loaded.values() for it in items[:limit]], counts, folder


def published_messages(item: preference.ContentPair, parts: list[preference.Parts]) -> list[dict[str, Any]]:
    """The published request (``api_pairwise_evaluator.py`` lines 101-109): the task's judge prompt, then the
    prompt's, response A's and response B's parts in order, each after its label, one user turn."""
    labels = (
        [judge_prompt(TASKS[item.group]), "[ORIGINAL PROMPT TO MODEL:]"],
        ["[RESPONSE A:]"],
        ["[RESPONSE B:]"],
    )
    return preference.user_turn(
        [p for ls, ps in zip(labels, parts) for p in ([["text", t] for t in ls] + ps)]
    )


def official(
    judged: common.Judged, seed: int, out: Path, protocol: dict[str, Any]
) -> dict[str, float | None]:
    """``compute_accuracy.py`` (lines 77-105 per task, 201-211 Overall) on one seed's judgements, written as its
    predictions files ``<suite>.official.seed<s>.<task>.json`` (an unjudged order: ``[]``)."""
    tally = {t: [0, 0] for t in dict.fromkeys(it.group for it in judged.items)}  # correct, judged
    files: dict[str, dict[str, Any]] = {t: {} for t in tally}
    unread = 0
    for i, item in enumerate(judged.items):
        entry = files[item.group][item.record["id"]] = {}
        for order, key in ((pairs.ORIG, "forward"), (pairs.SWAP, "reverse")):
            try:
                ok, value = better_response(judged.completion(i, order, seed))
            except NeedsJsonRepair:
                ok, value, unread = False, None, unread + 1
            entry[key] = [{"judgement": value, "evaluator": NAME, "metadata": {}}] if ok else []
            if ok and value:
                tally[item.group][1] += 1
                tally[item.group][0] += (flip(value) if order == pairs.SWAP else value) == item.preferred
    for task, predictions in files.items():
        atomic_write_json(out / f"{NAME}.official.seed{seed}.{task}.json", predictions, fsync=False)
        protocol.setdefault("official_files", []).append(f"{NAME}.official.seed{seed}.{task}.json")
    accs = {f"acc.by_category.{t}": M.rate(c, n) for t, (c, n) in tally.items()}
    correct, n = (sum(v) for v in zip(*tally.values())) if tally else (0, 0)
    metrics = {"acc": M.rate(correct, n), "acc.macro": M.mean(accs.values()), "n": n, **accs}
    if unread:  # never a number that may differ from the script's
        why = f"seed {seed}: {unread} completions are not JSON and json_repair is not installed"
        protocol.setdefault("undefined_metrics", {}).update({f"official.{k}": why for k in metrics})
    return metrics


SPEC = preference.Benchmark(
    NAME,
    "MMRB2 (facebookresearch/MMRB2)",
    load_items,
    published_messages,
    {
        "published": (
            "mmrb2_published",
            "better_response as the published evaluator reads it (fence stripped, "
            "json_repair); 'A' / 'B' a verdict, another value judged and wrong, none a failure",
        ),
        "strict": ("mmrb2_strict", "a JSON object after the reasoning whose better_response is 'A' or 'B'"),
    },
    official,
    "compute_accuracy.py on what api_pairwise_evaluator.py reads: the completion without its ```json fence, "
    "json_repair.loads, 'better_response' as it stands (any exception: that order unjudged); forward (a as A) and "
    "reverse (b as A, flipped) scored alone; acc = correct / judged ('tie' and other truthy values judged, wrong); "
    "acc pools the tasks (Overall), acc.macro is the README's Avg. (mean of the task accuracies)",
)
PRIMARY = (
    "mean.acc",
    "mean.acc_both_orders",
    "official.acc",
    "official.acc.macro",
    "official.acc.by_category.*",
)
"""The project's accuracy over both orders (it ranks models), both-orders accuracy, then the script's Overall,
Avg. and per task."""
SUITE = Suite(NAME, MMRB2Options, preference.METRICS, PRIMARY, functools.partial(preference.run, SPEC))
