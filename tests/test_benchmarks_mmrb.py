"""Multimodal RewardBench suite on its two released layouts (the prepared ``data/all_data.json`` with images under
``data/images/...``, and a hub mirror's parquet with the image embedded), scripted judges writing clean and
malformed verdicts (``benchmark_fixtures.MMRB``: a ``STYLE=`` per item). ``official.*`` is checked against a few
lines that mirror ``scripts/2_get_accuracy.py``, written here, on the completions of the samples file.

Project prompt, marker judge (the answer with the higher ``Q=`` wins): every pair right in both orders except
mmmu-s_12 (the judge prefers the wrong answer: 0 of 2), PAIRS_occupations_5 (position-biased: 1 of 2) and, on
seed 1, RealworldQA_8 (``FLIP``: 0 of 2). Seed 0: 17 / 20, seed 1: 15 / 20.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict

import pytest
from benchmark_fixtures import (
    MMRB,
    backend,
    config,
    mmrb_records,
    preference_judge,
    recording,
    write_mmrb_json,
    write_mmrb_parquet,
)
from support.published_layouts import checkout

from perception_judge.core.options import OptionError
from perception_judge.evaluation.benchmarks.common import BenchmarkDataError, BenchmarkFileMissing
from perception_judge.evaluation.benchmarks.multimodal_rewardbench import (
    NAME,
    SUITE,
    category_of,
    parse_published,
    parse_strict,
)

approx = pytest.approx


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    root = tmp_path_factory.mktemp("mmrb")
    return {"json": write_mmrb_json(root / "repo"), "parquet": write_mmrb_parquet(root / "hub")}


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """The published prompt, a stand-in of ours at the repository's path: ``prompt=published`` reads it."""
    return {"prompt": "published", "prompt_source": str(checkout(tmp_path_factory.mktemp("src"), NAME)[0])}


def published_accuracy(answers: list[dict]) -> dict[str, float]:
    """scripts/2_get_accuracy.py, mirrored: extract_judgment with its random draw, micro accuracy per category."""
    random.seed(123)
    accs = defaultdict(list)
    for ex in answers:
        out = ex["output"]
        pred = "A" if "[[A]]" in out else "B" if "[[B]]" in out else ("A" if random.random() < 0.5 else "B")
        acc = int(pred == ex["Label"])
        accs["all"].append(acc)
        category = ex["Meta"]["Category"]
        if category == "safety":
            category = "safety/bias" if ex["ID"].lower().startswith("pairs") else "safety/toxicity"
        elif category == "reasoning":
            category = "reasoning/math" if ex["ID"].lower().startswith("math") else "reasoning/coding"
        accs[category].append(acc)
    return {k: sum(v) / len(v) for k, v in accs.items()}


