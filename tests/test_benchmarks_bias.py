"""Position, verbosity and self-enhancement suites on offline pair sources, with hand-computed metrics."""

from __future__ import annotations

import re

import pytest
from benchmark_fixtures import backend, config, image, marker_judge, write_jsonl, write_mllm_judge

from perception_judge.evaluation.benchmarks import position, self_enhancement, verbosity
from perception_judge.evaluation.benchmarks.common import BenchmarkFileMissing
from perception_judge.evaluation.benchmarks.verbosity import LEAD_INS, pad_response

approx = pytest.approx


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory):
    root = tmp_path_factory.mktemp("pairs")
    image().save(root / "p.png")
    return write_jsonl(
        root / "pairs.jsonl",
        [
            {
                "id": "p1",
                "question": "Which?",
                "responses": ["Q=8 good", "Q=3 bad"],
                "preferred": 0,
                "image": "p.png",
            },
            {
                "id": "p2",
                "question": "Which?",
                "responses": ["Q=2 POS", "Q=9"],
                "preferred": "B",
                "image": "p.png",
            },
            {"id": "p3", "question": "Which?", "responses": ["Q=5 a", "Q=5 b"], "preferred": None},
            {"id": "p4", "question": "Which?", "responses": ["FAIL", "Q=4"], "preferred": 0},
        ],
    )


# ----------------------------------------------------------------------------------------------------------
# Position
# ----------------------------------------------------------------------------------------------------------


def test_position_metrics(pairs_file, tmp_path):
    res = position.SUITE(backend(marker_judge()), config(tmp_path, seeds=(0, 1), pairs_file=str(pairs_file)))
    m = res.metrics
    # un-swapped verdicts: p1 (A, A), p2 (A, B), p3 (C, C), p4 (fail, fail)
    assert m["mean.consistency_rate"] == approx(2 / 3)
    assert m["mean.consistency_rate_strict"] == approx(2 / 4)
    # slot verdicts: p1 A then B, p2 A and A, p3 C, C -> decisive A, B, A, A
    assert m["mean.first_position_win_rate"] == approx(3 / 4)
    assert m["mean.position_score_bias"] == approx((5 - 5 + 7 + 7 + 0 + 0) / 6)
    assert m["mean.pred_tie_rate"] == approx(2 / 6)
    # human preference on p1 (A), p2 (B), p4 (A)
    assert m["mean.acc_orig_order"] == approx(1 / 3)
    assert m["mean.acc_swapped_order"] == approx(2 / 3)
    assert m["mean.acc"] == approx(3 / 6)
    assert m["mean.acc_both_orders"] == approx(1 / 3)
    assert m["parse_failure_rate"] == approx(4 / 16)
    assert res.counts["items"] == 4 and res.counts["judgments"] == 16
    assert res.protocol["source"] == "pairs_jsonl"


def test_position_on_mllm_judge_pairs_and_an_unbiased_judge(tmp_path):
    bench = write_mllm_judge(tmp_path / "mj")
    res = position.SUITE(backend(marker_judge()), config(tmp_path, data_dir=str(bench)))
    m = res.metrics
    # all 6 pairs: the failure is excluded; the rest are judged on content only
    assert m["mean.consistency_rate"] == approx(1.0)
    assert m["mean.first_position_win_rate"] == approx(0.5)
    assert m["mean.position_score_bias"] == approx(0.0)
    assert res.protocol["source"] == "mllm_judge"


