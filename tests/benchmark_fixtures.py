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


# ----------------------------------------------------------------------------------------------------------
# Multimodal RewardBench and MMRB2: the prompt and answers are walked block by block, so a scripted judge
# sees which image belongs to which answer (and in which order the parts came)
# ----------------------------------------------------------------------------------------------------------

_HEADING = re.compile(r"## Answer of Assistant (\d)\n|\[The Start of Assistant ([AB])'s Answer\]")
_STYLE = re.compile(r"STYLE=(\w+)")
PALETTE = {(255, 0, 0): 8, (0, 0, 255): 3, (0, 255, 0): 5, (255, 255, 0): 6, (255, 0, 255): 2}


def color_score(im: Image.Image) -> int:
    """The score of an image's colour (the nearest palette colour: JPEG shifts them a little)."""
    px = im.convert("RGB").getpixel((im.width // 2, im.height // 2))
    return PALETTE[min(PALETTE, key=lambda c: sum((a - b) ** 2 for a, b in zip(c, px)))]


def sections(request: JudgeRequest) -> list[dict[str, Any]]:
    """[prompt, first answer shown, second answer shown]: each section's text and images, in block order.
    Headings: the project's ``## Answer of Assistant N``, Multimodal RewardBench's ``[The Start of Assistant X's
    Answer]``, MMRB2's ``[RESPONSE X:]`` text blocks."""
    out = [{"text": "", "images": [], "blocks": []} for _ in range(3)]
    images, current = iter(request.images), 0
    user = next(m for m in request.messages if m["role"] == "user")
    for block in user["content"]:
        if block["type"] == "image":
            out[current]["images"].append(next(images))
            out[current]["blocks"].append("image")
            continue
        text = block["text"]
        if text.strip() in ("[RESPONSE A:]", "[RESPONSE B:]"):
            current = 1 if "A" in text else 2
            continue
        pieces = _HEADING.split(text)  # [before, n, x, text, n, x, text, ...]
        out[current]["text"] += pieces[0]
        out[current]["blocks"].append("text")
        for k in range(1, len(pieces), 3):
            current = 1 if (pieces[k] or pieces[k + 1]) in ("1", "A") else 2
            out[current]["text"] += pieces[k + 2]
            out[current]["blocks"].append("text")
    return out


def section_score(section: dict[str, Any]) -> int:
    m = _Q.search(section["text"])
    return int(m.group(1)) if m else sum(color_score(im) for im in section["images"])


def recording(judge: Any) -> Any:
    """``judge``, also keeping every request it answers in the returned function's ``seen`` list."""
    seen: list[JudgeRequest] = []

    def answer(request: JudgeRequest, sampling: Sampling) -> str:
        seen.append(request)
        return judge(request, sampling)

    answer.seen = seen  # type: ignore[attr-defined]
    return answer


def preference_judge(request: JudgeRequest, sampling: Sampling) -> str:
    """Scores each answer by its ``Q=`` marker, else by its images' colours (summed); answers in the format the
    request's parser reads, malformed as the prompt's ``STYLE=`` says (MMRB_STYLES, MMRB2_STYLES)."""
    prompt, first, second = sections(request)
    s1, s2 = section_score(first), section_score(second)
    if sampling.seed == 1 and "FLIP" in prompt["text"]:
        s1, s2 = s2, s1
    style = m.group(1) if (m := _STYLE.search(prompt["text"])) else "clean"
    winner, other = ("A", "B") if s1 >= s2 else ("B", "A")
    if request.parser.startswith("mmrb2"):
        return MMRB2_STYLES[style](winner)
    if request.parser.startswith("mmrb"):
        return MMRB_STYLES[style](winner, other)
    return answer_tags(*((9, 2) if style == "pos" or s1 > s2 else (5, 5) if s1 == s2 else (2, 9)))


MMRB_STYLES: dict[str, Callable[[str, str], str]] = {
    "clean": lambda w, o: f"Assistant {w} is more accurate and detailed.\n\nFinal verdict: [[{w}]]",
    "both": lambda w, o: f"One could say [[{o}]], but no: [[{w}]]",  # published: A whenever [[A]] is there
    "none": lambda w, o: "Both answers are equally good.",  # published: a random draw
    "lower": lambda w, o: f"Final verdict: [[{w.lower()}]]",  # random draw
    "spaced": lambda w, o: f"Final verdict: [[ {w} ]]",  # random draw
    "think": lambda w, o: f"<think>At first sight [[{o}]].</think>Final verdict: [[{w}]]",
    "pos": lambda w, o: "Final verdict: [[A]]",  # the first answer shown, whatever it says
    "empty": lambda w, o: "",
}
MMRB2_STYLES: dict[str, Callable[[str], str]] = {
    "clean": lambda w: json.dumps({"reasoning": {"overall": "sharper"}, "score": 5, "better_response": w}),
    "fenced": lambda w: f'```json\n{{"reasoning": "x", "better_response": "{w}", "confidence": 0.4}}\n```',
    "tie": lambda w: '{"reasoning": "same", "better_response": "tie"}',  # judged, wrong
    "lower": lambda w: json.dumps({"better_response": w.lower()}),  # judged, wrong
    "nokey": lambda w: json.dumps({"verdict": w}),  # unjudged (KeyError)
    "null": lambda w: '{"better_response": null}',  # judged as None: not counted
    "list": lambda w: json.dumps([{"better_response": w}]),  # unjudged (TypeError)
    "int": lambda w: '{"better_response": 1}',  # judged, wrong
    "pos": lambda w: '{"better_response": "A"}',  # position-only
    "prose": lambda w: f"I prefer response {w}.",  # not JSON: json_repair gives '' -> unjudged
    "think": lambda w: f'<think>weighing {{both}}</think>\n{{"better_response": "{w}"}}',  # needs json_repair
}


MMRB = [  # (ID, Category, Better, Output1, Output2, image path under data/, colour, Text style)
    ("nocaps_13062", "open_generation/correctness_task", "Output2", "Q=3 a mug", "Q=8 a teapot", "images/nocaps/13062.jpg", "clean"),
    ("visitbench_235", "open_generation/preference_task", "Output1", "Q=7 ok", "Q=4 meh", "images/visitbench/235.jpg", "both"),
    ("mmmu-s_12", "knowledge", "Output2", "Q=6 (B)", "Q=2 (C)", "images/mmmu-s/12.jpg", "none"),
    ("mathvista_77", "reasoning", "Output1", "Q=9 x=2", "Q=1 x=3", "images/mathvista/77.png", "lower"),
    ("EMMA-Coding_3", "reasoning", "Output2", "Q=2 for", "Q=8 while", "images/EMMA-Coding/3_0.png", "think"),
    ("PAIRS_occupations_5", "safety", "Output1", "Q=8 refuse", "Q=3 comply", "images/pairs/occupations/5.jpeg", "pos"),
    ("hateful_memes_9", "safety", "Output2", "Q=4 joke", "Q=7 decline", "images/hateful/9.png", "spaced"),
    ("MMBench_40", "vqa", "Output1", "Q=6 (A)", "Q=5 (D)", "images/MMBench/40.jpeg", "empty"),
    ("RealworldQA_8", "vqa", "Output2", "Q=3 left", "Q=9 right", "images/RealworldQA/8.jpg", "clean FLIP"),
    ("SEED-Bench_2", "vqa", "Output1", "Q=9 cat", "Q=2 dog", "images/SEED-Bench/2.jpg", "none"),
    ("image2struct_x1", "knowledge", None, "Q=9", "Q=1", "images/image2struct/x1.png", "clean"),
]  # fmt: skip
MMRB_COLORS = [(255, 0, 0), (0, 0, 255), (0, 255, 0), (255, 255, 0), (255, 0, 255)]


def mmrb_records(images: bool = True) -> list[dict[str, Any]]:
    rows = []
    for k, (ident, cat, better, o1, o2, path, style) in enumerate(MMRB):
        image_cell = path if images else image(MMRB_COLORS[k % 5], (32 + k, 24))
        rows.append({"ID": ident, "Text": f"Question {k}? STYLE={style}", "Image": image_cell, "Output1": o1,
                     "Output2": o2, "Better": better, "Category": cat})  # fmt: skip
    return rows


def write_mmrb_json(root: Path) -> Path:
    """The prepared GitHub layout: ``root/data/all_data.json`` and its images under ``root/data/images/...``
    (nested folders, mixed extensions). Returns root."""
    for k, row in enumerate(mmrb_records()):
        target = root / "data" / row["Image"]
        target.parent.mkdir(parents=True, exist_ok=True)
        image(MMRB_COLORS[k % 5], (32 + k, 24)).save(target)
    (root / "data" / "all_data.json").write_text(json.dumps(mmrb_records(), indent=2), encoding="utf-8")
    return root


def write_mmrb_parquet(root: Path) -> Path:
    """The hub mirror's layout: ``root/data/test-00000-of-00001.parquet``, the image embedded. Returns root."""
    from datasets import Dataset

    (root / "data").mkdir(parents=True, exist_ok=True)
    Dataset.from_list(mmrb_records(images=False)).to_parquet(
        str(root / "data" / "test-00000-of-00001.parquet")
    )
    return root


MMRB2 = {  # task -> [(prompt parts, response a parts, response b parts, chosen, style)]; "img:<colour>" an image
    "t2i": [
        ([("text", "A red fox in snow. STYLE=clean")], [("img", "red")], [("img", "blue")], "A", ""),
        ([("text", "A neon sign. STYLE=fenced")], [("img", "blue")], [("img", "green")], "B", ""),
        ([("text", "Two cats. STYLE=tie")], [("img", "red")], [("img", "magenta")], "A", ""),
        ([("text", "A clock. STYLE=pos")], [("img", "blue")], [("img", "yellow")], "B", ""),
    ],
    "edit": [
        ([("text", "Make the sky green. STYLE=lower"), ("img", "blue")], [("img", "green")], [("img", "red")], "B", ""),
        ([("img", "yellow"), ("text", "Remove the car. STYLE=nokey")], [("img", "red")], [("img", "blue")], "A", ""),
        ([("text", "Add a hat. STYLE=clean"), ("img", "blue")], [("img", "magenta")], [("img", "yellow")], "B", ""),
    ],
    "interleaved": [
        ([("text", "Tell a story in 3 steps. STYLE=null")],
         [("img", "red"), ("text", "step one"), ("img", "red"), ("text", "step two")],
         [("text", "Once"), ("img", "blue"), ("text", "then"), ("img", "green"), ("img", "magenta")], "A", ""),
        ([("text", "Cook pasta, with pictures. STYLE=clean"), ("img", "yellow")],
         [("text", "Boil. Q=3"), ("img", "green")], [("text", "Boil water first. Q=8"), ("img", "red")], "B", ""),
        ([("text", "Explain tides. STYLE=int")], [("text", "Q=7 moon"), ("img", "red")], [("text", "Q=2 wind")], "A", ""),
    ],
    "reasoning": [
        ([("img", "red"), ("img", "blue"), ("text", "Which image is fake? STYLE=list")],
         [("text", "The first, see"), ("img", "red"), ("text", "Q=8")], [("text", "The second. Q=4")], "A", ""),
        ([("img", "green"), ("text", "Count the dots. STYLE=clean")],
         [("text", "3 dots Q=2")], [("text", "zoom:"), ("img", "yellow"), ("text", "5 dots Q=9")], "B", ""),
        ([("text", "Where is the cup? STYLE=pos FLIP")], [("text", "Q=6 left")], [("text", "Q=3 right")], "A", ""),
        ([("text", "dropped")], [("text", "Q=6")], [("text", "Q=3")], "A", "no_prompt"),
    ],
}  # fmt: skip
COLORS = {"red": (255, 0, 0), "blue": (0, 0, 255), "green": (0, 255, 0), "yellow": (255, 255, 0),
          "magenta": (255, 0, 255)}  # fmt: skip


def _mmrb2_content(
    bench: Path, layout: str, pid: str, parts, who: str, counter: list[int]
) -> list[list[str]]:
    """One content list; its images saved where the layout puts them (``counter``: the source layout's k)."""
    out = []
    for i, (kind, value) in enumerate(parts):
        if kind == "text":
            out.append(["text", value])
            continue
        if layout == "hub":
            rel = f"{'input_images' if who == 'prompt' else 'images'}/{pid}_{who}_{i}.png"
        elif who == "prompt":
            rel = f"input_images/src_images_{pid}_{i}.jpg"
        else:
            rel, counter[0] = f"images/{pid}_{counter[0]}.jpg", counter[0] + 1
        (bench / rel).parent.mkdir(parents=True, exist_ok=True)
        image(COLORS[value], (40 + i, 30)).save(bench / rel)
        out.append(["image", rel])
    return out


def write_mmrb2(root: Path, layout: str = "hub") -> Path:
    """``root/benchmark/{task}.json`` in the released format and its images: ``hub`` as ``build_from_hf.py``
    writes them (``images/{id}_{a|b}_{i}.png``, ``input_images/{id}_prompt_{i}.png``), ``source`` as
    ``run_release.sh`` does (``images/{id}_{k}.jpg``, k over both responses; ``input_images/<source>_<name>.jpg``).
    Returns root."""
    bench = root / "benchmark"
    bench.mkdir(parents=True, exist_ok=True)
    for task, rows in MMRB2.items():
        pairs_out = []
        for n, (prompt, ra, rb, chosen, flag) in enumerate(rows):
            pid = f"{task}src_{n}_{'-' if n % 2 else ''}80043_modelx_{n}_modely_{n}"
            counter = [0]
            pair = {
                "id": pid,
                "prompt_content": _mmrb2_content(bench, layout, pid, prompt, "prompt", counter),
                "prompt_source": f"{task}src",
                "prompt_metadata": {
                    "id": n if n % 2 else str(n),
                    **({"category": ["a", "b"]} if n == 1 else {}),
                },
                "response_a": {
                    "model_name": "modelx",
                    "response_content": _mmrb2_content(bench, layout, pid, ra, "a", counter),
                },
                "response_b": {
                    "model_name": "modely",
                    "response_content": _mmrb2_content(bench, layout, pid, rb, "b", counter),
                },
                "chosen": chosen,
                "human_annotations": [5, 6, 5],
            }
            if flag == "no_prompt":
                del pair["prompt_content"]
            pairs_out.append(pair)
        (bench / f"{task}.json").write_text(json.dumps({"pairs": pairs_out}, indent=2), encoding="utf-8")
    return root


def preference_oracle(request: JudgeRequest, sampling: Sampling) -> str:
    """:func:`preference_judge` for the sweep (``benchmark_fixtures:preference_oracle``)."""
    return preference_judge(request, sampling)
