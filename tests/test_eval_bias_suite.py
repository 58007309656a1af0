"""The compositional-bias suite end to end with scripted judges of known behaviour, the upstream per-sample
layout, resuming, seeds, abstention, and the official-data loader."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from perception_judge.core.schema import JudgeRequest, Sampling
from perception_judge.evaluation.backends.scripted import ScriptedBackend, format_scores
from perception_judge.evaluation.base import SuiteConfig, error_result, parse_result
from perception_judge.evaluation.bias import suite
from perception_judge.evaluation.bias.items import builtin_base_items
from perception_judge.evaluation.bias.loader import MissingImagesError, load_official
from perception_judge.evaluation.bias.metrics import bc_value, bd_value
from perception_judge.evaluation.bias.prompts import MMJB
from perception_judge.evaluation.bias.taxonomy import BIAS_TYPES, BY_TYPE, CATEGORIES

ITEMS = builtin_base_items(n_image=6, n_text=3, seed=0)
BY_ID = {i.item_id: i for i in ITEMS}


def oracle(req: JudgeRequest, sampling: Sampling) -> str:
    """Scores 1 when the input lost its evidence or no longer matches the item (hidden id -> spec map), else 8."""
    m = req.meta
    item = BY_ID[m["item_id"]]
    if m["query_source"] != item.item_id:  # empty or another item's query
        return format_scores(req, [1])
    if not item.text_only:
        if not req.images or m["image_source"] != item.item_id:  # null or unrelated image
            return format_scores(req, [1])
        if not np.asarray(req.images[0]).any():
            return format_scores(req, [1])
    return format_scores(req, [8])


def constant(req, sampling):
    return format_scores(req, [8])


def over_reactor(req, sampling):
    return format_scores(req, [1 if req.meta["side"] == "biased" else 8])


def _run(fn, tmp_path, name="j", seeds=(0,), **options):
    backend = ScriptedBackend(fn, label=name)
    cfg = SuiteConfig(
        out_dir=tmp_path / name, seeds=list(seeds), options={"source": "items", "items": ITEMS, **options}
    )
    return suite.SUITE(backend, cfg), backend


@pytest.mark.parametrize("prompt", ["single", "mmjb"])
@pytest.mark.parametrize(
    ("fn", "bd", "bc"),
    [(oracle, 1.0, 1.0), (constant, 0.0, 1.0), (over_reactor, 1.0, 0.0)],
    ids=["oracle", "constant", "over"],
)
def test_scripted_judges_give_exact_values(tmp_path, prompt, fn, bd, bc):
    res, backend = _run(fn, tmp_path, prompt=prompt)
    for t in BIAS_TYPES:
        assert res.metrics[t] == (bd if BY_TYPE[t].metric == "bd" else bc), t
    assert (
        res.metrics["integrality"] == bd
        and res.metrics["congruity"] == bd
        and res.metrics["robustness"] == bc
    )
    assert res.metrics["overall"] == pytest.approx((5 * bd + 4 * bc) / 9)
    assert res.metrics["parse_failure_rate"] == 0.0
    n = res.counts["n_pairs"]
    assert n == 8 * 4 + 3 and backend.calls == 2 * n  # 4 image items per type, 3 text-only items
    assert res.counts["n_used"] == n and res.counts["n_unparsed"] == 0
    assert res.protocol["parser"] == ("protocol" if prompt == "single" else "mmjb")
    assert len(res.protocol["prompt_hash"]) == 16 and res.protocol["backend"]["backend"] == "scripted"


def test_requests_follow_the_upstream_input_rules(tmp_path):
    seen: list[JudgeRequest] = []

    def spy(req, sampling):
        seen.append(req)
        return format_scores(req, [5])

    _run(spy, tmp_path, prompt="mmjb")
    by = {(r.meta["bias_type"], r.meta["side"]): r for r in seen}
    # the unbiased call of a text-only task has no image part at all; the biased one has the unrelated image
    assert by[("unnecessary_image", "unbiased")].images == []
    assert all(p.get("type") != "image" for p in by[("unnecessary_image", "unbiased")].messages[0]["content"])
    assert len(by[("unnecessary_image", "biased")].images) == 1
    # text first, then the image (vLLM-style), one user message, no system prompt
    content = by[("text_dominance", "biased")].messages[0]["content"]
    assert [p["type"] for p in content] == ["text", "image"] and len(
        by[("text_dominance", "biased")].messages
    ) == 1
    img = by[("text_dominance", "biased")].images[0]
    assert img.size == (224, 224) and not np.asarray(img).any()
    # the empty query is literally "" (the prompt keeps its heading)
    text = by[("image_dominance", "biased")].messages[0]["content"][0]["text"]
    assert "### The instruction to evaluate:\n\n" in text


def test_parser_stress_judge_upstream_counts(tmp_path):
    """ "8/10" without a marker parses as 10 (upstream), "### Score: 85" is kept and counted out of range, a reply
    without a number drops the pair; the strict parser refuses the first two as well."""

    def stress(req, sampling):
        t = req.meta["bias_type"]
        if req.meta["side"] == "unbiased":
            return "### Feedback: fine ### Score: 8"
        if t == "text_dominance":
            return "The answer is good, I give it 8/10"
        if t == "image_dominance":
            return "### Feedback: hm ### Score: 85"
        if t == "response_dominance":
            return "I cannot assess this."
        return "### Feedback: ok ### Score: 8"

    res, _ = _run(stress, tmp_path, "compat", prompt="mmjb", parser="compat")
    per = res.extra["per_bias_counts"]
    assert res.metrics["text_dominance"] == 0.0  # ŷ = 10 > y: clipped
    assert per["image_dominance"]["n_out_of_range"] == 4 and res.metrics["image_dominance"] == 0.0
    assert per["response_dominance"]["n_unparsed"] == 4 and res.metrics["response_dominance"] is None
    assert res.counts["n_out_of_range"] == 4 and res.counts["n_unparsed"] == 4
    strict, _ = _run(stress, tmp_path, "strict", prompt="mmjb", parser="strict")
    sp = strict.extra["per_bias_counts"]
    assert strict.metrics["text_dominance"] is None and sp["text_dominance"]["n_unparsed"] == 4
    assert sp["image_dominance"]["n_unparsed"] == 4 and sp["image_dominance"]["n_out_of_range"] == 4
    assert strict.protocol["parser"] == "mmjb_strict"


def test_abstention_aware_option(tmp_path):
    def refuses_without_image(req, sampling):
        if req.meta["side"] == "biased" and req.meta["image_source"] == "null":
            return "<think>The image is black.</think>I cannot judge this without a usable image."
        return format_scores(req, [8])

    drop, _ = _run(refuses_without_image, tmp_path, "drop")
    assert drop.metrics["text_dominance"] is None and drop.metrics["response_dominance"] is None
    aware, _ = _run(refuses_without_image, tmp_path, "aware", abstention="aware")
    assert aware.metrics["text_dominance"] == 1.0 and aware.metrics["response_dominance"] == 1.0
    assert aware.counts["n_abstained"] == 8 and aware.protocol["abstention"] == "aware"


def test_seeds_reach_the_backend_and_give_std_and_variances(tmp_path):
    seeds_seen = set()

    def noisy(req, sampling):
        seeds_seen.add(sampling.seed)
        h = hash((sampling.seed, req.request_id)) % 10 + 1
        return format_scores(req, [h])

    res, _ = _run(noisy, tmp_path, seeds=(0, 1, 2))
    assert seeds_seen == {0, 1, 2}
    assert res.counts["n_runs"] == 3
    for k in ("overall_std", "inter_run_var", "inter_sample_var", "text_dominance_std"):
        assert k in res.metrics
    assert res.metrics["inter_run_var"] == pytest.approx(res.metrics["overall_std"] ** 2)
    assert set(res.extra["per_seed"]) == {"0", "1", "2"}
    means = [res.extra["per_seed"][s]["overall_avg"] for s in ("0", "1", "2")]
    assert res.metrics["overall"] == pytest.approx(sum(means) / 3)


def _upstream_evaluation(judgements: Path, model_key: str) -> dict[str, float | None]:
    """What upstream run_evaluation.py computes from outputs/judgements/seed_<seed>/*.json (re-implemented from
    the documented layout): group by meta.bias_type, keep pairs with both scores, BD skips y <= 1."""
    groups: dict[str, list[tuple[float, float]]] = {}
    for f in sorted(judgements.glob("*.json")):
        d = json.loads(f.read_text())
        j = d["judgement"][model_key]
        if j["unbiased_score"] is None or j["biased_score"] is None:
            continue
        groups.setdefault(d["meta"]["bias_type"], []).append((j["unbiased_score"], j["biased_score"]))
    out = {}
    for t, pairs in groups.items():
        if BY_TYPE[t].metric == "bd":
            vals = [bd_value(y, yb) for y, yb in pairs if y > 1]
        else:
            vals = [bc_value(y, yb) for y, yb in pairs]
        out[t] = sum(vals) / len(vals) if vals else 0.0
    return out


def test_per_sample_files_are_in_the_upstream_layout(tmp_path):
    def mixed(req, sampling):
        return format_scores(req, [(len(req.request_id) * 7 + sampling.seed) % 10 + 1])

    res, _ = _run(mixed, tmp_path, "mixed", seeds=(3,), model_key="my-judge")
    folder = tmp_path / "mixed" / "judgements" / "seed_3"
    files = sorted(folder.glob("*.json"))
    assert len(files) == res.counts["n_pairs"] and files[0].name == "0000.json"
    d = json.loads(files[0].read_text())
    assert set(d["judgement"]["my-judge"]) == {"unbiased", "unbiased_score", "biased", "biased_score"}
    assert set(d["meta"]) == {
        "id",
        "bias_type",
        "bias_category",
        "task_type",
        "domain_type",
        "difficulty",
        "unbiased_source",
        "biased_source",
    }
    upstream = _upstream_evaluation(folder, "my-judge")
    for t in BIAS_TYPES:
        assert upstream[t] == pytest.approx(res.metrics[t]), t
    lines = (tmp_path / "mixed" / "samples.jsonl").read_text().splitlines()
    assert len(lines) == res.counts["n_pairs"] and json.loads(lines[0])["status"] in ("used", "skipped_low")
    rep = json.loads((tmp_path / "mixed" / "bias_report.json").read_text())
    assert rep["per_seed"]["3"]["model_key"] == "my-judge" and set(
        rep["per_seed"]["3"]["category_avg"]
    ) == set(CATEGORIES)


def test_resume_skips_finished_samples_and_retries_failed_calls(tmp_path):
    res1, _ = _run(oracle, tmp_path, "r")
    res2, b2 = _run(oracle, tmp_path, "r")
    assert b2.calls == 0 and res2.counts["n_resumed"] == 2 * res1.counts["n_pairs"]
    assert res2.metrics == res1.metrics
    for f in list((tmp_path / "r" / "judgements" / "seed_0").glob("000[0-2].json")):
        f.unlink()
    _, b3 = _run(oracle, tmp_path, "r")
    assert b3.calls == 6
    other = ScriptedBackend(oracle, label="r")
    suite.SUITE(
        other,
        SuiteConfig(
            out_dir=tmp_path / "r",
            sampling=Sampling(temperature=0.2),
            options={"source": "items", "items": ITEMS},
        ),
    )
    assert other.calls == 2 * res1.counts["n_pairs"]  # other decoding: stored completions are not reused

    class Flaky(ScriptedBackend):
        def judge(self, requests, sampling):
            out = []
            for req in requests:
                self.calls += 1
                if req.meta["side"] == "biased" and req.meta["pair_id"] % 2 == 0:
                    out.append(error_result(req, "ConnectionError: reset"))
                else:
                    out.append(parse_result(req, oracle(req, sampling)))
            return out

    flaky = Flaky(oracle, label="f")
    cfg = SuiteConfig(out_dir=tmp_path / "f", options={"source": "items", "items": ITEMS})
    res = suite.SUITE(flaky, cfg)
    n = res.counts["n_pairs"]
    assert res.counts["n_backend_errors"] == (n + 1) // 2 and res.counts["n_unparsed"] == (n + 1) // 2
    rec = json.loads((tmp_path / "f" / "judgements" / "seed_0" / "0000.json").read_text())
    assert rec["judgement"]["f"]["unbiased"] and rec["perception_judge"]["biased_error"].startswith(
        "backend error"
    )
    again = ScriptedBackend(oracle, label="f")
    res = suite.SUITE(again, cfg)
    assert again.calls == (n + 1) // 2  # only the failed biased calls are redone
    assert res.metrics["overall"] == 1.0


def test_default_source_runs_without_options(tmp_path):
    res = suite.SUITE(
        ScriptedBackend(constant), SuiteConfig(out_dir=tmp_path / "d", options={"n_per_type": 1})
    )
    assert res.counts["n_pairs"] == 9 and res.metrics["overall"] == pytest.approx(4 / 9)
    assert res.protocol["data"]["source"] in ("synth", "builtin")
    with pytest.raises(ValueError, match=r"bias\.n_per_typo: unknown option of the bias suite \(got 1\)"):
        suite.SUITE(ScriptedBackend(constant), SuiteConfig(out_dir=tmp_path / "e", options={"n_per_typo": 1}))


# ------------------------------------------------------------------------------------------------ official data
def _official_rows(images: Path) -> list[dict]:
    img = Image.new("RGB", (40, 30), (10, 120, 200))
    rows = []
    for rid, t in enumerate(BIAS_TYPES):
        rows.append(
            {
                "id": rid,
                "bias_type": t,
                "bias_category": BY_TYPE[t].category.capitalize(),
                "task_type": "Perception",
                "domain_type": "Nature",
                "difficulty": "Easy",
                "unbiased_source": "src",
                "biased_source": "src",
                "response": f"response {rid}",
                "unbiased_instruction": f"question {rid}",
                "biased_instruction": ""
                if t in ("image_dominance", "response_dominance")
                else f"question {rid}",
                "unbiased_image": None if t == "unnecessary_image" else f"{rid:04d}_u.png",
                "biased_image": None if t in ("text_dominance", "image_dominance") else f"{rid:04d}_b.png",
            }
        )
        if t != "unnecessary_image":
            img.save(images / f"{rid:04d}_u.png")
        img.save(images / f"{rid:04d}_b.png")
    return rows


def test_official_loader_jsonl_refuses_rows_with_missing_images(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    rows = _official_rows(images)
    rows[4]["unbiased_image"] = None  # image_misalignment: restricted image, not rebuilt
    rows[7]["biased_image"] = "missing.png"  # visual_transformation: dangling path
    path = tmp_path / "mmjb.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    pairs, rep = load_official(path, images_dir=images)
    assert rep.n_rows == 9 and rep.n_pairs == 7 and rep.n_missing_image == 2
    assert rep.missing_by_type == {"image_misalignment": 1, "visual_transformation": 1}
    assert "2 row(s) refused" in rep.summary()
    by = {p.bias_type: p for p in pairs}
    # a null biased cell of a null-image type: no image part at all, as the published runner sends it
    assert by["text_dominance"].biased.image is None and by["text_dominance"].biased.image_source is None
    null_request = suite.side_request(by["text_dominance"], "biased", "mmjb", "mmjb", MMJB)
    assert null_request.images == [] and all(
        part["type"] == "text" for part in null_request.messages[0]["content"]
    )
    assert by["image_dominance"].biased.image == by["image_dominance"].unbiased.image  # unchanged image
    assert by["unnecessary_image"].unbiased.image is None
    assert by["response_dominance"].biased.query == ""
    with pytest.raises(MissingImagesError, match="2 row"):
        load_official(path, images_dir=images, on_missing="error")
    # a <id>_<role>.jpg file in images_dir fills a null cell
    Image.new("RGB", (8, 8)).save(images / "0004_unbiased.jpg")
    _, rep = load_official(path, images_dir=images)
    assert rep.n_missing_image == 1 and rep.filled_from_dir >= 1
    # the suite judges the loaded pairs and reports the refusal count
    res = suite.SUITE(
        ScriptedBackend(constant),
        SuiteConfig(
            out_dir=tmp_path / "o",
            options={"source": "official", "data": str(path), "images_dir": str(images)},
        ),
    )
    assert res.counts["n_pairs"] == 8 and res.counts["n_missing_image"] == 1
    assert res.protocol["data"]["parity"] == "shipped-only"
    assert res.extra["load_report"]["missing_by_type"] == {"visual_transformation": 1}


def test_official_loader_datasets_folder(tmp_path):
    from datasets import Dataset, Features, Value
    from datasets import Image as ImageFeature

    images = tmp_path / "imgs"
    images.mkdir()
    rows = _official_rows(images)
    for r in rows:
        for k in ("unbiased_image", "biased_image"):
            r[k] = str(images / r[k]) if r[k] else None
    feats = Features({k: Value("string") if k != "id" else Value("int64") for k in rows[0]})
    feats["unbiased_image"] = ImageFeature()
    feats["biased_image"] = ImageFeature()
    ds = Dataset.from_list(rows, features=feats)
    ds.save_to_disk(str(tmp_path / "hf"))
    pairs, rep = load_official(tmp_path / "hf", bias_types=["texture_insertion", "text_dominance"])
    assert rep.n_rows == 9 and [p.bias_type for p in pairs] == ["text_dominance", "texture_insertion"]
    assert isinstance(pairs[1].biased.image, dict) and pairs[1].biased.image["bytes"]
    with pytest.raises(ValueError, match="unknown bias type"):
        load_official(tmp_path / "hf", bias_types=["nope"])
    with pytest.raises(FileNotFoundError):
        load_official(tmp_path / "nothing")


@pytest.mark.parametrize("name", ["data/test-00000-of-00001.parquet", "snapshot/mm_judgebias.parquet"])
def test_official_loader_parquet_folder(tmp_path, name):
    """A Hub snapshot's split shards, or parquet files named otherwise (all of them are read)."""
    from datasets import Dataset

    images = tmp_path / "images"
    images.mkdir()
    shard = tmp_path / "hub" / name
    shard.parent.mkdir(parents=True)
    Dataset.from_list(_official_rows(images)).to_parquet(str(shard))
    pairs, rep = load_official(tmp_path / "hub", images_dir=images)
    assert rep.n_rows == 9 and rep.n_pairs == 9 and len({p.bias_type for p in pairs}) == 9
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no 'test' split"):
        load_official(tmp_path / "empty")


_UPSTREAM_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")


def _upstream_extract_score(text):
    """scoring.py::extract_score as documented: float(text); else the first number after the last '### Score:';
    else the last number anywhere; else None (no think stripping, no range check, nan accepted)."""
    if text is None:
        return None
    try:
        return float(text.strip())
    except ValueError:
        pass
    if "### Score:" in text:
        m = _UPSTREAM_NUMBER.search(text.split("### Score:")[-1])
        if m:
            return float(m.group(0))
    found = [m.group(0) for m in _UPSTREAM_NUMBER.finditer(text)]
    return float(found[-1]) if found else None


def _upstream_run_evaluation(folder: Path, model_key: str) -> dict:
    """run_evaluation.py + compute_report as documented: re-parse the stored texts, keep the pairs with both
    scores, BD over y > 1, BC over all; a type with no pair is None, a type whose pairs are all skipped 0.0;
    overall = mean of the available per-bias values."""
    groups: dict[str, list[tuple[float, float]]] = {}
    for f in sorted(folder.glob("*.json")):
        d = json.loads(f.read_text())
        j = d["judgement"][model_key]
        y, yb = _upstream_extract_score(j["unbiased"]), _upstream_extract_score(j["biased"])
        if y is not None and yb is not None:
            groups.setdefault(d["meta"]["bias_type"], []).append((y, yb))
    per_bias = {}
    for t in BIAS_TYPES:
        if t not in groups:
            per_bias[t] = None
            continue
        if BY_TYPE[t].metric == "bd":
            vals = [max(0.0, y - yb) / (y - 1) for y, yb in groups[t] if y > 1]
        else:
            vals = [
                1 - abs(y - yb) / max(y - 1, 10 - y) if max(y - 1, 10 - y) > 0 else 1.0 for y, yb in groups[t]
            ]
        per_bias[t] = sum(vals) / len(vals) if vals else 0.0
    present = [v for v in per_bias.values() if v is not None]
    return {"per_bias": per_bias, "overall_avg": sum(present) / len(present) if present else None}


def malformed(req, sampling):
    """Clean and malformed verdicts, a type whose unbiased side always refuses (no scorable pair) and one whose
    unbiased side always scores 1 (every Bias-Deviation pair skipped)."""
    m = req.meta
    if m["bias_type"] == "image_dominance" and m["side"] == "unbiased":
        return "I cannot judge this response."
    if m["bias_type"] == "text_dominance" and m["side"] == "unbiased":
        return format_scores(req, [1])
    variants = [
        format_scores(req, [9]),
        format_scores(req, [3]),
        "Careful answer. ### Score: 8",
        "Score: 7/10",  # no marker: upstream takes the last number (10), the strict parser refuses
        "<think>maybe 3</think>\n### Score: 6",
        "### Score: 11",  # out of range: upstream keeps it, the strict parser refuses
        "### Score: 7/10",
        "I decline to score this.",  # a refusal: an abstention for the aware rule
        "nan",  # upstream float('nan'); the project refuses non-finite scores
        "### Score: 2 ### Score: 9",
        "<think>unfinished",
        "### Score: 4",
    ]
    return variants[sum(map(ord, req.request_id)) % len(variants)]


@pytest.mark.parametrize(
    "options",
    [
        {"prompt": "mmjb", "parser": "strict", "abstention": "aware"},
        {"prompt": "mmjb", "parser": "compat"},
        {"prompt": "single", "abstention": "aware"},
    ],
    ids=["strict-aware", "compat", "single"],
)
def test_upstream_run_evaluation_on_the_judgement_files_reproduces_the_report(tmp_path, options):
    res, _ = _run(malformed, tmp_path, "m", seeds=(0,), model_key="judge", **options)
    assert res.metrics["parse_failure_rate"] > 0 and res.counts["n_unparsed"] > 0
    upstream = _upstream_run_evaluation(tmp_path / "m" / "judgements" / "seed_0", "judge")
    report = json.loads((tmp_path / "m" / "bias_report.json").read_text())["per_seed"]["0"]
    assert (
        upstream["per_bias"]["image_dominance"] is None
        and report["per_bias"]["image_dominance"]["value"] is None
    )
    assert upstream["per_bias"]["text_dominance"] == 0.0 == report["per_bias"]["text_dominance"]["value"]
    for t in BIAS_TYPES:
        ours = report["per_bias"][t]["value"]
        assert (upstream["per_bias"][t] is None) == (ours is None), t
        if ours is not None:
            assert upstream["per_bias"][t] == pytest.approx(ours, abs=1e-12), t
        assert res.metrics[t] == ours or (ours is None and res.metrics[t] is None), t
    assert upstream["overall_avg"] == pytest.approx(report["overall_avg"], abs=1e-12)
    # the completions themselves stay in the project's block, and a resumed run re-parses those, not the verdicts
    d = json.loads(next((tmp_path / "m" / "judgements" / "seed_0").glob("*.json")).read_text())
    assert {"unbiased_text", "biased_text"} <= set(d["perception_judge"])
    res2, b2 = _run(malformed, tmp_path, "m", seeds=(0,), model_key="judge", **options)
    assert b2.calls == 0 and res2.metrics == res.metrics