def test_position_on_a_ppjd_split(tmp_path):
    from perception_judge.core.protocol import build_messages
    from perception_judge.core.trainset import rows_to_dataset

    texts = {"r_c": "Q=9 correct", "r_rp": "Q=5 misperceived", "r_rp_r": "Q=2 both wrong"}

    def row(kinds, protocol):
        responses = [texts[k] for k in kinds]
        return {
            "prompt": build_messages(protocol, "How many?", responses),
            "images": [image()],
            "protocol": protocol,
            "ground_truth": "",
            "question": "How many?",
            "responses": responses,
            "kinds": kinds,
            "record_key": "rec1",
            "image_group": "g1",
        }

    rows = [row(["r_rp_r", "r_c", "r_rp"], "batch"), row(["r_rp", "r_c"], "pair")]  # the pair repeats a pair
    (tmp_path / "ts").mkdir()
    rows_to_dataset(rows).to_parquet(str(tmp_path / "ts" / "validation.parquet"))
    res = position.SUITE(backend(marker_judge()), config(tmp_path, trainset_dir=str(tmp_path / "ts")))
    assert res.counts["pairs"] == 3  # r_c/r_rp, r_c/r_rp_r, r_rp/r_rp_r, de-duplicated
    assert res.metrics["mean.acc"] == approx(1.0) and res.metrics["mean.consistency_rate"] == approx(1.0)
    with pytest.raises(BenchmarkFileMissing, match="nope"):
        position.SUITE(backend(marker_judge()), config(tmp_path, trainset_dir=str(tmp_path / "nope")))


def test_position_needs_a_source(tmp_path):
    with pytest.raises(ValueError, match="no pair source"):
        position.SUITE(backend(marker_judge()), config(tmp_path))


# ----------------------------------------------------------------------------------------------------------
# Verbosity
# ----------------------------------------------------------------------------------------------------------

LONG = (
    "The picture shows three red cubes on a wooden table. Two of them are stacked. "
    "The third one stands to the left of the stack.\nFinal answer: 3"
)


def test_padding_is_deterministic_redundant_and_keeps_the_final_line():
    a = pad_response(LONG, "How many red cubes are there?", "k1", seed=0)
    assert a == pad_response(LONG, "How many red cubes are there?", "k1", seed=0)
    assert a != pad_response(LONG, "How many red cubes are there?", "k2", seed=0)
    assert 1.5 * len(LONG) <= len(a) <= 2.0 * len(LONG) + 80  # at most one sentence past the target
    assert a.splitlines()[-1] == "Final answer: 3"
    assert a.startswith(LEAD_INS)
    assert "three red cubes on a wooden table" in a and "The third one stands to the left" in a
    # no new facts: no digit that the response and the question lack
    assert set(re.findall(r"\d", a)) <= set(re.findall(r"\d", LONG))
    short = pad_response("Yes.", "", "k", seed=0)
    assert len(short) > len("Yes.") and "Yes." in short
    with pytest.raises(ValueError):
        pad_response(LONG, "q", "k", ratio_min=2.5, ratio_max=2.0)


@pytest.fixture(scope="module")
def verbosity_pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("verb")
    filler = " This sentence only makes the answer longer for the test."
    return write_jsonl(
        root / "pairs.jsonl",
        [
            {"id": "v1", "question": "Q?", "responses": ["Q=6" + filler, "Q=3" + filler], "preferred": 0},
            {"id": "v2", "question": "Q?", "responses": ["Q=2" + filler, "Q=4" + filler], "preferred": 1},
        ],
    )


def test_verbosity_with_a_length_loving_judge(verbosity_pairs, tmp_path):
    judge = marker_judge(verbose_bonus=3, lead_ins=LEAD_INS)
    res = verbosity.SUITE(backend(judge), config(tmp_path, pairs_file=str(verbosity_pairs)))
    m = res.metrics
    # self: every padded copy scores +3 and wins in both orders
    assert m["mean.self.concise_preferred_rate"] == approx(0.0)
    assert m["mean.self.padded_preferred_rate"] == approx(1.0)
    assert m["mean.self.tie_rate"] == approx(0.0)
    assert m["mean.self.mean_score_shift"] == approx(3.0)
    # flip: v1 (6 vs 3 -> 6 vs 6: a tie, no flip), v2 (2 vs 4 -> 5 vs 4: the padded worse wins)
    assert m["mean.flip.flip_rate_to_padded"] == approx(2 / 4)
    assert m["mean.flip.acc_unpadded"] == approx(1.0)
    assert m["mean.flip.acc_worse_padded"] == approx(0.0)
    assert m["mean.flip.mean_score_shift_worse"] == approx(3.0)
    assert 1.5 <= m["mean_length_ratio"] <= 2.5
    assert res.counts["judgments"] == 2 * (2 * 2 + 4)


