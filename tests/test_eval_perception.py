"""The perceptual-sensitivity suite on a held-out PPJD split."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from support.fake_run import make_validation_set

from perception_judge.core.schema import Sampling
from perception_judge.evaluation import perception, stats
from perception_judge.evaluation.backends.scripted import ScriptedBackend, format_scores
from perception_judge.evaluation.base import SuiteConfig

QUALITY = {"r_c": 9, "r_rp": 5, "r_rp_r": 2}


@pytest.fixture(scope="module")
def val_set(tmp_path_factory):
    return make_validation_set(tmp_path_factory.mktemp("ts"), n=3, seed=0)


def test_kendall_tau_b_and_pair_verdicts():
    assert perception.kendall_tau_b([9, 5, 2], [3, 2, 1]) == 1.0
    assert perception.kendall_tau_b([2, 5, 9], [3, 2, 1]) == -1.0
    assert perception.kendall_tau_b([9, 9, 2], [3, 2, 1]) == pytest.approx(2 / (2**0.5 * 3**0.5))
    assert perception.kendall_tau_b([5, 5, 5], [3, 2, 1]) == 0.0
    assert perception.pair_verdict([9, 5], 0) == "correct"
    assert perception.pair_verdict([5, 9], 0) == "wrong"
    assert perception.pair_verdict([7, 7], 1) == "tie"
    assert perception.pair_verdict(None, 0) == "fail"


def _reference_tau_b(x, y):
    """The hand-written (C - D) / sqrt((P - Tx)(P - Ty)) that scipy replaced."""
    c = d = tx = ty = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = x[i] - x[j], y[i] - y[j]
        tx += dx == 0
        ty += dy == 0
        if dx and dy:
            c += (dx > 0) == (dy > 0)
            d += (dx > 0) != (dy > 0)
    p = len(x) * (len(x) - 1) // 2
    denom = math.sqrt((p - tx) * (p - ty))
    return (c - d) / denom if denom else 0.0


def test_kendall_tau_b_equals_the_reference_formula_on_ties():
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(0, 8)
        x = [float(rng.randint(1, 4)) for _ in range(n)]  # few values: many ties
        y = [float(rng.randint(1, 3)) for _ in range(n)]
        got = perception.kendall_tau_b(x, y)
        assert isinstance(got, float) and got == pytest.approx(_reference_tau_b(x, y), abs=1e-12)
    assert perception.kendall_tau_b([], []) == perception.kendall_tau_b([3], [1]) == 0.0
    assert perception.kendall_tau_b([3, 2, 1], [7, 7, 7]) == 0.0
    with pytest.raises(ValueError, match="equal length"):
        perception.kendall_tau_b([1, 2], [1, 2, 3])


def test_records_merge_rows_of_one_record(val_set):
    recs = perception.load_records(val_set)
    assert len(recs) == 3
    for r in recs:
        assert set(r.responses) == {"r_c", "r_rp", "r_rp_r"} and len(r.images) == 1
    assert len(perception.load_records(val_set / "validation.parquet", limit=2)) == 2
    with pytest.raises(FileNotFoundError, match="not found"):
        perception.load_records(val_set / "nothing")


def test_records_error_names_the_missing_split(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"validation\.parquet"):
        perception.load_records(tmp_path)


def test_perfect_judge_scores_one_everywhere(val_set, tmp_path):
    seen = []

    def perfect(req, sampling):
        seen.append(req)
        return format_scores(req, [QUALITY[k] for k in req.meta["kinds"]])

    res = perception.SUITE(
        ScriptedBackend(perfect), SuiteConfig(out_dir=tmp_path, seeds=[0, 1], options={"data": str(val_set)})
    )
    for name in (
        "pair_acc_c_vs_rp",
        "pair_acc_c_vs_rp_r",
        "pair_acc",
        "pair_consistency",
        "batch_ranking_reward",
        "batch_kendall_tau",
        "single_verdict_acc",
    ):
        assert res.metrics[name] == 1.0, name
    assert res.metrics["pair_parse_fail_rate"] == 0.0 and res.metrics["pair_acc_std"] == 0.0
    # each pair judged in both orders; r_c in each slot once
    pairs = [r for r in seen if r.meta["protocol"] == "pair"]
    assert len(pairs) == 2 * 2 * 3 * 2  # 2 comparisons x 2 orders x 3 records x 2 seeds
    assert sum(r.meta["kinds"][0] == "r_c" for r in pairs) == len(pairs) // 2
    assert res.counts["n_records"] == 3 and res.counts["n_pair_judgements"] == 24
    assert res.protocol["primary_metric"] == "pair_acc" and res.samples_path.endswith("samples.jsonl")
    assert [m for m in res.metrics if perception.SUITE.metric(m) is None] == []  # every metric is declared


def test_position_biased_and_constant_judges(val_set, tmp_path):
    def first_wins(req, sampling):  # prefers whatever is in slot A
        return format_scores(req, list(range(9, 9 - req.n_scores, -1)))

    res = perception.SUITE(
        ScriptedBackend(first_wins),
        SuiteConfig(out_dir=tmp_path / "a", options={"data": str(val_set), "protocols": ["pair"]}),
    )
    assert res.metrics["pair_acc"] == 0.5 and res.metrics["pair_consistency"] == 0.0
    assert res.metrics["batch_ranking_reward"] is None  # protocol not run: None, never 0.0

    res = perception.SUITE(
        ScriptedBackend(lambda r, s: format_scores(r, [7] * r.n_scores)),
        SuiteConfig(out_dir=tmp_path / "b", options={"data": str(val_set), "tau": 6}),
    )
    assert (
        res.metrics["pair_acc"] == 0.5 and res.metrics["pair_consistency"] == 1.0
    )  # a tie earns half credit (chance, whatever the tie rate) and is consistent
    assert res.metrics["pair_acc_ties"] == 1.0 and res.metrics["pair_acc_parse_failures"] == 0.0
    assert res.metrics["batch_ranking_reward"] == 0.0 and res.metrics["batch_kendall_tau"] == 0.0
    assert res.metrics["single_acc_r_c"] == 1.0 and res.metrics["single_acc_perturbed"] == 0.0
    assert res.metrics["single_verdict_acc"] == pytest.approx(1 / 3)


def test_all_batch_orders_and_parse_failures(val_set, tmp_path):
    res = perception.SUITE(
        ScriptedBackend(lambda r, s: "no verdict"),
        SuiteConfig(
            out_dir=tmp_path,
            sampling=Sampling(temperature=0),
            options={"data": str(val_set), "batch_orders": "all"},
        ),
    )
    assert res.counts["n_batch_judgements"] == 6 * 3
    assert res.metrics["batch_parse_fail_rate"] == 1.0 and res.metrics["batch_kendall_tau"] is None
    assert res.metrics["batch_ranking_reward"] == 0.0 and res.metrics["pair_acc"] == 0.0
    with pytest.raises(ValueError, match="needs the option data"):
        perception.SUITE(ScriptedBackend(lambda r, s: ""), SuiteConfig(out_dir=tmp_path))
    with pytest.raises(ValueError, match="unknown perception protocol"):
        perception.SUITE(
            ScriptedBackend(lambda r, s: ""),
            SuiteConfig(out_dir=tmp_path, options={"data": str(val_set), "protocols": ["trio"]}),
        )


def test_ties_half_credit_intervals_and_chance():
    assert perception.pair_accuracy(correct=3, ties=2, fails=1, n=8) == pytest.approx(4 / 8)
    assert perception.pair_accuracy(0, 0, 0, 0) is None
    with pytest.raises(ValueError, match="exceeds n"):
        perception.pair_accuracy(5, 4, 0, 8)
    lo, hi = stats.wilson_interval(45, 50)
    assert lo < 0.9 < hi and 0.78 < lo < 0.80 and 0.95 < hi < 0.96  # Wilson, not the normal approximation
    assert stats.wilson_interval(0, 10)[0] == pytest.approx(0.0, abs=1e-12)
    assert stats.wilson_interval(10, 10)[1] == pytest.approx(1.0)
    assert stats.wilson_interval(1, 0) is None
    assert perception.SUITE.metric("pair_acc_c_vs_rp").chance == 0.5


def test_derangement_has_no_fixed_point_and_is_seeded():
    for n in (2, 3, 7, 50):
        perm = perception.derangement(n, seed=1)
        assert sorted(perm) == list(range(n)) and all(perm[i] != i for i in range(n))
    assert perception.derangement(9, 3) == perception.derangement(9, 3) != perception.derangement(9, 4)
    assert perception.derangement(1, 0) == [0]


def _image_key(image) -> bytes:
    return image.convert("RGB").resize((8, 8)).tobytes()


def test_mismatched_image_control_separates_looking_from_reading(val_set, tmp_path):
    """A judge that decides from the image is perfect with real images and at chance with mismatched ones; a judge
    that reads only the text keeps its score: the control tells the two apart."""
    records = perception.load_records(val_set)
    own = {_image_key(r.images[0]): r for r in records}

    def looks(req, sampling):
        rec = own.get(_image_key(req.images[0]))
        if rec is None or rec.key != req.meta["record"]:
            return format_scores(req, [5] * req.n_scores)  # the image says nothing about these answers: a tie
        return format_scores(req, [QUALITY[k] for k in req.meta["kinds"]])

    def reads(req, sampling):
        return format_scores(req, [QUALITY[k] for k in req.meta["kinds"]])

    def run(fn, control):
        opts = {"data": str(val_set), "protocols": ["pair"], "image_control": control}
        return perception.SUITE(ScriptedBackend(fn), SuiteConfig(out_dir=tmp_path / control, options=opts))

    assert run(looks, "none").metrics["pair_acc_c_vs_rp"] == 1.0
    shuffled = run(looks, "mismatched")
    assert shuffled.metrics["pair_acc_c_vs_rp"] == 0.5 and shuffled.metrics["pair_acc_c_vs_rp_ties"] == 1.0
    assert shuffled.protocol["image_control"] == "mismatched"
    assert run(reads, "mismatched").metrics["pair_acc_c_vs_rp"] == 1.0
    with pytest.raises(ValueError, match="image_control"):
        run(reads, "blank")


def test_backend_errors_are_not_parse_failures():
    from perception_judge.evaluation.base import error_result, parse_result

    records = [perception.Record("k", "q", [], {"r_c": "good", "r_rp": "bad"})]
    reqs = perception.build_requests(records, ["pair"], "random", 0)
    results = [error_result(reqs[0], "connection refused"), parse_result(reqs[1], "no tags")]
    metrics, counts, lines = perception.score_seed(reqs, results, 6.0)
    assert counts["errors"] == 1 and metrics["error_rate"] == 0.5
    assert metrics["pair_acc_c_vs_rp_n"] == 1 and metrics["pair_acc_c_vs_rp_parse_failures"] == 1.0
    assert [line["verdict"] for line in lines] == ["error", "fail"]


def test_kendall_tau_b_of_a_nan_score_is_zero_and_lengths_are_named():
    assert (
        perception.kendall_tau_b([9.0, math.nan, 2.0], [3, 2, 1]) == 0.0
    )  # scipy's NaN is no ordering either
    with pytest.raises(ValueError, match=r"^kendall_tau_b needs lists of equal length$"):
        perception.kendall_tau_b([1, 2], [1, 2, 3])


def test_pair_accuracy_of_one_judgement_and_the_overcount_message():
    assert perception.pair_accuracy(1, 0, 0, 1) == 1.0 and perception.pair_accuracy(0, 1, 0, 1) == 0.5
    with pytest.raises(ValueError, match=r"^correct \+ ties \+ fails \(4\) exceeds n \(3\)$"):
        perception.pair_accuracy(2, 1, 1, 3)


def _result(req, scores, text="reply"):
    from perception_judge.core.schema import JudgeResult

    return JudgeResult(req.request_id, text, scores, None if scores else "no tags")


def test_score_seed_lines_carry_each_judgement_and_the_suite_tau():
    """One record under every protocol: each per-sample line holds the request, the reply and what was scored
    from it; single verdicts use the suite's tau (8 here: a perturbed response scored 7 is judged right)."""
    from perception_judge.core.schema import order_from_kinds

    records = [perception.Record("a", "q", [], {"r_c": "good", "r_rp": "bad", "r_rp_r": "worse"})]
    reqs = perception.build_requests(records, ["pair", "batch", "single"], "random", 0)
    assert [r.meta["protocol"] for r in reqs] == ["pair"] * 4 + ["batch"] + ["single"] * 3
    kinds = reqs[4].meta["kinds"]
    scores = [[9, 5], [5, 5], None, [2, 9], [QUALITY[k] for k in kinds], None, [7], [9]]
    results = [_result(req, s) for req, s in zip(reqs, scores, strict=True)]
    metrics, counts, lines = perception.score_seed(reqs, results, 8.0)
    extra = [
        {"verdict": "correct"}, {"verdict": "tie"}, {"verdict": "fail"}, {"verdict": "correct"},
        {"order": order_from_kinds(kinds), "reward": 1.0, "kendall_tau": 1.0},
        {"verdict_reward": 0.0}, {"verdict_reward": 1.0}, {"verdict_reward": 0.0},
    ]  # fmt: skip
    for line, req, res, more in zip(lines, reqs, results, extra, strict=True):
        meta = {k: req.meta[k] for k in ("protocol", "record", "kinds")}
        assert line == {"request_id": req.request_id, **meta, "scores": res.scores, "error": res.error,
                        "text": "reply", **more}  # fmt: skip
    assert metrics["single_verdict_acc"] == pytest.approx(1 / 3) and metrics["single_acc_r_c"] == 0.0
    assert metrics["single_acc_perturbed"] == 0.5 and metrics["single_parse_fail_rate"] == pytest.approx(
        1 / 3
    )
    assert counts["single_fail"] == 1 and counts["batch_fail"] == 0 and metrics["batch_kendall_tau"] == 1.0


