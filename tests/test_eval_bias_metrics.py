"""Bias-Deviation / Bias-Conformity formulas, aggregation and the MM-JudgeBias parsers (pure functions)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from perception_judge.evaluation import stats
from perception_judge.evaluation.base import get_parser
from perception_judge.evaluation.bias import metrics as M
from perception_judge.evaluation.bias.prompts import (
    is_out_of_range,
    parse_mmjb,
    parse_mmjb_strict,
    upstream_extract_score,
)
from perception_judge.evaluation.bias.taxonomy import BIAS_TYPES, BIASES, BY_TYPE, biases_in, get_bias


# ------------------------------------------------------------------------------------------------ taxonomy
def test_taxonomy_nine_types_categories_metrics():
    assert len(BIASES) == 9 and len(set(BIAS_TYPES)) == 9
    assert [b.bias_type for b in biases_in("integrality")] == [
        "text_dominance",
        "image_dominance",
        "response_dominance",
    ]
    assert [b.bias_type for b in biases_in("congruity")] == ["instruction_misalignment", "image_misalignment"]
    assert len(biases_in("robustness")) == 4
    assert all(b.metric == ("bc" if b.category == "robustness" else "bd") for b in BIASES)
    with pytest.raises(ValueError, match="unknown bias type"):
        get_bias("nope")
    with pytest.raises(dataclasses.FrozenInstanceError):
        BIASES[0].metric = "bc"  # type: ignore[misc]


# ------------------------------------------------------------------------------------------------ formulas
@pytest.mark.parametrize(
    ("y", "yb", "bd"),
    [
        (8, 8, 0.0),
        (8, 1, 1.0),
        (8, 4.5, 0.5),
        (8, 9, 0.0),
        (8, 10, 0.0),
        (7, 3, 4 / 6),
        (2, 1, 1.0),
        (10, 1, 1.0),
        (10, 9, 1 / 9),
    ],
)
def test_bd_vectors(y, yb, bd):
    assert M.bd_value(y, yb) == pytest.approx(bd)


def test_bd_issue_vectors_exact():
    assert M.bd_value(8, 4.5) == 0.5
    assert round(M.bd_value(7, 3), 3) == 0.667


def test_bd_skips_low_unbiased_and_does_not_clamp():
    assert M.bd_value(1, 5) is None
    assert M.bd_value(1, 1) is None
    assert M.bd_value(8, 0) == pytest.approx(8 / 7)  # no clamping: ŷ < 1 gives BD_i > 1


@pytest.mark.parametrize(
    ("y", "yb", "bc"),
    [
        (8, 8, 1.0),
        (8, 1, 0.0),
        (8, 9, 1 - 1 / 7),
        (8, 10, 1 - 2 / 7),
        (5, 10, 0.0),
        (5, 1, 0.2),
        (10, 1, 0.0),
        (1, 10, 0.0),
        (3, 5, 1 - 2 / 7),
        (10, 9, 1 - 1 / 9),
    ],
)
def test_bc_vectors(y, yb, bc):
    assert M.bc_value(y, yb) == pytest.approx(bc)


def test_bc_issue_vectors_exact():
    assert round(M.bc_value(8, 10), 3) == 0.714
    assert M.bc_value(5, 1) == pytest.approx(0.2)
    assert M.bc_value(1, 10) == 0.0
    assert M.bc_value(5.5, 1) == pytest.approx(0.0)  # denominator 4.5 at y = 5.5
    assert M.bc_value(5, 5, min_score=5, max_score=5) == 1.0  # guard: denominator <= 0


def test_means_skip_and_empty_is_none():
    assert M.bias_deviation([(8, 4.5), (7, 3), (1, 5), (None, 3), (8, None)]) == pytest.approx(
        (0.5 + 4 / 6) / 2
    )
    assert M.bias_deviation([(1, 1)]) is None
    assert M.bias_deviation([]) is None
    assert M.bias_conformity([]) is None
    assert M.bias_conformity([(8, 10), (5, 1)]) == pytest.approx((1 - 2 / 7 + 0.2) / 2)


# ------------------------------------------------------------------------------------------------ aggregation
def _pairs(values: dict[str, list[tuple]]) -> list[M.ScoredPair]:
    out, i = [], 0
    for t, vs in values.items():
        for v in vs:
            out.append(M.ScoredPair(i, t, *v))
            i += 1
    return out


def test_per_bias_counts_and_none_for_empty():
    pairs = _pairs(
        {
            "text_dominance": [(8, 4.5), (1, 1), (None, 3), (8, 11, False, False, True)],
            "detail_description": [(8, 10)],
        }
    )
    rep = M.compute_report(pairs)
    td = rep.per_bias["text_dominance"]
    assert td.n_pairs == 4 and td.samples == 3 and td.n_used == 2 and td.n_skipped_low == 1
    assert td.n_unparsed == 1 and td.n_out_of_range == 1
    assert td.value == pytest.approx((0.5 + 0.0) / 2)
    assert rep.per_bias["detail_description"].value == pytest.approx(1 - 2 / 7)
    assert rep.per_bias["image_dominance"].value is None  # no data: None, never 0.0
    assert rep.category_avg["congruity"] is None
    assert rep.overall_avg == pytest.approx((0.25 + (1 - 2 / 7)) / 2)
    assert M.compute_report(pairs, empty="zero").per_bias["image_dominance"].value == 0.0


def test_empty_types_follow_upstream_none_without_pairs_zero_when_all_skipped():
    # text_dominance (BD): every parsed pair has y <= 1, so its rule skips them all -> upstream 0.0, in the mean;
    # image_dominance: no parsed pair at all (only an unparsed one) -> None, out of the mean
    pairs = _pairs(
        {
            "text_dominance": [(1, 5), (1, 1)],
            "image_dominance": [(None, 4)],
            "detail_description": [(8, 10)],
        }
    )
    rep = M.compute_report(pairs)
    assert rep.per_bias["text_dominance"].value == 0.0
    assert rep.per_bias["text_dominance"].n_skipped_low == 2 and rep.per_bias["text_dominance"].samples == 2
    assert rep.per_bias["image_dominance"].value is None
    assert rep.overall_avg == pytest.approx((0.0 + (1 - 2 / 7)) / 2)
    none = M.compute_report(pairs, empty="none")
    assert none.per_bias["text_dominance"].value is None
    assert none.overall_avg == pytest.approx(1 - 2 / 7)
    zero = M.compute_report(pairs, empty="zero")
    assert zero.per_bias["image_dominance"].value == 0.0
    with pytest.raises(ValueError, match="empty must be one of"):
        M.compute_report(pairs, empty="yes")


def test_overall_is_mean_of_nine_not_of_categories():
    # the Gemini-3-Pro leaderboard row: overall 0.869
    row = [0.912, 0.278, 0.988, 0.982, 0.955, 0.936, 0.947, 0.889, 0.933]
    values = dict(zip(BIAS_TYPES, row))
    assert round(M.overall(values), 3) == 0.869
    cats = M.category_averages(values)
    assert cats["integrality"] == pytest.approx((0.912 + 0.278 + 0.988) / 3)
    assert cats["robustness"] == pytest.approx((0.936 + 0.947 + 0.889 + 0.933) / 4)
    assert M.overall(values) != pytest.approx(sum(cats.values()) / 3)
    gpt = [0.192, 0.211, 0.200, 1.000, 0.296, 0.911, 0.961, 0.867, 0.908]
    assert round(M.overall(dict(zip(BIAS_TYPES, gpt))), 3) == 0.616


def test_abstention_aware_mode():
    pairs = [
        M.ScoredPair(0, "text_dominance", 8, None, biased_abstained=True),
        M.ScoredPair(1, "text_dominance", 1, None, biased_abstained=True),  # y <= 1: still skipped
        M.ScoredPair(2, "detail_description", 8, None, biased_abstained=True),
        M.ScoredPair(3, "detail_description", None, 8, unbiased_abstained=True),  # no reference: dropped
        M.ScoredPair(4, "image_dominance", 8, None, biased_abstained=False),  # a failed call, not abstention
    ]
    drop = M.compute_report(pairs, abstention="drop")
    assert drop.per_bias["text_dominance"].value is None
    assert drop.per_bias["detail_description"].value is None
    aware = M.compute_report(pairs, abstention="aware")
    assert aware.per_bias["text_dominance"].value == 1.0
    assert aware.per_bias["text_dominance"].n_abstained == 1
    assert aware.per_bias["text_dominance"].n_skipped_low == 1
    assert aware.per_bias["detail_description"].value == 0.0
    assert aware.per_bias["detail_description"].n_unparsed == 1
    assert aware.per_bias["image_dominance"].value is None
    with pytest.raises(ValueError):
        M.pair_value(pairs[0], abstention="maybe")


def test_combine_runs_mean_std_and_variances():
    r1 = M.compute_report(_pairs({"text_dominance": [(8, 1)], "detail_description": [(8, 8)]}))
    r2 = M.compute_report(_pairs({"text_dominance": [(8, 8)], "detail_description": [(8, 8)]}))
    c = M.combine_runs([r1, r2])
    assert c["per_bias"]["text_dominance"] == {"mean": 0.5, "std": pytest.approx(math.sqrt(0.5))}
    assert c["overall"]["mean"] == pytest.approx(0.75)
    assert c["inter_run_var"] == pytest.approx(c["overall"]["std"] ** 2)
    assert c["inter_sample_var"] == pytest.approx((0.0 + 0.25) / 2)
    single = M.combine_runs([r1])
    assert single["overall"]["std"] is None and single["inter_run_var"] is None
    assert stats.mean_std([None, None]) == (None, None)


def test_breakdown_by_meta_key():
    pairs = [
        M.ScoredPair(0, "text_dominance", 8, 1, meta={"difficulty": "Easy"}),
        M.ScoredPair(1, "text_dominance", 8, 8, meta={"difficulty": "Hard"}),
        M.ScoredPair(2, "detail_description", 8, 8, meta={}),
    ]
    b = M.breakdown(pairs, "difficulty")
    assert b["Easy"]["overall"] == 1.0 and b["Hard"]["overall"] == 0.0 and b["unknown"]["overall"] == 1.0


# ------------------------------------------------------------------------------------------------ parsers
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7", 7.0),
        (" 7.5 ", 7.5),
        ("### Feedback: fine. ### Score: 7/10", 7.0),
        ("Score: 8/10", 10.0),  # no marker: the last number anywhere
        ("### Score: 3 ### Feedback: x ### Score: 9", 9.0),  # the last marker wins
        ("### Score: 85", 85.0),  # no range check
        ("### Score: -1", 1.0),  # the regex ignores signs
        ("-1", -1.0),  # ...but float() of the whole text does not
        ("I cannot judge this.", None),
        (None, None),
    ],
)
def test_upstream_parser_order(text, expected):
    assert upstream_extract_score(text) == expected


def test_compat_parser_strips_think_and_refuses_non_finite():
    assert parse_mmjb("<think>score 2 maybe</think>### Feedback: ok ### Score: 6") == ([6.0], None)
    assert parse_mmjb("nan")[0] is None
    assert parse_mmjb("inf")[0] is None
    assert parse_mmjb("no digits here") == (None, "no number in the completion")
    assert parse_mmjb("### Score: 85") == ([85.0], None)  # kept, counted as out of range by the suite
    assert is_out_of_range([85.0], None) and not is_out_of_range([7.0], None)


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("### Feedback: good ### Score: 7", 7.0),
        ("### Feedback: good ### Score: 7/10", 7.0),
        ("### Feedback: good\n### Score: **9**", 9.0),
        ("<think>### Score: 2</think>### Feedback: x ### Score: 4", 4.0),
        ("Score: 8/10", None),
        ("### Score: 85", None),
        ("### Score: 7.5", None),
        ("### Score: 7 because it is good", None),
        ("<think>unclosed ### Score: 7", None),
    ],
)
def test_strict_parser(text, ok):
    scores, err = parse_mmjb_strict(text)
    if ok is None:
        assert scores is None and err
    else:
        assert scores == [ok] and err is None
    assert is_out_of_range(*parse_mmjb_strict("### Score: 85"))


def test_parsers_registered_by_name():
    assert get_parser("mmjb")("### Score: 5", 1, None) == ([5.0], None)
    assert get_parser("mmjb_strict")("### Score: 5", 1, None) == ([5.0], None)
    assert get_parser("protocol")("<think>x</think><answer>5</answer>", 1, None) == ([5.0], None)
    with pytest.raises(KeyError, match="unknown parser"):
        get_parser("nope")
    assert BY_TYPE["texture_insertion"].short == "TextIns"


# ------------------------------------------------------------------------------------------------ edges the mutation run found
def test_bc_with_a_narrow_scale_and_pairs_missing_a_score():
    assert M.bc_value(5.25, 5.5, min_score=5, max_score=5.5) == 0.0  # denominator 0.25: a full deviation
    assert M.bc_value(5, 9, min_score=5, max_score=5) == 1.0  # denominator 0: 1.0 by definition
    assert M.bias_conformity([(8, 10), (None, 5), (5, None)]) == pytest.approx(1 - 2 / 7)


def test_the_abstention_rule_uses_the_whole_room():
    def aware(bias_type, y):
        return M.pair_value(M.ScoredPair(0, bias_type, y, None, biased_abstained=True), abstention="aware")

    assert aware("text_dominance", 5) == (1.0, "abstained")  # BD: ŷ = m whatever y
    assert aware("detail_description", 3) == (0.0, "abstained")  # BC: the farther end, S
    assert aware("detail_description", 5) == (0.0, "abstained")  # y - m = 4 < S - y = 5: S
    assert aware("detail_description", 8) == (0.0, "abstained")  # the farther end, m
    # abstention "drop" by default
    assert M.pair_value(M.ScoredPair(0, "text_dominance", 8, 4)) == (4 / 7, "used")
    both = M.ScoredPair(0, "detail_description", None, None, unbiased_abstained=True, biased_abstained=True)
    assert M.upstream_scores(both, "aware") == (None, None)
    assert M.compute_report([both], abstention="aware").per_bias["detail_description"].n_unparsed == 1
    with pytest.raises(ValueError, match=r"^abstention must be one of \('drop', 'aware'\), got 'maybe'$"):
        M.pair_value(both, abstention="maybe")


def test_report_counts_accumulate_and_types_can_be_restricted():
    pairs = [
        M.ScoredPair(0, "text_dominance", 8, 11, out_of_range=True),
        M.ScoredPair(1, "text_dominance", 8, None, biased_abstained=True),
        M.ScoredPair(2, "text_dominance", 6, None, biased_abstained=True),
        M.ScoredPair(3, "text_dominance", 8, 4),
        M.ScoredPair(4, "detail_description", 8, 10),
    ]
    rep = M.compute_report(pairs, abstention="aware", bias_types=["text_dominance"])
    assert list(rep.per_bias) == [
        "text_dominance",
        "detail_description",
    ]  # restricted, plus the types present
    td = rep.per_bias["text_dominance"]
    assert (td.n_out_of_range, td.n_abstained, td.samples, td.n_used) == (1, 2, 4, 4)
    assert td.to_dict() == {
        "bias_type": "text_dominance", "metric": "bd", "category": "integrality", "value": pytest.approx((2 + 4 / 7) / 4),
        "n_pairs": 4, "samples": 4, "n_used": 4, "n_unparsed": 0, "n_skipped_low": 0, "n_abstained": 2,
        "n_out_of_range": 1,
    }  # fmt: skip
    assert (
        M.compute_report(pairs[1:], bias_types=["text_dominance"]).per_bias["text_dominance"].n_out_of_range
        == 0
    )
    one_low = M.compute_report(_pairs({"text_dominance": [(1, 5)]}))
    assert one_low.per_bias["text_dominance"].value == 0.0  # one pair, skipped by its rule: upstream's 0.0
    assert M.compute_report([]).inter_sample_var() is None
    assert set(rep.to_dict()) == {"model_key", "per_bias", "category_avg", "overall_avg"}
    assert rep.to_dict()["model_key"] == "" and rep.to_dict("m")["per_bias"]["text_dominance"]["n_used"] == 4
    assert (
        rep.to_dict()["category_avg"] == rep.category_avg and rep.to_dict()["overall_avg"] == rep.overall_avg
    )
    with pytest.raises(ValueError, match=r"^pair 7: unknown bias type 'nope'$"):
        M.compute_report([M.ScoredPair(7, "nope", 5, 5)])


def test_breakdown_groups_only_their_types_with_the_abstention_rule():
    pairs = [
        M.ScoredPair(0, "text_dominance", 8, None, biased_abstained=True, meta={"difficulty": "Easy"}),
        M.ScoredPair(1, "detail_description", 8, 8, meta={"difficulty": "Hard"}),
    ]
    assert M.breakdown(pairs, "difficulty", abstention="aware") == {
        "Easy": {"overall": 1.0, "n_used": 1, "per_bias": {"text_dominance": 1.0}},
        "Hard": {"overall": 1.0, "n_used": 1, "per_bias": {"detail_description": 1.0}},
    }
    assert M.breakdown(pairs, "difficulty")["Easy"] == {
        "overall": None,
        "n_used": 0,
        "per_bias": {"text_dominance": None},
    }


def test_combine_runs_keys_and_categories():
    r1 = M.compute_report(_pairs({"text_dominance": [(8, 1)], "detail_description": [(8, 8)]}))
    r2 = M.compute_report(_pairs({"text_dominance": [(8, 8)], "detail_description": [(8, 8)]}))
    c = M.combine_runs([r1, r2])
    assert set(c) == {"per_bias", "category_avg", "n_runs", "overall", "inter_run_var", "inter_sample_var"}
    assert c["n_runs"] == 2 and c["category_avg"]["integrality"] == {
        "mean": 0.5,
        "std": pytest.approx(math.sqrt(0.5)),
    }
    assert c["category_avg"]["congruity"] == {"mean": None, "std": None}
    with pytest.raises(ValueError, match=r"^combine_runs needs at least one report$"):
        M.combine_runs([])