def test_verbosity_unbiased_judge(verbosity_pairs, tmp_path):
    res = verbosity.SUITE(
        backend(marker_judge()), config(tmp_path, pairs_file=str(verbosity_pairs), modes="self")
    )
    m = res.metrics
    assert m["mean.self.tie_rate"] == approx(1.0)
    assert m["mean.self.concise_preferred_rate"] == approx(0.0)
    assert m["mean.self.mean_score_shift"] == approx(0.0)
    assert not any(k.startswith("mean.flip") for k in m)


# ----------------------------------------------------------------------------------------------------------
# Self-enhancement
# ----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def self_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("self")
    bench = root / "Benchmark"
    (root / "image").mkdir()
    image().save(root / "image" / "1.jpg")

    def pair(i, n1, a1, n2, a2, human):
        return {
            "pair_id": i,
            "image_path": "image/1.jpg",
            "original_dataset": "coco",
            "instruction": "Q?",
            "answer1": {"name": n1, "answer": a1},
            "answer2": {"name": n2, "answer": a2},
            "human": human,
        }

    write_jsonl(
        bench / "pair.jsonl",
        [
            pair(1, "gpt4", "Q=5 [G]", "llava", "Q=6", "B"),
            pair(2, "llava", "Q=3", "gpt4", "Q=8 [G]", "B"),
            pair(3, "cogvlm", "Q=4", "gemini", "Q=2", "A"),
            pair(4, "gpt4", "Q=4 [G]", "GPT-4", "Q=5 [G]", "B"),
            pair(5, "gpt4", "Q=2 [G]", "llava", "Q=9", "B"),
        ],
    )

    def score(i, name, ans, human):
        return {
            "score_id": i,
            "image_path": "1.jpg",
            "original_dataset": "coco",
            "instruction": "Q?",
            "answer": ans,
            "name": name,
            "human": human,
        }

    write_jsonl(
        bench / "score.jsonl",
        [
            score(1, "gpt4", "Q=6 [G]", 3),
            score(2, "gpt4", "Q=4 [G]", 3),
            score(3, "llava", "Q=6", 3),
            score(4, "llava", "Q=2", 2),
        ],
    )
    return bench


def test_self_enhancement(self_data, tmp_path):
    judge = marker_judge(own_bonus=2)
    res = self_enhancement.SUITE(backend(judge), config(tmp_path, data_dir=str(self_data), own_model="GPT-4"))
    m = res.metrics
    # kept pairs 1, 2, 5; judge verdicts (both orders): own, own, other
    assert m["mean.pair.own_win_rate_judge"] == approx(4 / 6)
    assert m["pair.own_win_rate_human"] == approx(1 / 3)
    assert m["mean.pair.self_preference"] == approx(4 / 6 - 1 / 3)
    assert m["mean.pair.mean_score_gap"] == approx((1 + 7 - 5) / 3)
    assert m["mean.pair.acc_own_preferred"] == approx(1.0)
    assert m["mean.pair.acc_other_preferred"] == approx(0.5)
    assert m["mean.pair.acc_gap"] == approx(0.5)
    assert m["mean.pair.self_preference_abs"] == approx(1 / 3)
    assert res.protocol["primary_metric"] == "mean.pair.self_preference_abs"
    assert self_enhancement.SUITE.metric("mean.pair.self_preference").ideal == 0.0  # declared by the suite
    assert res.counts["pair.skipped_no_own"] == 1 and res.counts["pair.skipped_both_own"] == 1
    # score: own raw 8, 6; others 6, 2; residuals vs human (ceil(s/2) - h): own +1, 0; others 0, -1
    assert m["mean.score.mean_own"] == approx(7.0)
    assert m["mean.score.mean_other"] == approx(4.0)
    assert m["mean.score.gap"] == approx(3.0)
    assert m["mean.score.gap_vs_human"] == approx(1.0)
    assert m["score.human_gap"] == approx(0.5)


def test_self_enhancement_needs_own_model(self_data, tmp_path):
    with pytest.raises(ValueError, match="own_model"):
        self_enhancement.SUITE(backend(marker_judge()), config(tmp_path, data_dir=str(self_data)))