def test_score_seed_counts_pairs_ties_failures_and_errors():
    """Ties are half credit in the accuracy and its interval; two failed orders of one pair are not "consistent";
    every backend error counts, outside the pair counts."""
    from perception_judge.evaluation.base import error_result

    records = [perception.Record(k, "q", [], {"r_c": "good", "r_rp": "bad"}) for k in "abc"]
    reqs = perception.build_requests(records, ["pair"], "random", 0)
    results = [
        _result(reqs[0], [9, 5]),
        _result(reqs[1], [5, 5]),
        _result(reqs[2], None),
        _result(reqs[3], None),
    ]
    results += [error_result(reqs[4], "connection refused"), error_result(reqs[5], "timeout")]
    metrics, counts, _ = perception.score_seed(reqs, results, 6.0)
    assert counts["errors"] == 2 and metrics["error_rate"] == pytest.approx(2 / 6)
    assert metrics["pair_acc_c_vs_rp_n"] == 4 and metrics["pair_acc_c_vs_rp"] == 0.375
    lo, hi = stats.wilson_interval(1.5, 4)  # 1 correct + 1 tie / 2
    assert (metrics["pair_acc_c_vs_rp_ci95_lo"], metrics["pair_acc_c_vs_rp_ci95_hi"]) == (lo, hi)
    assert metrics["pair_acc_c_vs_rp_ties"] == 0.25 and metrics["pair_acc_c_vs_rp_parse_failures"] == 0.5
    assert counts["pair_groups"] == 2 and metrics["pair_consistency"] == 0.0
