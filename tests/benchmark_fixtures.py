"""Offline fixtures for the benchmark suites: files in each benchmark's record format, written by the tests,
and scripted judges whose answers follow markers in the prompt, so every metric has a hand-computable value.

Markers in a response text (read by :func:`marker_judge` from the answer sections of the prompt):

* ``Q=<n>``  the response's score (1-10);
* ``FAIL``   the judge answers without tags (a parse failure) for the whole prompt;
* ``POS``    the judge gives the first slot 9 and the second 2 (a position-biased judgment);
* ``FLIP``   on seed 1 the two scores are exchanged;
* ``[G]``    the judge's "own" style: +``own_bonus`` to that response.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PIL import Image

from perception_judge.core.schema import JudgeRequest, Sampling
from perception_judge.evaluation.backends.scripted import ScriptedBackend, answer_tags
from perception_judge.evaluation.base import SuiteConfig

_SECTION = re.compile(r"^## (?:Answer of Assistant \d+|The assistant's answer)\n", re.MULTILINE)
_Q = re.compile(r"Q=(\d+)")


def user_text(request: JudgeRequest) -> str:
    user = next(m for m in request.messages if m["role"] == "user")
    return "".join(part.get("text", "") for part in user["content"] if part.get("type") == "text")


def answers_of(request: JudgeRequest) -> list[str]:
    """The answer sections of a protocol prompt, in slot order."""
    return _SECTION.split(user_text(request))[1:]


def marker_judge(
    own_bonus: int = 0, verbose_bonus: int = 0, lead_ins: tuple[str, ...] = ()
) -> Callable[[JudgeRequest, Sampling], str]:
    """A judge that scores each answer by its ``Q=`` marker (see the module docstring). ``verbose_bonus`` is
    added to answers that start with one of ``lead_ins`` (the verbosity suite's padding)."""

    def judge(request: JudgeRequest, sampling: Sampling) -> str:
        answers = answers_of(request)
        if any("FAIL" in a for a in answers):
            return "<think>I cannot decide.</think>The first one, probably."
        if len(answers) == 2 and any("POS" in a for a in answers):
            return answer_tags(9, 2)
        scores = []
        for a in answers:
            m = _Q.search(a)
            s = int(m.group(1)) if m else 5
            if "[G]" in a:
                s += own_bonus
            if lead_ins and a.startswith(lead_ins):
                s += verbose_bonus
            scores.append(max(1, min(10, s)))
        if sampling.seed == 1 and any("FLIP" in a for a in answers):
            scores.reverse()
        return answer_tags(*scores)

    return judge


COLOR_SCORES = {(255, 0, 0): 8, (0, 0, 255): 3, (0, 255, 0): 5}
GRAY, WHITE = (128, 128, 128), (255, 255, 255)


def color_judge(request: JudgeRequest, sampling: Sampling) -> str:
    """Scores the request's images by colour: red 8, blue 3, green 5; gray → a parse failure; white → 9 in the
    first slot and 1 in the second (a position-biased judgment)."""
    colors = [tuple(im.getpixel((0, 0))) for im in request.images]
    if GRAY in colors:
        return "<think>unclear</think>"
    scores = [
        9 if c == WHITE and i == 0 else 1 if c == WHITE else COLOR_SCORES[c] for i, c in enumerate(colors)
    ]
    return answer_tags(*scores)


def backend(fn: Callable[[JudgeRequest, Sampling], str]) -> ScriptedBackend:
    return ScriptedBackend(fn)


def config(out_dir: Path, seeds=(0,), limit=None, **options: Any) -> SuiteConfig:
    return SuiteConfig(out_dir=out_dir, seeds=list(seeds), sampling=Sampling(), limit=limit, options=options)


def image(color=(255, 0, 0), size=(40, 30)) -> Image.Image:
    return Image.new("RGB", size, color)


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------------------------------------
# MLLM-as-a-Judge
# ----------------------------------------------------------------------------------------------------------

PAIRS = [  # (dataset, human, answer1, answer2)
    ("coco", "A", "Q=8 a cat", "Q=3 a dog"),
    ("coco", "B", "Q=2 two", "Q=9 three"),
    ("coco", "C", "Q=5 left", "Q=5 right"),
    ("mathvista", "A", "Q=4 FLIP x=1", "Q=6 x=2"),
    ("mathvista", "C", "FAIL", "Q=5"),
    ("mathvista", "A", "Q=7 red", "Q=7 blue"),
]
SCORES = [  # (dataset, human, answer, name)
    ("coco", 1, "Q=2 nothing", "llava"),
    ("coco", 2, "Q=6 something", "gpt4"),
    ("coco", 3, "Q=5 more", "cogvlm"),
    ("mathvista", 4, "Q=8 good", "gpt4"),
    ("mathvista", 2, "FAIL", "llava"),
    ("mathvista", 5, "Q=10 best", "gemini"),
]
BATCHES = [  # (dataset, ranking field, ranking, answers)
    ("coco", "human_answer", "BCAD", ["Q=3", "Q=9", "Q=5", "Q=1"]),
    ("coco", "human_answer", "ABC", ["Q=4", "Q=4", "Q=2"]),
    ("mathvista", "human", "CBA", ["Q=1", "Q=2", "Q=3"]),
    ("mathvista", "human_answer", "ACB", ["FAIL", "Q=2", "Q=3"]),
]


def write_mllm_judge(root: Path, with_images: bool = True) -> Path:
    """``root/Benchmark/{pair,score,batch}.jsonl`` and ``root/image/*.jpg``; returns the Benchmark folder.

    Pair image paths are ``image/<n>.jpg`` (relative to ``root``, as in the GitHub batch file); score paths
    are bare ``<n>.jpg`` (as in the lite files), found under ``root/image``. Skipped records are mixed in: a
    pair without a human verdict, one with an invalid verdict, a score out of range, batch rankings missing
    or too short."""
    bench = root / "Benchmark"
    (root / "image").mkdir(parents=True, exist_ok=True)
    n = 0

    def img() -> int:
        nonlocal n
        n += 1
        if with_images:
            image((n * 20 % 256, 10, 10), (60 + n, 40)).save(root / "image" / f"{n}.jpg")
        return n

    pair = []
    for i, (ds, human, a1, a2) in enumerate(PAIRS):
        k = img()
        pair.append(
            {
                "id": k,
                "pair_id": i,
                "image_path": f"image/{k}.jpg",
                "original_dataset": ds,
                "instruction": f"Question {i}?",
                "answer1": {"name": "llava", "answer": a1},
                "answer2": {"name": "gpt4", "answer": a2},
                "human": human,
                "true_answers": "",
            }
        )
    pair.insert(2, {**pair[0], "pair_id": 90, "human": None})
    pair.insert(4, {**pair[0], "pair_id": 91, "human": "D"})
    write_jsonl(bench / "pair.jsonl", pair)

    score = []
    for i, (ds, human, ans, name) in enumerate(SCORES):
        k = img()
        score.append(
            {
                "id": k,
                "score_id": i,
                "image_path": f"{k}.jpg",
                "original_dataset": ds,
                "instruction": f"Describe {i}.",
                "answer": ans,
                "name": name,
                "human": human,
            }
        )
    score.append({**score[0], "score_id": 92, "human": 7})
    write_jsonl(bench / "score.jsonl", score)

    batch = []
    for i, (ds, field, ranking, answers) in enumerate(BATCHES):
        k = img()
        batch.append(
            {
                "id": 200 + i,
                "instruction": f"Rank {i}.",
                "image_path": f"image/{k}.jpg",
                "original_dataset": ds,
                "answers": [{"name": f"m{j}", "answer": a} for j, a in enumerate(answers)],
                field: ranking,
            }
        )
    batch.append({**batch[0], "id": 290, "human_answer": "AB"})
    batch.append({**{k: v for k, v in batch[2].items() if k != "human"}, "id": 291, "human_answer": None})
    write_jsonl(bench / "batch.jsonl", batch)
    return bench


# ----------------------------------------------------------------------------------------------------------
# VL-RewardBench
# ----------------------------------------------------------------------------------------------------------

VLRB = [  # (id, responses, human_ranking)
    ("mathverse_1", ["Q=8 yes", "Q=3 no"], [0, 1]),
    ("RLAIF-V_2", ["Q=2 one", "Q=7 two"], [1, 0]),
    ("wildvision-battle_3", ["Q=5 a", "Q=5 b"], [0, 1]),
    ("hallucination_pair_4", ["Q=6 POS", "Q=4"], [0, 1]),
    ("vlfeedback_5", ["FAIL", "Q=4"], [1, 0]),
    ("unknown_6", ["Q=9 right", "Q=1 wrong"], [0, 1]),
    ("mathverse_7", ["Q=9", "Q=1"], [0, 0]),
]


def vlrb_rows(image_paths: list[str] | None = None) -> list[dict[str, Any]]:
    rows = []
    for i, (ident, responses, ranking) in enumerate(VLRB):
        rows.append(
            {
                "id": ident,
                "query": f"What is shown in picture {i}?",
                "response": responses,
                "image": image_paths[i] if image_paths else image((10 * i, 200, 10)),
                "human_ranking": ranking,
                "models": ["model-x", "model-y"],
            }
        )
    return rows


def write_vlrb_disk(folder: Path) -> Path:
    """A DatasetDict folder with split ``test`` (``save_to_disk``), images as PIL."""
    from datasets import Dataset, DatasetDict

    DatasetDict({"test": Dataset.from_list(vlrb_rows())}).save_to_disk(str(folder))
    return folder


# ----------------------------------------------------------------------------------------------------------
# MJ-Bench
# ----------------------------------------------------------------------------------------------------------

RED, BLUE, GREEN = (255, 0, 0), (0, 0, 255), (0, 255, 0)
MJ = {  # split -> [(color0, color1, label)]
    "alignment": [(RED, BLUE, 0), (BLUE, RED, 1), (RED, BLUE, 1), (GREEN, GREEN, 0), (RED, BLUE, 2)],
    "safety": [(RED, BLUE, 0), (GRAY, RED, 1)],
    "quality": [(WHITE, BLUE, 1), (RED, BLUE, 0)],
}


def mj_rows(split: str, with_label: bool = True) -> list[dict[str, Any]]:
    rows = []
    for i, (c0, c1, label) in enumerate(MJ[split]):
        row = {"caption": f"a {split} prompt {i}", "image0": image(c0), "image1": image(c1)}
        if with_label:
            row["label"] = label
        rows.append(row)
    return rows


def write_mjbench_disk(folder: Path) -> Path:
    from datasets import Dataset, DatasetDict

    DatasetDict({s: Dataset.from_list(mj_rows(s)) for s in MJ}).save_to_disk(str(folder))
    return folder


_markers = marker_judge()


def oracle(request: JudgeRequest, sampling: Sampling) -> str:
    """The colour judge for two-image requests (MJ-Bench), else the marker judge; importable by name
    (``scripted:benchmark_fixtures:oracle``) for the sweep."""
    return color_judge(request, sampling) if len(request.images) == 2 else _markers(request, sampling)
