"""MMRB2 suite on its two released layouts (``build_from_hf.py``: PNG named ``{id}_{a|b|prompt}_{i}``;
``run_release.sh``: JPEG named ``{id}_{k}``), scripted judges scoring each response by its ``Q=`` marker or its
images' colours (``benchmark_fixtures.MMRB2``) and answering clean or malformed JSON (``STYLE=``). ``official.*``
is checked against a few lines that mirror ``api_pairwise_evaluator.py`` / ``evaluate.py`` (reading) and
``compute_accuracy.py`` (scoring), written here, on the completions of the samples file.

Project prompt: 13 pairs (the reasoning pair without ``prompt_content`` is left out); every pair right in both
orders but the two ``pos`` pairs (a position-biased judge: one order of two): 24 / 26 judgements, 11 / 13 pairs.
Published prompt (per task, correct / judged): t2i 5 / 8 (clean, fenced, ``tie`` judged wrong twice, ``pos`` one
of two), edit 2 / 4 (``"b"`` judged wrong, no ``better_response`` unjudged), interleaved 2 / 4 (``null``
unjudged, ``1`` judged wrong), reasoning 3 / 4 (a JSON list unjudged, ``pos`` one of two): Overall 12 / 20.
"""

from __future__ import annotations

import json
import re

import pytest
from benchmark_fixtures import (
    backend,
    color_score,
    config,
    preference_judge,
    recording,
    write_jsonl,
    write_mmrb2,
)
from support.published_layouts import checkout

from perception_judge.evaluation.benchmarks.common import BenchmarkDataError
from perception_judge.evaluation.benchmarks.mmrb2 import SUITE, better_response, parse_published, parse_strict

approx = pytest.approx
TASKS = ("t2i", "edit", "interleaved", "reasoning")


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    root = tmp_path_factory.mktemp("mmrb2")
    return {layout: write_mmrb2(root / layout, layout) for layout in ("hub", "source")}


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """The published prompts, stand-ins of ours at the repository's path: ``prompt=published`` reads them."""
    return {"prompt": "published", "prompt_source": str(checkout(tmp_path_factory.mktemp("src"), "mmrb2")[0])}


