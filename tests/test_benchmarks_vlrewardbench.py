"""VL-RewardBench suite: a ``datasets`` folder, parquet and JSONL in the benchmark's format.

Judgments per pair (orig, swapped un-swapped), marker judge, seed 0:
mathverse_1 (reasoning, A): A, A | RLAIF-V_2 (hallucination, B): B, B | wildvision_3 (general, A): C, C |
hallucination_pair_4 (A, position-biased): A, B | vlfeedback_5 (general, B): fail, fail |
unknown_6 (general by default, A): A, A | mathverse_7: equal ranks -> skipped.
"""

from __future__ import annotations

import pytest
from benchmark_fixtures import (
    VLRB,
    backend,
    config,
    image,
    marker_judge,
    recording,
    vlrb_rows,
    write_jsonl,
    write_vlrb_disk,
)

from perception_judge.evaluation.benchmarks.common import BenchmarkDataError, BenchmarkFileMissing
from perception_judge.evaluation.benchmarks.pair_sources import category_of, preferred_from_ranking
from perception_judge.evaluation.benchmarks.vlrewardbench import SUITE as run

approx = pytest.approx


@pytest.fixture(scope="module")
def disk(tmp_path_factory):
    return write_vlrb_disk(tmp_path_factory.mktemp("vlrb") / "vlrb")


def check_metrics(m, prefix="mean."):
    assert m[prefix + "acc"] == approx(7 / 12)
    assert m[prefix + "acc.by_category.reasoning"] == approx(1.0)
    assert m[prefix + "acc.by_category.hallucination"] == approx(3 / 4)
    assert m[prefix + "acc.by_category.general"] == approx(2 / 6)
    assert m[prefix + "acc.macro"] == approx((1 + 3 / 4 + 1 / 3) / 3)
    assert m[prefix + "acc_orig_order"] == approx(4 / 6)
    assert m[prefix + "acc_swapped_order"] == approx(3 / 6)
    assert m[prefix + "acc_both_orders"] == approx(3 / 6)
    assert m[prefix + "order_consistency"] == approx(4 / 5)
    assert m[prefix + "pred_tie_rate"] == approx(2 / 10)
    assert m["parse_failure_rate"] == approx(2 / 12)


def test_datasets_folder_both_orders(disk, tmp_path):
    judge = recording(marker_judge())
    seen = judge.seen

    res = run(backend(judge), config(tmp_path, seeds=(0, 1), data_dir=str(disk), aggregation="mean,vote"))
    check_metrics(res.metrics)
    # vote over seeds x orders: item 4 -> A + B = C (wrong), item 5 fails
    assert res.metrics["vote.acc"] == approx(3 / 6)
    assert res.metrics["vote.acc.macro"] == approx((1 + 1 / 2 + 1 / 3) / 3)
    assert res.counts["skipped_no_gt"] == 1 and res.counts["category_defaulted"] == 1
    assert res.counts["items"] == 6 and res.counts["judgments"] == 24
    # each pair in both orders, one image each, the swapped prompt lists the responses reversed
    first = [r for r in seen if r.request_id.startswith("vlrewardbench:mathverse_1:")][:2]
    assert [r.meta["variant"] for r in first] == ["orig", "swap"]
    assert all(len(r.images) == 1 and r.n_scores == 2 for r in first)
    text = [r.messages[1]["content"][-1]["text"] for r in first]
    assert text[0].index("Q=8") < text[0].index("Q=3") and text[1].index("Q=3") < text[1].index("Q=8")


def test_parquet_and_jsonl(tmp_path):
    from datasets import Dataset

    Dataset.from_list(vlrb_rows()).to_parquet(str(tmp_path / "test.parquet"))
    res = run(backend(marker_judge()), config(tmp_path / "o1", data_dir=str(tmp_path)))
    check_metrics(res.metrics)

    paths = []
    for i in range(len(VLRB)):
        image().save(tmp_path / f"im{i}.png")
        paths.append(f"im{i}.png")
    f = write_jsonl(tmp_path / "vlrb.jsonl", vlrb_rows(paths))
    res = run(backend(marker_judge()), config(tmp_path / "o2", data_dir=str(f)))
    check_metrics(res.metrics)


def test_categories_and_ranking():
    assert category_of({"id": "mmmu-pro_12"}) == ("reasoning", False)
    assert category_of({"id": "RLHF-V_3"}) == ("hallucination", False)
    assert category_of({"id": "VLFeedback_9"}) == ("general", False)
    assert category_of({"id": "x_1", "category": "Reasoning"}) == ("reasoning", False)
    assert category_of({"id": "somethingelse"}) == ("general", True)
    assert preferred_from_ranking([0, 1]) == "A"
    assert preferred_from_ranking([1, 0]) == "B"
    assert preferred_from_ranking([1, 1]) is None
    assert preferred_from_ranking(None) is None


