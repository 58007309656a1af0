"""Pure metric functions and file loading helpers of the benchmark suites, against hand-computed values."""

from __future__ import annotations

import math
import random

import pytest
from benchmark_fixtures import write_jsonl

from perception_judge.evaluation import stats
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks.common import (
    BenchmarkDataError,
    BenchmarkFileMissing,
    load_table,
    mean_over_runs,
    read_jsonl,
    slug,
)

approx = pytest.approx


@pytest.mark.parametrize(
    "a,b,d",
    [
        ("", "", 0),
        ("ABC", "ABC", 0),
        ("ABC", "", 3),
        ("BAC", "ABC", 2),
        ("ABCD", "DCBA", 4),
        ("ACB", "ABC", 2),
        ("kitten", "sitting", 3),
        ("ABCD", "ABD", 1),
    ],
)
def test_levenshtein(a, b, d):
    assert M.levenshtein(a, b) == d == M.levenshtein(b, a)


def test_normalized_levenshtein():
    assert M.normalized_levenshtein("BAC", "ABC") == approx(2 / 3)
    assert M.normalized_levenshtein("", "ABCD") == 1.0  # an empty prediction, as published
    assert M.normalized_levenshtein("ABCD", "ABD") == approx(1 / 4)
    assert M.normalized_levenshtein("", "") == 0.0


def test_pearson():
    assert stats.pearson([1, 3, 3], [1, 2, 3]) == approx(math.sqrt(3) / 2)
    assert stats.pearson([1, 2, 3], [3, 2, 1]) == approx(-1.0)
    assert stats.pearson([2, 2, 2], [1, 2, 3]) is None  # zero variance: undefined, not 0
    assert stats.pearson([1], [1]) is None
    with pytest.raises(ValueError):
        stats.pearson([1, 2], [1])


