"""MLLM-as-a-Judge suite: fixtures in the benchmark's format, a scripted judge, hand-computed metrics.

Expected values (see tests/benchmark_fixtures.py for the records):

pair, seed 0: preds [A, B, C, B, fail, C] vs human [A, B, C, A, C, A]; seed 1 flips item 4 to A.
score: ceil(Q/2) = coco [1, 3, 3] vs human [1, 2, 3]; mathvista [4, fail, 5] vs [4, 2, 5].
batch: coco BCAD vs BCAD (0), BAC (tie 4/4 -> later slot first) vs ABC (2/3); mathvista CBA vs CBA (0),
fail vs ACB (1.0).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from benchmark_fixtures import backend, config, marker_judge, write_jsonl, write_mllm_judge

from perception_judge.evaluation.benchmarks.common import BenchmarkDataError, BenchmarkFileMissing
from perception_judge.evaluation.benchmarks.mllm_judge import SUITE as run
from perception_judge.evaluation.benchmarks.pair_sources import batch_gt
from perception_judge.evaluation.suites import get_suite

approx = pytest.approx


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return write_mllm_judge(tmp_path_factory.mktemp("mllm"))


@pytest.fixture(scope="module")
def result(bench, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    seen_sizes = set()

    def judge(req, sampling):
        seen_sizes.update(im.size for im in req.images)
        return marker_judge()(req, sampling)

    res = run(backend(judge), config(out, seeds=(0, 1), data_dir=str(bench), aggregation="all"))
    res.extra["seen_sizes"] = seen_sizes
    return res


def test_pair_metrics_mean_over_seeds(result):
    m = result.metrics
    # strict: seed0 coco 3/3, mathvista 0/3; seed1 mathvista 1/3
    assert m["mean.pair.acc_with_tie.micro"] == approx((3 / 6 + 4 / 6) / 2)
    assert m["mean.pair.acc_with_tie.macro"] == approx(((1 + 0) / 2 + (1 + 1 / 3) / 2) / 2)
    assert m["mean.pair.acc_with_tie.by_dataset.coco"] == approx(1.0)
    assert m["mean.pair.acc_with_tie.by_dataset.mathvista"] == approx((0 + 1 / 3) / 2)
    # compat: the failure (human C) counts as C, i.e. right
    assert m["mean.pair.acc_with_tie_compat.micro"] == approx((4 / 6 + 5 / 6) / 2)
    assert m["mean.pair.acc_with_tie_compat.macro"] == approx(((1 + 1 / 3) / 2 + (1 + 2 / 3) / 2) / 2)
    # without tie: items 1, 2, 4, 6
    assert m["mean.pair.acc_without_tie.micro"] == approx((2 / 4 + 3 / 4) / 2)
    assert m["mean.pair.acc_without_tie.by_dataset.mathvista"] == approx((0 + 1 / 2) / 2)
    assert m["pair.parse_failure_rate"] == approx(2 / 12)
    assert result.counts["pair.items"] == 6
    assert result.counts["pair.skipped_no_gt"] == 2
    assert result.counts["pair.judgments"] == 12 and result.counts["pair.parse_failures"] == 2


def test_pair_vote_and_flex(result):
    m = result.metrics
    # vote: item 4 gets B + A = 0 -> C (wrong); the failed item abstains twice -> failure
    assert m["vote.pair.acc_with_tie.micro"] == approx(3 / 6)
    assert m["vote.pair.acc_with_tie_compat.micro"] == approx(4 / 6)
    assert m["vote.pair.acc_without_tie.micro"] == approx(2 / 4)
    # flex: failures vote C; headline macro as test/evaluate.py prints it: each subset rounded to 3 decimals,
    # then their mean rounded ("Ave")
    assert m["flex.pair.acc_with_tie.macro"] == round((1 + round(1 / 3, 3)) / 2, 3) == 0.666
    assert (
        m["flex.pair.acc_with_tie.by_dataset.coco"] == 0.333
        or m["flex.pair.acc_with_tie.by_dataset.mathvista"] == 0.333
    )
    assert m["flex.pair.acc_without_tie.macro"] == approx((1 + 0) / 2)


def test_score_pearson(result):
    m = result.metrics
    coco = math.sqrt(3) / 2  # x = [1, 3, 3], y = [1, 2, 3]
    assert m["mean.score.pearson.by_dataset.coco"] == approx(coco)
    assert m["mean.score.pearson.by_dataset.mathvista"] == approx(1.0)  # parsed: [4, 5] vs [4, 5]
    assert m["mean.score.pearson.micro"] == approx(9 / math.sqrt(88))  # x = [1,3,3,4,5], y = [1,2,3,4,5]
    assert m["mean.score.pearson.macro"] == approx((coco + 1) / 2)
    compat = 29 / math.sqrt(868)  # x = [4, -1, 5], y = [4, 2, 5]
    assert m["mean.score.pearson_compat.by_dataset.mathvista"] == approx(compat)
    assert m["vote.score.pearson.micro"] == approx(9 / math.sqrt(88))
    # flex: cumulative lists over identical runs give the same r; failures are -1
    assert m["flex.score.pearson.macro"] == round((coco + compat) / 2, 3)  # the mean of the unrounded subsets
    # the unmodified script reads v[0] of the 1-10 answer as it is: coco [2, 6, 5], mathvista [8, -1, 10]
    raw_coco = 3 / math.sqrt(78 / 9 * 2)  # x - mean: [-7/3, 5/3, 2/3], y - mean: [-1, 0, 1]
    assert m["flex.score.pearson_unmapped.by_dataset.coco"] == round(raw_coco, 3) == 0.721
    assert m["flex.score.pearson_unmapped.macro"] == 0.854
    assert m["score.parse_failure_rate"] == approx(2 / 12)
    assert result.counts["score.skipped_no_gt"] == 1


def test_batch_levenshtein(result):
    m = result.metrics
    assert m["mean.batch.norm_levenshtein.by_dataset.coco"] == approx((0 + 2 / 3) / 2)
    assert m["mean.batch.norm_levenshtein.by_dataset.mathvista"] == approx((0 + 1) / 2)
    assert m["mean.batch.norm_levenshtein.micro"] == approx((0 + 2 / 3 + 0 + 1) / 4)
    assert m["mean.batch.norm_levenshtein.macro"] == approx((1 / 3 + 1 / 2) / 2)
    assert m["mean.batch.norm_levenshtein_parsed.micro"] == approx((0 + 2 / 3 + 0) / 3)
    assert m["flex.batch.norm_levenshtein.macro"] == round((1 / 3 + 1 / 2) / 2, 3)
    assert m["batch.tied_scores_rate"] == approx(1 / 4)  # item 2 ties, of 4 parsed-or-not judgments per seed
    # the GitHub field human_answer and the evaluators' human are both read; short / missing rankings skipped
    assert result.counts["batch.items"] == 4
    assert result.counts["batch.skipped_gt_short"] == 2


def test_protocol_samples_and_images(result):
    assert result.extra["seen_sizes"] == {(448, 448)}  # the default pixel policy: 448x448 squares
    p = result.protocol
    assert p["score_mapping"].startswith("ceil(s/2)")
    assert set(p["aggregation"]) == {"mean", "vote", "flex"}
    assert p["seeds"] == [0, 1] and any("seeds" in d for d in p["deviations_from_published"])
    lines = [json.loads(x) for x in Path(result.samples_path).read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 12 + 12 + 8
    assert {ln["setting"] for ln in lines} == {"pair", "score", "batch"}
    assert all({"seed", "scores", "error", "text", "gt", "dataset"} <= set(ln) for ln in lines)
    assert result.extra["per_seed"]["seed1"]["pair.acc_with_tie.micro"] == approx(4 / 6)
    # what the report reads: the ranking metric, and the lower-is-better ones the suite declares
    assert p["primary_metric"] == "mean.pair.acc_without_tie.micro"
    lower = {m for m in result.metrics if run.metric(m).higher_is_better is False}
    assert {"pair.parse_failure_rate", "mean.batch.norm_levenshtein.micro"} <= lower
    assert "mean.pair.acc_with_tie.micro" not in lower


def test_registry_limit_and_single_setting(bench, tmp_path):
    fn = get_suite("mllm_judge")
    res = fn(backend(marker_judge()), config(tmp_path, data_dir=str(bench), settings="pair", limit=3))
    assert res.metrics["mean.pair.acc_with_tie.micro"] == approx(1.0)
    assert res.counts["pair.items"] == 3
    assert not any(k.startswith("mean.score") for k in res.metrics)


def test_missing_file_is_named(bench, tmp_path):
    (tmp_path / "Benchmark").mkdir()
    (tmp_path / "Benchmark" / "pair.jsonl").write_text((bench / "pair.jsonl").read_text())
    with pytest.raises(BenchmarkFileMissing, match=r"score\.jsonl"):
        run(backend(marker_judge()), config(tmp_path, data_dir=str(tmp_path / "Benchmark")))


def test_bad_json_line_is_named(tmp_path):
    f = tmp_path / "pair.jsonl"
    f.write_text('{"instruction": "q"}\n{not json\n')
    with pytest.raises(BenchmarkDataError, match=r"pair\.jsonl:2"):
        run(backend(marker_judge()), config(tmp_path, pair_file=str(f), settings="pair"))


def test_missing_image_error_and_skip(tmp_path):
    bench = write_mllm_judge(tmp_path / "data", with_images=False)
    with pytest.raises(BenchmarkDataError, match=r"image.1\.jpg"):
        run(backend(marker_judge()), config(tmp_path, data_dir=str(bench), settings="pair"))
    res = run(
        backend(marker_judge()), config(tmp_path, data_dir=str(bench), settings="pair", missing_images="skip")
    )
    assert res.counts["pair.skipped_missing_image"] == 6
    assert res.counts["pair.items"] == 0
    assert res.metrics["mean.pair.acc_with_tie.micro"] is None  # no data is None, never 0.0


def test_unknown_option_and_aggregation(bench, tmp_path):
    with pytest.raises(ValueError, match="unknown option"):
        run(backend(marker_judge()), config(tmp_path, data_dir=str(bench), datadir="x"))
    with pytest.raises(ValueError, match="aggregation"):
        run(backend(marker_judge()), config(tmp_path, data_dir=str(bench), aggregation="median"))


def test_batch_gt_field_forms():
    assert batch_gt({"human_answer": "CDAB"}) == "CDAB"
    assert batch_gt({"human": "C>D>A>B"}) == "CDAB"
    assert batch_gt({"human": None, "human_answer": "BA C"}) == "BAC"
    assert batch_gt({}) is None


def test_bad_record_is_named(tmp_path):
    f = write_jsonl(tmp_path / "pair.jsonl", [{"instruction": "q", "answer1": 3, "answer2": {"answer": "x"}}])
    with pytest.raises(BenchmarkDataError, match=r"pair\.jsonl record 1: 'answer1'"):
        run(backend(marker_judge()), config(tmp_path, pair_file=str(f), settings="pair"))