def test_errors_name_the_file(tmp_path):
    with pytest.raises(BenchmarkFileMissing, match="nowhere"):
        run(backend(marker_judge()), config(tmp_path, data_dir=str(tmp_path / "nowhere")))
    with pytest.raises(BenchmarkFileMissing, match=r"test\.parquet"):
        run(backend(marker_judge()), config(tmp_path, data_dir=str(tmp_path)))
    bad = tmp_path / "broken.parquet"
    bad.write_bytes(b"not a parquet file")
    with pytest.raises(BenchmarkDataError, match=r"broken\.parquet"):
        run(backend(marker_judge()), config(tmp_path, data_dir=str(bad)))
    rows = vlrb_rows([f"missing{i}.png" for i in range(len(VLRB))])
    f = write_jsonl(tmp_path / "v.jsonl", rows)
    with pytest.raises(BenchmarkDataError, match=r"missing0\.png"):
        run(backend(marker_judge()), config(tmp_path, data_dir=str(f)))
    rows[0]["response"] = ["only one"]
    f = write_jsonl(tmp_path / "v2.jsonl", rows)
    with pytest.raises(BenchmarkDataError, match=r"v2\.jsonl row 0"):
        run(backend(marker_judge()), config(tmp_path, data_dir=str(f)))


def test_missing_split_in_datasetdict(disk, tmp_path):
    with pytest.raises(BenchmarkFileMissing, match="split 'validation'"):
        run(backend(marker_judge()), config(tmp_path, data_dir=str(disk), split="validation"))


def test_backend_errors_are_not_parse_failures(disk, tmp_path):
    from benchmark_fixtures import answers_of

    from perception_judge.evaluation.backends.scripted import ScriptedBackend
    from perception_judge.evaluation.base import error_result

    class FlakyBackend(ScriptedBackend):
        def judge(self, requests, sampling):
            return [
                error_result(r, "server timeout") if any("FAIL" in a for a in answers_of(r)) else res
                for r, res in zip(requests, super().judge(requests, sampling))
            ]

    res = run(FlakyBackend(marker_judge()), config(tmp_path, data_dir=str(disk)))
    assert res.counts["backend_errors"] == 2 and res.counts.get("parse_failures", 0) == 0
    assert res.metrics["parse_failure_rate"] == 0.0
    assert res.metrics["mean.acc"] == approx(7 / 12)  # a failed call is still a missing (wrong) prediction


def test_official_accuracy_is_cal_py_strict_majority_over_every_judgement(disk, tmp_path):
    """cal.py's rule next to the project's (seed 0, two judgements an item): the wildvision tie (2 doesntMatch) and
    the FAIL item are doesntMatch items, the POS item (1 agree, 1 reject) is neither agree nor reject: all three
    leave the official denominator; the project's vote.acc counts them as wrong."""
    from perception_judge.evaluation.benchmarks.vlrb_cal import classify

    res = run(backend(marker_judge()), config(tmp_path, seeds=(0,), data_dir=str(disk), aggregation="mean"))
    m = res.metrics
    assert m["official.acc"] == approx(1.0) and m["official.n"] == 3
    assert m["official.acc.macro"] == approx(1.0) and m["official.acc"] >= m["mean.acc"]
    assert m["official.n_undecided"] == 3
    # a strict majority of all k judgements, ties and failures counted in k: 3 agree, 2 reject and 1 failure out
    # of 6 is no majority (the project's vote, the sign of #agree - #reject, calls it right)
    assert classify(3, 2, 1) == "other"
    assert classify(4, 1, 1) == "agree" and classify(1, 3, 0) == "reject"
    assert classify(2, 0, 2) == "other" and classify(0, 1, 2) == "doesntMatch"


def test_duplicate_ids_get_distinct_requests(tmp_path):
    from datasets import Dataset

    rows = vlrb_rows()
    rows[1]["id"] = rows[0]["id"]  # the hub release has rows sharing an id
    Dataset.from_list(rows).to_parquet(str(tmp_path / "test.parquet"))
    seen = []

    def judge(req, sampling):
        seen.append(req.request_id)
        return marker_judge()(req, sampling)

    res = run(backend(judge), config(tmp_path / "o", data_dir=str(tmp_path)))
    assert len(seen) == len(set(seen)) == 2 * 6 and res.counts["duplicate_ids"] == 1
    assert res.metrics["mean.acc"] == approx(7 / 12)  # both rows judged: the same overall accuracy