def _reference_levenshtein(a: str, b: str) -> int:
    """The hand-written DP that rapidfuzz replaced."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def test_levenshtein_equals_the_reference_dp_on_random_strings():
    rng = random.Random(0)
    for _ in range(500):
        a = "".join(rng.choice("ABCDE") for _ in range(rng.randint(0, 7)))
        b = "".join(rng.choice("ABCD") for _ in range(rng.randint(0, 7)))
        d = _reference_levenshtein(a, b)
        longest = max(len(a), len(b))
        assert M.levenshtein(a, b) == d and isinstance(M.levenshtein(a, b), int)
        assert M.normalized_levenshtein(a, b) == (d / longest if longest else 0.0)


def test_pearson_equals_the_textbook_formula_with_ties():
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(2, 12)
        x = [rng.randint(1, 10) for _ in range(n)]
        y = [rng.randint(1, 5) for _ in range(n)]
        mx, my = sum(x) / n, sum(y) / n
        sxx, syy = sum((a - mx) ** 2 for a in x), sum((b - my) ** 2 for b in y)
        got = stats.pearson(x, y)
        if sxx == 0 or syy == 0:
            assert got is None
            continue
        want = sum((a - mx) * (b - my) for a, b in zip(x, y)) / math.sqrt(sxx * syy)
        assert isinstance(got, float) and -1.0 <= got <= 1.0 and got == approx(want, abs=1e-12)
    assert (
        stats.pearson([0.1, 0.1, 0.1], [1, 2, 3]) is None
    )  # constant even where its float mean is not exact
    assert stats.pearson([], []) is None


def test_score_mapping_and_verdicts():
    assert [M.ceil_half(s) for s in range(1, 11)] == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert (M.pair_verdict(7, 3), M.pair_verdict(3, 7), M.pair_verdict(5, 5)) == ("A", "B", "C")
    assert [M.swap_verdict(v) for v in ("A", "B", "C", None)] == ["B", "A", "C", None]


def test_ranking_tie_break_matches_published_sort():
    assert M.ranking_from_scores([3, 9, 5, 1]) == "BCAD"
    assert M.ranking_from_scores([4, 4, 2]) == "BAC"  # equal scores: the later slot first
    assert M.ranking_from_scores([3, 9, 9, 1]) == "CBAD"
    labels = "ABCD"
    scores = [3, 9, 9, 1]
    assert M.ranking_from_scores(scores) == "".join(
        lab for _, lab in sorted(zip(scores, labels), reverse=True)
    )


def test_pair_accuracy_conventions():
    preds = ["A", None, "C", "B"]
    gts = ["A", "C", "C", "A"]
    assert M.pair_accuracy(preds, gts, with_tie=True) == approx(2 / 4)
    assert M.pair_accuracy(preds, gts, with_tie=True, failure="tie") == approx(3 / 4)
    assert M.pair_accuracy(preds, gts, with_tie=False) == approx(1 / 2)
    assert M.pair_accuracy(["C"], ["A"], with_tie=False) == 0.0  # predicted C counts as wrong
    assert M.pair_accuracy(["A"], ["C"], with_tie=False) is None  # nothing left
    with pytest.raises(ValueError):
        M.pair_accuracy(preds, gts, with_tie=True, failure="skip")


def test_vote_consistency_and_first_position():
    assert M.vote_verdict(["A", "A", "B"]) == "A"
    assert M.vote_verdict(["A", "B", "C"]) == "C"
    assert M.vote_verdict(["B", None, None]) == "B"  # failures abstain
    assert M.vote_verdict([None, None]) is None
    pairs = [("A", "A"), ("A", "B"), ("C", "C"), (None, "A")]
    assert M.consistency_rate(pairs) == approx(2 / 3)
    assert M.consistency_rate(pairs, failure="inconsistent") == approx(2 / 4)
    assert M.consistency_rate([]) is None
    assert M.first_position_win_rate(["A", "B", "A", "C", None]) == approx(2 / 3)
    assert M.first_position_win_rate(["C", None]) is None


def test_flex_replicas_accumulate_runs():
    human = [1.0, 2.0, 3.0]
    # run 0 alone: r([1,2,3],[1,2,3]) = 1; runs 0+1: r([1,2,3,3,2,1],[1,2,3,1,2,3]) = 0; runs 0+1+2 with a
    # constant third run: r([1,2,3,3,2,1,2,2,2], [1,2,3]*3) = 0. Median of (1, 0, 0) = 0.
    assert M.flex_score_pearson([[1, 2, 3], [3, 2, 1], [2, 2, 2]], human) == approx(0.0)
    assert M.flex_score_pearson([[2, 2, 2]], human) == 0.0  # undefined r counts as 0
    # batch: means after each run 0.5, (0.5+0.5+1+1)/4 = 0.75, (... + 0 + 0)/6 = 0.5 -> max 0.75
    assert M.flex_batch_distance([[0.5, 0.5], [1.0, 1.0], [0.0, 0.0]]) == approx(0.75)
    assert M.flex_batch_distance([]) is None


def test_small_statistics():
    assert stats.mean([1, None, 3]) == 2.0 and stats.mean([]) is None
    assert (
        stats.median([3, 1, 2]) == 2.0 and stats.median([1, 2, 3, 4]) == 2.5 and stats.median([None]) is None
    )
    assert mean_over_runs([{"a": 1.0, "b": None}, {"a": 0.0, "b": None, "c": 2.0}]) == {
        "a": 0.5,
        "b": None,
        "c": 2.0,
    }
    assert slug("Concept Caption") == "concept_caption" and slug("") == "unknown"


def test_read_jsonl_and_load_table(tmp_path):
    f = write_jsonl(tmp_path / "a.jsonl", [{"x": 1}, {"x": 2}])
    assert read_jsonl(f) == [{"x": 1}, {"x": 2}]
    (tmp_path / "list.json").write_text('[{"x": 1}]')
    assert load_table(tmp_path / "list.json").rows == [{"x": 1}]
    (tmp_path / "obj.json").write_text('{"x": 1}')
    with pytest.raises(BenchmarkDataError, match=r"obj\.json"):
        read_jsonl(tmp_path / "obj.json")
    (tmp_path / "arr.jsonl").write_text("[1, 2]\n")
    with pytest.raises(BenchmarkDataError, match=r"arr\.jsonl:1"):
        read_jsonl(tmp_path / "arr.jsonl")
    with pytest.raises(BenchmarkFileMissing, match=r"none\.jsonl"):
        read_jsonl(tmp_path / "none.jsonl")
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(BenchmarkDataError, match=r"x\.csv"):
        load_table(tmp_path / "x.csv")
    # a folder of hub-layout shards
    from datasets import Dataset

    (tmp_path / "hub" / "data").mkdir(parents=True)
    Dataset.from_list([{"x": 1}]).to_parquet(str(tmp_path / "hub" / "data" / "test-00000-of-00002.parquet"))
    Dataset.from_list([{"x": 2}]).to_parquet(str(tmp_path / "hub" / "data" / "test-00001-of-00002.parquet"))
    table = load_table(tmp_path / "hub", "test")
    assert [r["x"] for r in table] == [1, 2]
    assert list(table.view(["x", "nope"])[1]) == ["x"]
    with pytest.raises(BenchmarkDataError, match="not a datasets folder"):
        load_table(tmp_path / "hub")


def test_benchmark_image_paths_stay_inside_the_image_roots(tmp_path):
    """A row with ../../ or an absolute path used to read any file on the machine."""
    from PIL import Image

    from perception_judge.evaluation.base import SkipItem
    from perception_judge.evaluation.benchmarks.common import BenchmarkDataError, ImageSource

    root = tmp_path / "images"
    (root / "sub").mkdir(parents=True)
    Image.new("RGB", (8, 8), "red").save(root / "sub" / "ok.png")
    Image.new("RGB", (8, 8), "blue").save(tmp_path / "secret.png")
    src = ImageSource([root])
    assert src.load("sub/ok.png", "row 1").getpixel((0, 0)) == (255, 0, 0)
    assert src.load(str(root / "sub" / "ok.png"), "row 2").size == (8, 8)  # absolute, but under the root
    for bad in ("../secret.png", "sub/../../secret.png", str(tmp_path / "secret.png")):
        with pytest.raises(BenchmarkDataError, match="path_escapes_root"):
            src.load(bad, "row 3")
        with pytest.raises(BenchmarkDataError, match="path_escapes_root"):
            src.check(bad, "row 3")
    with pytest.raises(SkipItem):
        ImageSource([root], missing="skip").load("../secret.png", "row 4")


def test_edges_the_mutation_run_found():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a constant side is answered before scipy is asked (it would warn)
        assert M.pearson([1, 2, 3], [5, 5, 5]) is None and M.pearson([5, 5, 5], [1, 2, 3]) is None
    assert M.pearson([1, 2, float("nan")], [1, 2, 3]) is None  # r undefined, not clamped to 1
    with pytest.raises(ValueError, match=r"^pearson needs equal lengths, got 2 and 3$"):
        M.pearson([1, 2], [1, 2, 3])
    assert M.ranking_from_scores([1, 2, 3], "ABC") == "CBA"  # as many scores as labels
    with pytest.raises(ValueError, match=r"^at most 3 scores, got 4$"):
        M.ranking_from_scores([1, 2, 3, 4], "ABC")
    with pytest.raises(ValueError, match=r"^failure must be 'exclude' or 'inconsistent', got 'skip'$"):
        M.consistency_rate([("A", "A")], failure="skip")
    with pytest.raises(ValueError, match=r"^failure must be 'wrong' or 'tie', got 'skip'$"):
        M.pair_accuracy(["A"], ["A"], with_tie=True, failure="skip")
    # one verdict per label, never a silently shorter pairing
    with pytest.raises(ValueError, match="longer"):
        M.pair_accuracy(["A"], ["A", "B"], with_tie=True)