def read_lines(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def answers_from_samples(samples_path, seed: int) -> list[dict]:
    """The script's input built from the benchmark file and the suite's samples (Output1 shown first)."""
    texts = {
        s["item_id"]: s["text"]
        for s in read_lines(samples_path)
        if (s["seed"], s["variant"]) == (seed, "orig")
    }
    return [
        {"ID": r["ID"], "Label": "B" if r["Better"] == "Output2" else "A", "output": texts[r["ID"]],
         "Meta": {"Category": r["Category"]}}
        for r in mmrb_records() if r["Better"] is not None
    ]  # fmt: skip


@pytest.mark.parametrize("layout", ["json", "parquet"])
def test_project_protocol_on_both_layouts(layouts, layout, tmp_path):
    judge = recording(preference_judge)
    seen = judge.seen

    res = SUITE(
        backend(judge), config(tmp_path, seeds=(0, 1), data_dir=str(layouts[layout]), aggregation="all")
    )
    m = res.metrics
    assert m["mean.acc"] == approx((17 / 20 + 15 / 20) / 2)
    assert m["vote.acc"] == approx(7 / 10)  # over seeds x orders: the FLIP and the position-biased pairs tie
    assert res.extra["per_seed"]["seed0"]["acc"] == approx(17 / 20)
    assert m["mean.acc_both_orders"] == approx((8 / 10 + 7 / 10) / 2)
    assert m["mean.acc.by_category.vqa"] == approx((1 + 4 / 6) / 2)  # RealworldQA flips on seed 1
    assert m["mean.acc.by_category.safety_bias"] == approx(0.5)  # the position-biased pair
    assert m["mean.acc.by_category.knowledge"] == 0.0 and m["parse_failure_rate"] == 0.0
    lo, hi = res.extra["per_seed"]["seed0"]["acc_ci95_lo"], res.extra["per_seed"]["seed0"]["acc_ci95_hi"]
    assert lo < 17 / 20 < hi and round(lo, 3) == 0.640 and round(hi, 3) == 0.948  # Wilson, n = 20
    assert not any(k.startswith("official.") for k in m)  # the published script reads only [[A]] / [[B]]
    assert res.counts["skipped_no_gt"] == 1 and res.counts["items"] == 10 and res.counts["judgments"] == 40
    # the project's prompt: the image first (as in training), then the question and the two answers; the swap
    orig, swap = [r for r in seen if r.request_id.startswith("multimodal_rewardbench:nocaps_13062:")][:2]
    assert [b["type"] for b in orig.messages[1]["content"]] == ["image", "text"] and len(orig.images) == 1
    text = [r.messages[1]["content"][1]["text"] for r in (orig, swap)]
    assert text[0].index("Q=3 a mug") < text[0].index("Q=8") and text[1].index("Q=8") < text[1].index("Q=3")
    lines = read_lines(res.samples_path)
    assert len(lines) == 40 and {"item_id", "variant", "text", "seed"} <= set(lines[0])


@pytest.mark.parametrize("layout", ["json", "parquet"])
def test_official_equals_the_published_script(layouts, published, layout, tmp_path):
    res = SUITE(
        backend(preference_judge),
        config(tmp_path, seeds=(0, 1), data_dir=str(layouts[layout]), parser="published", **published),
    )
    for seed in (0, 1):
        answers = answers_from_samples(res.samples_path, seed)
        expected = published_accuracy(answers)
        got = res.extra["per_seed"][f"seed{seed}"]
        assert got["official.acc"] == expected["all"] and got["official.n"] == 10
        for category, acc in expected.items():
            if category != "all":
                slug = category.replace("/", "_")
                assert got[f"official.acc.by_category.{slug}"] == acc, category
        # the file the suite writes is the script's input: the same lines
        written = read_lines(tmp_path / f"multimodal_rewardbench.official.seed{seed}.jsonl")
        assert [(w["ID"], w["Label"], w["output"], w["Meta"]["Category"]) for w in written] == [
            (a["ID"], a["Label"], a["output"], a["Meta"]["Category"]) for a in answers
        ]
    m = res.metrics
    assert m["official.acc"] == approx(
        (res.extra["per_seed"]["seed0"]["official.acc"] + res.extra["per_seed"]["seed1"]["official.acc"]) / 2
    )
    # the published reading feeds the project's protocol: no verdict is a failure there, not a draw
    assert m["parse_failure_rate"] == approx(10 / 20)  # none x2, lower, spaced, empty: 5 pairs x 2 orders
    # "both" and "think" hold [[A]]: the published rule says A whatever else is there
    samples = read_lines(res.samples_path)
    think = next(s for s in samples if s["item_id"] == "EMMA-Coding_3" and s["variant"] == "orig")
    assert "[[A]]" in think["text"] and think["scores"] == [1.0, 0.0]
    assert res.protocol["official_rule"].startswith("2_get_accuracy.py")
    assert res.protocol["official_files"] == [
        f"multimodal_rewardbench.official.seed{s}.jsonl" for s in (0, 1)
    ]


def test_published_prompt_and_strict_parser(layouts, published, tmp_path):
    judge = recording(preference_judge)
    seen = judge.seen

    res = SUITE(backend(judge), config(tmp_path, data_dir=str(layouts["json"]), **published))
    # strict: "both" (two verdicts) fails too; "think" is read after the reasoning: B, right
    assert res.metrics["parse_failure_rate"] == approx(12 / 20)
    assert res.metrics["official.acc"] is not None  # the script's number does not depend on the parser option
    req = seen[0]
    assert [m["role"] for m in req.messages] == ["user"]  # one user turn, as the published script sends it
    assert [b["type"] for b in req.messages[0]["content"]] == ["text", "image"]  # the text, then the image
    text = req.messages[0]["content"][0]["text"]
    assert (
        "[User Question]\nQuestion 0? STYLE=clean" in text
        and "[The Start of Assistant A's Answer]\nQ=3" in text
    )
    assert "[[A]]" in text and "[[B]]" in text


def test_readers():
    assert category_of("PAIRS_occupations_1", "safety") == "safety/bias"
    assert category_of("hateful_3", "safety") == "safety/toxicity"
    assert category_of("MathVista_7", "reasoning") == "reasoning/math"
    assert category_of("EMMA-Coding_2", "reasoning") == "reasoning/coding"
    assert category_of("nocaps_1", "open_generation/correctness_task") == "open_generation/correctness_task"
    assert parse_published("x [[B]] then [[A]]", 2) == ([1.0, 0.0], None)
    assert parse_published("[[b]]", 2)[0] is None and parse_published("[[ B ]]", 2)[0] is None
    assert parse_published("B wins", 2, reasoning="so [[B]]") == ([0.0, 1.0], None)  # the whole completion
    assert parse_strict("<think>[[A]]?</think>[[B]]", 2) == ([0.0, 1.0], None)
    assert parse_strict("[[A]] or [[B]]", 2)[0] is None and parse_strict("<think>[[A]]", 2)[0] is None


def test_options_and_errors(layouts, tmp_path):
    run = lambda **o: SUITE(backend(preference_judge), config(tmp_path, **o))  # noqa: E731
    with pytest.raises(OptionError, match="prompt=published"):
        run(data_dir=str(layouts["json"]), parser="published")
    with pytest.raises(BenchmarkFileMissing, match=r"all_data\.json"):
        run(data_dir=str(tmp_path / "nowhere"))
    records = mmrb_records()
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "all_data.json").write_text(
        json.dumps([{k: v for k, v in r.items() if k != "Text"} for r in records])
    )
    with pytest.raises(BenchmarkDataError, match="no column"):
        run(data_dir=str(tmp_path / "d"))
    records[2]["Text"] = None  # the release file before 0_download_data.py filled it in
    (tmp_path / "d" / "all_data.json").write_text(json.dumps(records))
    with pytest.raises(BenchmarkDataError, match=r"all_data\.json row 2.*0_download_data"):
        run(data_dir=str(tmp_path / "d"))
    (tmp_path / "d" / "all_data.json").write_text(json.dumps(mmrb_records()))  # no images beside it
    with pytest.raises(BenchmarkDataError, match=r"13062\.jpg"):  # images checked before any judging
        run(data_dir=str(tmp_path / "d" / "all_data.json"))
    res = run(data_dir=str(layouts["json"]), limit=3, missing_images="skip")
    assert res.counts["items"] == 3 and len(MMRB) == 11