def read_lines(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def published_judgements(text: str, json_repair=None) -> list[dict]:
    """evaluate.py lines 45-63 / 143-146 over api_pairwise_evaluator.py lines 59-75 and 119, mirrored: the
    order's list of judgements, empty when the evaluator raised."""
    text = re.sub(r"^```(?:json)?\s*\n?", "", text.strip())
    text = re.sub(r"\n?```\s*$", "", text.strip())
    try:
        parsed = json_repair.loads(text) if json_repair else json.loads(text)
        return [{"judgement": parsed["better_response"]}]
    except Exception:
        return []


def task_accuracy(predictions: dict, pairs: list[dict]) -> tuple[int, int]:
    """compute_accuracy.py lines 77-103, mirrored: (correct, evaluated)."""
    correct = evaluated = 0
    for pair in pairs:
        pred = predictions.get(pair["id"])
        if pred is None:
            continue
        for key in ("forward", "reverse"):
            judgement = pred[key][0].get("judgement") if pred[key] else None
            if judgement:
                evaluated += 1
                if key == "reverse":
                    judgement = "B" if judgement == "A" else "A" if judgement == "B" else judgement
                correct += judgement == pair["chosen"]
    return correct, evaluated


def published_scores(root, samples_path, seed: int, json_repair=None) -> tuple[dict[str, float], dict]:
    """The published numbers of one seed from the suite's samples: (metrics, predictions by task)."""
    preds = {t: {} for t in TASKS}
    for s in read_lines(samples_path):
        if s["seed"] == seed:
            task, pid = s["item_id"].split(":", 1)
            key = "forward" if s["variant"] == "orig" else "reverse"
            preds[task].setdefault(pid, {})[key] = published_judgements(s["text"], json_repair)
    bench = {t: json.loads((root / "benchmark" / f"{t}.json").read_text())["pairs"] for t in TASKS}
    tally = {t: task_accuracy(preds[t], bench[t]) for t in TASKS}
    accs = {f"acc.by_category.{t}": c / n for t, (c, n) in tally.items()}
    correct, n = (sum(v) for v in zip(*tally.values()))
    return {"acc": correct / n, "acc.macro": sum(accs.values()) / 4, "n": n, **accs}, preds


@pytest.mark.parametrize("layout", ["hub", "source"])
def test_project_protocol_and_every_image_in_order(layouts, layout, tmp_path):
    judge = recording(preference_judge)
    seen = judge.seen

    res = SUITE(backend(judge), config(tmp_path, seeds=(0, 1), data_dir=str(layouts[layout])))
    m = res.metrics
    assert m["mean.acc"] == approx(24 / 26) and m["mean.acc_both_orders"] == approx(11 / 13)
    assert (
        m["mean.acc.by_category.t2i"] == approx(7 / 8) and m["mean.acc_both_orders.by_category.edit"] == 1.0
    )
    assert m["mean.order_consistency"] == approx(11 / 13) and m["parse_failure_rate"] == 0.0
    assert m["mean.acc_both_orders_ci95_lo"] < 11 / 13 < m["mean.acc_both_orders_ci95_hi"]
    assert res.counts["reasoning.skipped_no_prompt"] == 1 and res.counts["items"] == 13
    assert not any(k.startswith("official.") for k in m)
    # the interleaved pair 0: no prompt image; response a [img, text, img, text], b [text, img, text, img, img]
    orig, swap = [r for r in seen if ":interleaved:interleavedsrc_0_" in r.request_id][:2]
    colours = lambda r: [color_score(im) for im in r.images]  # noqa: E731  (red 8, blue 3, green 5, magenta 2)
    assert colours(orig) == [8, 8, 3, 5, 2] and colours(swap) == [3, 5, 2, 8, 8]
    blocks = [b["type"] for b in orig.messages[1]["content"]]
    assert blocks == ["text", "image", "text", "image", "text", "image", "text", "image", "image"]
    text = orig.messages[1]["content"][4]["text"]  # a's last text, b's heading and first text: one block
    assert text.index("step two") < text.index("## Answer of Assistant 2") < text.index("Once")
    # the edit pair 1 (prompt: image, then text): the prompt image first, as in training, in both orders
    orig, swap = [r for r in seen if ":edit:editsrc_1_" in r.request_id][:2]
    assert orig.messages[1]["content"][0] == {"type": "image"} and colours(orig) == [6, 8, 3]
    assert colours(swap) == [6, 3, 8]


@pytest.mark.parametrize("layout", ["hub", "source"])
def test_official_equals_the_published_scripts(layouts, published, layout, tmp_path):
    judge = recording(preference_judge)
    seen = judge.seen

    res = SUITE(
        backend(judge),
        config(tmp_path, seeds=(0, 1), data_dir=str(layouts[layout]), parser="published", **published),
    )
    for seed in (0, 1):
        expected, preds = published_scores(layouts[layout], res.samples_path, seed)
        per_seed = res.extra["per_seed"][f"seed{seed}"]
        assert {
            k.removeprefix("official."): v for k, v in per_seed.items() if k.startswith("official.")
        } == expected
        for task in TASKS:  # the predictions files the suite writes are compute_accuracy.py's input
            written = json.loads((tmp_path / f"mmrb2.official.seed{seed}.{task}.json").read_text())
            judgements = {
                p: {k: [j["judgement"] for j in v] for k, v in e.items()} for p, e in written.items()
            }
            assert judgements == {
                p: {k: [j["judgement"] for j in v] for k, v in e.items()} for p, e in preds[task].items()
            }
    m = res.metrics
    assert m["official.acc"] == approx(12 / 20) and m["official.acc.macro"] == approx(
        (5 / 8 + 2 / 4 + 2 / 4 + 3 / 4) / 4
    )
    assert m["official.acc.by_category.t2i"] == approx(5 / 8)
    # the published reading in the project's protocol: "tie", "b" and 1 judged and wrong (C), no value a failure
    assert m["parse_failure_rate"] == approx(6 / 26) and m["mean.pred_tie_rate"] == approx(6 / 20)
    # the published request: one user turn, the task's judge prompt, then every part under its label, in order
    req = next(
        r for r in seen if ":reasoning:reasoningsrc_1_" in r.request_id and r.meta["variant"] == "swap"
    )
    content = req.messages[0]["content"]
    assert [m["role"] for m in req.messages] == ["user"] and '"better_response"' in content[0]["text"]
    shown = [b.get("text", "<img>") for b in content[1:]]
    assert shown == ["[ORIGINAL PROMPT TO MODEL:]", "<img>", "Count the dots. STYLE=clean", "[RESPONSE A:]", "zoom:",
                     "<img>", "5 dots Q=9", "[RESPONSE B:]", "3 dots Q=2"]  # fmt: skip
    assert [color_score(im) for im in req.images] == [5, 6]
    assert res.protocol["official_files"][:4] == [f"mmrb2.official.seed0.{t}.json" for t in TASKS]


def _with_styles(root, styles: dict[tuple[str, int], str]):
    for (task, n), style in styles.items():
        path = root / "benchmark" / f"{task}.json"
        data = json.loads(path.read_text())
        part = data["pairs"][n]["prompt_content"]
        part[0][1] = re.sub(r"STYLE=\w+", f"STYLE={style}", part[0][1])
        path.write_text(json.dumps(data))
    return root


def test_completions_that_need_json_repair(published, tmp_path):
    """A thinking judge's JSON after </think>, or prose: json_repair reads them as the published code does (the
    think block's braces and all), and the published numbers equal the script's on them."""
    import json_repair

    root = _with_styles(write_mmrb2(tmp_path / "data"), {("t2i", 0): "think", ("edit", 2): "prose"})
    opts = {"data_dir": str(root), "parser": "published", **published}
    res = SUITE(backend(preference_judge), config(tmp_path / "o2", **opts))
    expected, _ = published_scores(root, res.samples_path, 0, json_repair)
    assert {k: res.metrics[f"official.{k}"] for k in expected} == approx(expected)
    assert (
        expected["acc.by_category.t2i"] == 5 / 8 and expected["acc.by_category.edit"] == 0.0
    )  # prose: unjudged


def test_position_only_judge(layouts, published, tmp_path):
    """Always "A": forward right where the human chose a, reverse (flipped to B) where b; the published pooled
    accuracy is 1/2 whatever the data, the project's both-orders accuracy 0."""
    res = SUITE(
        backend(lambda req, sampling: '{"better_response": "A"}'),
        config(tmp_path, data_dir=str(layouts["hub"]), parser="published", **published),
    )
    assert res.metrics["official.acc"] == 0.5 and res.metrics["mean.acc_both_orders"] == 0.0
    assert res.metrics["mean.acc_orig_order"] == approx(7 / 13)  # the share of pairs whose answer is A


def test_readers():
    assert better_response('```json\n{"better_response": "B"}\n```') == (True, "B")
    assert better_response('{"better_response": "tie"}') == (True, "tie")
    assert better_response('{"verdict": "A"}') == (False, None) and better_response("[1]") == (False, None)
    assert parse_published('{"better_response": "a"}', 2) == ([0.0, 0.0], None)  # judged, names neither
    assert parse_published('{"better_response": null}', 2)[0] is None
    assert parse_strict('<think>maybe {"better_response": "A"}</think>{"better_response": "B"}', 2) == (
        [0.0, 1.0],
        None,
    )
    assert parse_strict('{"better_response": "tie"}', 2)[0] is None


def test_malformed_files(tmp_path):
    root = write_mmrb2(tmp_path / "data")
    path = root / "benchmark" / "edit.json"
    data = json.loads(path.read_text())
    data["pairs"][1]["response_a"]["response_content"] = [["video", "x.mp4"]]
    path.write_text(json.dumps(data))
    with pytest.raises(BenchmarkDataError, match=r"edit\.json pair 1"):
        SUITE(backend(preference_judge), config(tmp_path / "o", data_dir=str(root)))
    res = SUITE(
        backend(preference_judge), config(tmp_path / "o", data_dir=str(root / "benchmark"), tasks="t2i")
    )
    assert res.counts["items"] == 4 and set(res.counts) >= {"t2i.rows", "t2i.skipped_no_gt"}
    (root / "benchmark" / "images" / "t2isrc_0_80043_modelx_0_modely_0_b_0.png").unlink()
    with pytest.raises(
        BenchmarkDataError, match=r"t2isrc_0_.*_b_0\.png"
    ):  # every image checked before any judging
        SUITE(backend(preference_judge), config(tmp_path / "o", data_dir=str(root), tasks="t2i,interleaved"))


def test_build_ppjd_refuses_mmrb2(layouts, tmp_path):
    """MMRB2's licence forbids training on it: its pairs (as JSONL, or the hub's parquet) never become PPJD
    records; other files are read as before."""
    from perception_judge.cli import main
    from perception_judge.ppjd.sources import TableSource

    pairs = json.loads((layouts["hub"] / "benchmark" / "t2i.json").read_text())["pairs"]
    jsonl = write_jsonl(tmp_path / "t2i.jsonl", pairs)
    with pytest.raises(ValueError, match=r"MMRB2.*CC BY-NC 4\.0.*should not be used for training"):
        TableSource([jsonl])
    import pyarrow as pa
    import pyarrow.parquet as pq

    hub = {
        "pair_id": ["x"],
        "prompt_text": ["p"],
        "response_a_text": ["a"],
        "response_b_text": ["b"],
        "chosen": ["A"],
    }
    pq.write_table(pa.table(hub), tmp_path / "test-00000-of-00001.parquet")
    with pytest.raises(ValueError, match="MMRB2"):
        TableSource([tmp_path / "test-00000-of-00001.parquet"])
    code = main(
        ["build-ppjd", "--input", str(jsonl), "--out", str(tmp_path / "ppjd"), "--teacher", "programmatic"]
    )
    assert code == 2 and not (tmp_path / "ppjd").exists()
    ok = write_jsonl(
        tmp_path / "ok.jsonl", [{"image": "a.png", "question": "q", "answer": "1", "response": "r"}]
    )
    assert TableSource([ok]).files == [ok]


def test_suites_through_the_sweep_and_report(layouts, published, tmp_path):
    """Both suites as cells of an evaluation: every reported metric declared, rows in results and the report."""
    from benchmark_fixtures import write_mmrb_json

    from perception_judge.evaluation import sweep
    from perception_judge.evaluation.plan import resolve
    from perception_judge.evaluation.report import write_report
    from perception_judge.evaluation.suites import SUITES

    mmrb = write_mmrb_json(tmp_path / "mmrb")
    job = dict(
        suites=["multimodal_rewardbench", "mmrb2"],
        seeds=[0],
        options={
            "multimodal_rewardbench": {
                "data_dir": str(mmrb),
                "prompt": "published",
                "prompt_source": str(checkout(tmp_path, "multimodal_rewardbench")[0]),
            },
            "mmrb2": {"data_dir": str(layouts["hub"]), "parser": "published", **published},
        },
        backend={"kind": "scripted"},
    )
    plan = resolve([job], tmp_path / "out")
    entry = sweep.ModelEntry(name="oracle", spec={"fn": "benchmark_fixtures:preference_oracle"})
    outcome, data = sweep.evaluate([entry], plan, report=False, progress=False)
    assert outcome.done == 2, [(c["cell"], c.get("error")) for c in outcome.cells]
    rows = {(r["suite"], r["metric"]): r["mean"] for r in data["rows"]}
    assert rows[("mmrb2", "official.acc")] == approx(12 / 20) and rows[("mmrb2", "mean.acc")] is not None
    assert [k for k in rows if SUITES[k[0]].metric(k[1]) is None] == []
    assert SUITES["mmrb2"].metric("official.acc").chance == 0.5
    assert SUITES["mmrb2"].metric("mean.acc_both_orders").chance == 0.25
    report = write_report(tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "mmrb2" in md and "multimodal_rewardbench" in md and "official.acc" in md
    assert report["tables"]["mmrb2"]["protocol_of"]["official.acc"] == "official"
