"""``parser=published`` on the benchmark suites: a completion read as the published code reads it.

The references below mirror the published code line by line, straight from the completion texts the suite writes
to its samples file, with none of the project's parsing or metric code:

* every pair, score, VL-RewardBench and MJ-Bench reader: ``re.findall(r"<answer>(\\d+)</answer>", text)`` over the
  whole completion, the first n matches (flex-judge ``test/mllm_as_a_judge_vllm.py`` 153-159,
  ``test/vl_rewardbench_vllm.py`` 91-97, ``test/mj_bench_vllm.py`` 127-140, ``test/evaluate.py`` 98-100 and
  131-135; the Perception-Judge ``eval/evaluate_metric.ipynb`` pair and score cells);
* the notebook's batch cell alone reads every integer inside every ``<answer>`` block, cut to ``len(gt)``;
* the notebook's score: ``ceil(v/2)``, above 5 → -1; Flex's: ``v[0]`` kept (here ``ceil(v/2)``, no range check);
* Flex's batch: every tag, never cut.

The suites' numbers under ``parser=published`` must equal them, on malformed completions too.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import statistics
import string

import pytest
from benchmark_fixtures import backend, config, write_mjbench_disk, write_mllm_judge, write_vlrb_disk

from perception_judge.evaluation.benchmarks import mjbench, mllm_judge, vlrewardbench
from perception_judge.evaluation.benchmarks.published import (
    block_ints,
    parse_published,
    parse_published_prefix,
    tag_ints,
)

approx = pytest.approx


# --------------------------------------------------------------------------------------- the reference rules
def ref_tags(text: str) -> list[int]:
    return list(map(int, re.findall(r"<answer>(\d+)</answer>", text)))


def ref_pair(text: str) -> str:
    """test/mllm_as_a_judge_vllm.py 153-159 (and the notebook's pair cell): a failure is C."""
    try:
        score = ref_tags(text)
        if score[0] > score[1]:
            return "A"
        elif score[0] < score[1]:
            return "B"
        return "C"
    except IndexError:
        return "C"


def ref_notebook_score(text: str) -> int:
    v = ref_tags(text)
    pred = -1 if len(v) == 0 else math.ceil(v[0] / 2)
    return -1 if pred > 5 else pred


def ref_flex_score(text: str) -> int:
    v = ref_tags(text)
    return -1 if len(v) == 0 else math.ceil(v[0] / 2)  # v[0] as it is, on the project's 1-10 scale


def ref_flex_score_unmapped(text: str) -> int:
    v = ref_tags(text)
    return -1 if len(v) == 0 else v[0]  # test/evaluate.py 98-100 as it stands


def ref_ranking(v: list[int]) -> str:
    labels = list(string.ascii_uppercase[: len(v)])
    return "".join(label for _, label in sorted(zip(v, labels), reverse=True))


def ref_notebook_batch(text: str, gt: str) -> str:
    answers = re.findall(r"<answer>(.*?)</answer>", text, flags=re.DOTALL)
    return ref_ranking([int(x) for block in answers for x in re.findall(r"\d+", block)][: len(gt)])


def ref_flex_batch(text: str) -> str:
    return ref_ranking(ref_tags(text))


def levenshtein(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def dist(pred: str, gt: str) -> float:
    return levenshtein(pred, gt) / max(len(pred), len(gt))


def whole(row: dict) -> str:
    """The completion as the published scripts saw it: the think block a backend split off put back in front."""
    return f"<think>{row['reasoning']}</think>{row['text']}" if row.get("reasoning") else row["text"]


def samples(path) -> list[dict]:
    return [json.loads(line) for line in open(path, encoding="utf-8")]


# ------------------------------------------------------------------------------------ malformed completions
def tags(values) -> str:
    return "".join(f"<answer>{v}</answer>" for v in values)


MALFORMED = {  # name -> (x: numbers, n: the scores asked for) -> completion, or (completion, split-off reasoning)
    "clean": lambda x, n: f"<think>fine</think>{tags(x[:n])}",
    "decimal": lambda x, n: f"<answer>{x[0]}.5</answer>{tags(x[1:n])}",
    "spaced": lambda x, n: "".join(f"<answer> {v} </answer>" for v in x[:n]),
    "comma": lambda x, n: f"<answer>{', '.join(map(str, x[:n]))}</answer>",
    "brackets": lambda x, n: " ".join(f"[[{v}]]" for v in x[:n]) + " for [Assistant 1's Answer]",
    "bracket_alone": lambda x, n: f"[[{x[0]}]]",
    "several": lambda x, n: tags(x[: n + 2]),
    "one_too_many": lambda x, n: f"<think>ok</think>{tags(x[: n + 1])}",
    "think_only": lambda x, n: f"<think>maybe {tags(x[:n])}</think>Final: I cannot decide.",
    "think_draft": lambda x, n: f"<think>draft {tags(x[n : 2 * n])}</think>{tags(x[:n])}",
    "split_think": lambda x, n: (tags(x[:n]), f"draft {tags(x[n : 2 * n])}"),
    "eleven": lambda x, n: tags([11, *x[1:n]]),
    "zero": lambda x, n: tags([0, *x[1:n]]),
    "twelve_then": lambda x, n: tags([12, x[0], *x[1:n]]),
    "nan": lambda x, n: f"<answer>nan</answer>{tags(x[:n])}",
    "refusal": lambda x, n: "I cannot judge this image.",
    "unfinished": lambda x, n: f"<think>unfinished <answer>{x[0]}</answer>",
}
CASES = ["<answer>7.5</answer>", "<answer> 7 </answer><answer>3</answer>", "<answer>4, 6</answer>", "[[8]]",
         "[[8]] [[3]]", "<answer>9</answer><answer>4</answer><answer>1</answer>",
         "<think><answer>2</answer><answer>8</answer></think>no final answer", "<answer>11</answer><answer>0</answer>",
         "<answer>0</answer><answer>11</answer>", "<answer>nan</answer><answer>6</answer>", "I refuse.",
         "<answer>07</answer><answer>7</answer>", "<answer>7</answer>\n<answer>\n3</answer>", ""]  # fmt: skip


def malformed_judge(used: list | None = None):
    """Cycles through every malformed form, request after request (numbers 1-10); ``used`` collects (setting,
    form name) so a test can check that every form was met."""
    forms = itertools.cycle(MALFORMED.items())
    draws = itertools.count()

    def judge(request, sampling):
        k = next(draws)
        x = [1 + (7 * k + 3 * j + sampling.seed) % 10 for j in range(12)]
        name, form = next(forms)
        if used is not None:
            used.append((request.meta.get("setting"), name))
        return form(x, request.n_scores)

    return judge


# ------------------------------------------------------------------------------------------------- unit rules
@pytest.mark.parametrize("text", CASES + [f(list(range(3, 9)), 2) for f in MALFORMED.values()])
def test_published_rule_reads_only_digits_directly_between_the_tags(text):
    text = text if isinstance(text, str) else f"<think>{text[1]}</think>{text[0]}"
    ints = ref_tags(text)
    assert tag_ints(text) == ints
    scores, error = parse_published(text, 2)
    assert (scores, error is None) == (
        ([float(v) for v in ints[:2]], True) if len(ints) >= 2 else (None, False)
    )
    blocks = re.findall(r"<answer>(.*?)</answer>", text, flags=re.DOTALL)
    expected = [int(x) for b in blocks for x in re.findall(r"\d+", b)]
    assert block_ints(text) == expected
    assert parse_published_prefix(text, 3)[0] == ([float(v) for v in expected[:3]] if expected else None)


@pytest.mark.parametrize(
    "text, n, scores",
    [
        ("<think>x <answer>3</answer></think><answer>8</answer><answer>2</answer>", 2, [3, 8]),
        ("<answer>0</answer><answer>11</answer>", 2, [0, 11]),
        ("<answer>nan</answer><answer>5</answer><answer>6</answer>", 2, [5, 6]),
        ("<answer> 7 </answer><answer>9</answer><answer>1</answer>", 2, [9, 1]),
        ("[[8]] vs [[3]] ([Assistant 1's Answer])", 2, None),
        ("<answer>4, 6</answer>", 2, None),
        ("<answer>7.5</answer>", 2, None),
        ("<answer>7.5</answer><answer>3</answer><answer>2</answer>", 2, [3, 2]),
    ],
)
def test_published_rule_reads_answer_tags_anywhere(text, n, scores):
    expected = (None if scores is None else [float(s) for s in scores], scores is None)
    got, error = parse_published(text, n)
    assert (got, error is not None) == expected
    assert tag_ints(text)[:n] == (scores or ref_tags(text)[:n]) == ref_tags(text)[:n]


@pytest.mark.parametrize(
    "text",
    ["I refuse.", "Scores: 7 and 4", "<answer>nan</answer><answer>inf</answer>", "[Assistant 1's Answer] 8"],
)
def test_published_rule_failures(text):
    scores, error = parse_published(text, 2)
    assert scores is None and "published rule" in error
    assert parse_published_prefix(text, 3)[0] is None and ref_tags(text) == []


def test_a_huge_number_is_out_of_range_not_a_crash():
    # Python refuses int() on more than 4,300 digits; any value above 15 digits reads as 10**15 - 1
    assert parse_published("<answer>" + "9" * 5000 + "</answer><answer>2</answer>", 2) == (
        [999999999999999.0, 2.0],
        None,
    )
    # up to 15 digits the published comparison is exact: 1000001 beats 1000000
    assert parse_published("<answer>1000000</answer><answer>1000001</answer>", 2)[0] == [1000000.0, 1000001.0]


def test_published_prefix_keeps_a_short_ranking_and_the_reasoning_counts():
    assert parse_published_prefix("<answer>3</answer><answer>9</answer>", 4) == ([3.0, 9.0], None)
    assert parse_published_prefix("<answer>1</answer>" * 6, 4)[0] == [1.0] * 4
    # a backend that split the think block off: the published scripts read the whole completion
    assert parse_published("<answer>5</answer>", 2, reasoning="<answer>9</answer>") == ([9.0, 5.0], None)


def test_parser_option_is_checked(tmp_path):
    bench = write_mllm_judge(tmp_path / "m")
    with pytest.raises(ValueError, match="'parser'"):
        mllm_judge.SUITE(
            backend(malformed_judge()), config(tmp_path / "o", data_dir=str(bench), parser="loose")
        )


# ---------------------------------------------------------------------------- suites against the reference
def _runs(rows, setting, seeds):
    """Per seed, the setting's sample lines in the same item order."""
    by_seed = [{r["item_id"]: r for r in rows if r["setting"] == setting and r["seed"] == s} for s in seeds]
    return [[run[k] for k in sorted(by_seed[0])] for run in by_seed]


def _notebook_reference(rows, seeds) -> dict[str, float]:
    """The Perception-Judge notebook's micro numbers: per seed, then the mean over seeds."""
    with_tie, without_tie, rs, lev = [], [], [], []
    for run in _runs(rows, "pair", seeds):
        preds = [(ref_pair(whole(r)), r["gt"]) for r in run]
        with_tie.append(sum(p == g for p, g in preds) / len(preds))
        decisive = [(p, g) for p, g in preds if g != "C"]
        without_tie.append(sum(p == g for p, g in decisive) / len(decisive))
    for run in _runs(rows, "score", seeds):
        rs.append(statistics.correlation([ref_notebook_score(whole(r)) for r in run], [r["gt"] for r in run]))
    for run in _runs(rows, "batch", seeds):
        lev.append(statistics.mean(dist(ref_notebook_batch(whole(r), r["gt"]), r["gt"]) for r in run))
    return {
        "mean.pair.acc_with_tie_compat.micro": statistics.mean(with_tie),
        "mean.pair.acc_without_tie.micro": statistics.mean(without_tie),
        "mean.score.pearson_compat.micro": statistics.mean(rs),
        "mean.batch.norm_levenshtein.micro": statistics.mean(lev),
    }


def _flex_reference(rows, seeds) -> dict[str, float]:
    """test/evaluate.py's mllm_judge_eval, per subset and "Ave" (lines 42-146)."""
    out = {}
    pair = _runs(rows, "pair", seeds)
    subsets = sorted({r["dataset"] for r in pair[0]})
    p2n = {"A": -1, "B": 1, "C": 0}
    for name, keep in (("acc_with_tie", lambda g: True), ("acc_without_tie", lambda g: g != "C")):
        per = []
        for o in subsets:
            hits = []
            for i, r in enumerate(pair[0]):
                if r["dataset"] != o or not keep(r["gt"]):
                    continue
                e = sum(p2n[ref_pair(whole(run[i]))] for run in pair)
                hits.append(("A" if e < 0 else "B" if e > 0 else "C") == r["gt"])
            per.append(round(sum(hits) / len(hits), 3))
        out[f"flex.pair.{name}.macro"] = round(sum(per) / len(per), 3)
    for setting, metric, read in (
        ("score", "pearson", ref_flex_score),
        ("score", "pearson_unmapped", ref_flex_score_unmapped),
        ("batch", "norm_levenshtein", ref_flex_batch),
    ):
        runs = _runs(rows, setting, seeds)
        aves = []
        for o in sorted({r["dataset"] for r in runs[0]}):
            acc_p, acc_h, values = [], [], []
            for run in runs:
                mine = [r for r in run if r["dataset"] == o]
                if setting == "score":
                    acc_p += [read(whole(r)) for r in mine]
                    acc_h += [r["gt"] for r in mine]
                    try:
                        values.append(statistics.correlation(acc_p, acc_h))
                    except statistics.StatisticsError:  # constant input: pearsonr's NaN, counted as 0
                        values.append(0.0)
                else:
                    acc_p += [dist(read(whole(r)), r["gt"]) for r in mine]
                    values.append(statistics.mean(acc_p))
            aves.append(statistics.median(values) if setting == "score" else max(values))
        out[f"flex.{setting}.{metric}.macro"] = round(sum(aves) / len(aves), 3)
    return out


def test_mllm_judge_published_equals_the_published_code_on_malformed_completions(tmp_path):
    bench = write_mllm_judge(tmp_path / "m")
    seeds = (0, 1, 2)
    used: list = []
    res = mllm_judge.SUITE(
        backend(malformed_judge(used)),
        config(tmp_path / "o", seeds=seeds, data_dir=str(bench), parser="published", aggregation="mean,flex"),
    )
    rows = samples(res.samples_path)
    assert res.protocol["parser"].startswith("published")
    for setting in ("pair", "score"):  # every malformed form met (batch has 4 items x 3 seeds: 12 of them)
        assert {name for s, name in used if s == setting} == set(MALFORMED), setting
    for name, value in (_notebook_reference(rows, seeds) | _flex_reference(rows, seeds)).items():
        assert res.metrics[name] == approx(value), name

    # the malformed judge really is malformed: the strict parser fails on more and gives other numbers
    strict = mllm_judge.SUITE(
        backend(malformed_judge()), config(tmp_path / "s", seeds=seeds, data_dir=str(bench), parser="strict")
    )
    assert strict.metrics["pair.parse_failure_rate"] > res.metrics["pair.parse_failure_rate"]
    assert strict.metrics["mean.score.pearson_compat.micro"] != approx(
        res.metrics["mean.score.pearson_compat.micro"]
    )


def _scripted_setting(tmp_path, setting, completions, aggregation="mean,flex"):
    """One setting judged with a fixed completion per request (cycled in request order)."""
    bench = write_mllm_judge(tmp_path / "m")
    forms = itertools.cycle(completions)
    res = mllm_judge.SUITE(
        backend(lambda request, sampling: next(forms)),
        config(
            tmp_path / "o", data_dir=str(bench), settings=setting, parser="published", aggregation=aggregation
        ),
    )
    return res, samples(res.samples_path)


def test_flex_score_keeps_eleven_and_the_notebook_drops_it(tmp_path):
    # coco humans [1, 2, 3], mathvista [4, 5] (the FAIL item's text is the scripted one too: [4, 2, 5])
    res, rows = _scripted_setting(
        tmp_path, "score", ["<answer>2</answer>", "<answer>11</answer>", "<answer>5</answer>"]
    )
    nb = [ref_notebook_score(r["text"]) for r in rows]
    flex = [ref_flex_score(r["text"]) for r in rows]
    assert nb == [1, -1, 3, 1, -1, 3] and flex == [1, 6, 3, 1, 6, 3]
    humans = [r["gt"] for r in rows]
    assert res.metrics["mean.score.pearson_compat.micro"] == approx(statistics.correlation(nb, humans))
    per = [
        statistics.correlation(
            [f for f, r in zip(flex, rows) if r["dataset"] == o], [r["gt"] for r in rows if r["dataset"] == o]
        )
        for o in ("coco", "mathvista")
    ]
    assert res.metrics["flex.score.pearson.macro"] == round(statistics.mean(per), 3)
    assert res.metrics["flex.score.pearson.by_dataset.coco"] == round(per[0], 3)


def test_flex_batch_keeps_one_tag_too_many_and_the_notebook_cuts_it(tmp_path):
    # coco BCAD (4 answers) gets five tags; the others three or four
    texts = [tags([3, 9, 5, 1, 10]), tags([4, 4, 2, 8]), tags([1, 2, 3]), "<answer>2, 3, 1</answer>"]
    res, rows = _scripted_setting(tmp_path, "batch", texts)
    nb = [ref_notebook_batch(r["text"], r["gt"]) for r in rows]
    flex = [ref_flex_batch(r["text"]) for r in rows]
    assert nb == ["BCAD", "BAC", "CBA", "BAC"] and flex == ["EBCAD", "DBAC", "CBA", ""]
    d_nb = [dist(p, r["gt"]) for p, r in zip(nb, rows)]
    assert res.metrics["mean.batch.norm_levenshtein.micro"] == approx(statistics.mean(d_nb))
    d_flex = [dist(p, r["gt"]) for p, r in zip(flex, rows)]  # EBCAD vs BCAD: 1/5; "" vs ACB: 1
    assert d_flex[0] == approx(1 / 5) and d_flex[3] == 1.0
    per = [
        statistics.mean(d for d, r in zip(d_flex, rows) if r["dataset"] == o) for o in ("coco", "mathvista")
    ]
    assert res.metrics["flex.batch.norm_levenshtein.macro"] == round(statistics.mean(per), 3)


def test_pair_reads_only_tags(tmp_path):
    texts = ["<answer>7.5</answer><answer>3</answer>", "<answer> 8 </answer><answer>2</answer>", "[[8]] [[2]]",
             "<think><answer>2</answer><answer>9</answer></think>", "<answer>4, 6</answer>", "I refuse."]  # fmt: skip
    res, rows = _scripted_setting(tmp_path, "pair", texts)
    preds = [ref_pair(r["text"]) for r in rows]
    assert preds == ["C", "C", "C", "B", "C", "C"]
    hits = [p == r["gt"] for p, r in zip(preds, rows)]
    assert res.metrics["mean.pair.acc_with_tie_compat.micro"] == approx(sum(hits) / len(hits))
    assert res.metrics["pair.parse_failure_rate"] == approx(5 / 6)


def _pair_reference(rows, preferred_of):
    """Per seed x order accuracy (a tie or failure wrong), the swapped verdict un-swapped, mean over runs."""
    runs = {}
    for r in rows:
        v = ref_pair(whole(r))
        if r["variant"] == "swap":
            v = {"A": "B", "B": "A"}.get(v, v)
        runs.setdefault((r["seed"], r["variant"]), []).append(v == preferred_of(r))
    return statistics.mean(sum(v) / len(v) for v in runs.values())


def test_vlrewardbench_published_equals_the_reference(tmp_path):
    from test_benchmarks_vlrb_cal import ref_cal, ref_status

    data = write_vlrb_disk(tmp_path / "vlrb")
    res = vlrewardbench.SUITE(
        backend(malformed_judge()),
        config(tmp_path / "o", seeds=(0, 1, 2), data_dir=str(data), parser="published"),
    )
    rows = samples(res.samples_path)
    # acc is the mean over seeds of the mean over the two orders
    assert res.metrics["mean.acc"] == approx(_pair_reference(rows, lambda r: r["preferred"]))
    assert res.protocol["parser"].startswith("published")
    # the cal.py file holds each completion's verdict as the published reader sees it, and cal.py's rule on it
    # gives the official numbers
    by_key = {(r["item_id"], r["seed"], r["variant"]): r for r in rows}
    records = samples(tmp_path / "o" / "vlrewardbench.cal.jsonl")
    for rec in records:
        row = by_key[rec["meta"]["item_id"], rec["meta"]["seed"], rec["meta"]["order"]]
        slot = ref_pair(whole(row))
        verdict = {"A": "B", "B": "A"}.get(slot, slot) if row["variant"] == "swap" else slot
        expected = "doesntMatch" if verdict == "C" else "agree" if verdict == row["preferred"] else "reject"
        assert ref_status(rec) == expected
    ref = ref_cal(records)
    assert res.metrics["official.acc"] == approx(ref["overall"])
    assert res.metrics["official.acc.macro"] == (None if ref["macro"] is None else approx(ref["macro"]))
    for group, value in ref["groups"].items():
        assert res.metrics[f"official.acc.by_category.{group}"] == (None if value is None else approx(value))


def _mean(values):
    values = [v for v in values if v is not None]
    return statistics.mean(values) if values else None


def _mj_reference(rows):
    """test/mj_bench_vllm.py 127-140 (pred 0 / 1 / 2, flipped back for k = 1) scored as MJ-Bench's
    personal/test.py does (with ties = correct / all, without ties = correct / decisive) per order; the mean over
    the two orders, then over seeds (ours)."""
    per_seed = {}
    for seed, order in sorted({(r["seed"], r["variant"]) for r in rows}):
        preds = []
        for r in rows:
            if (r["seed"], r["variant"]) != (seed, order):
                continue
            pred = {"A": 0, "B": 1, "C": 2}[ref_pair(whole(r))]
            if order == "swap" and pred != 2:
                pred = 1 - pred
            preds.append((pred, 0 if r["preferred"] == "A" else 1))
        correct = sum(p == h for p, h in preds)
        decisive = sum(p != 2 for p, _ in preds)
        per_seed.setdefault(seed, []).append((correct / len(preds), correct / decisive if decisive else None))
    with_tie = _mean(_mean(w for w, _ in views) for views in per_seed.values())
    without_tie = _mean(_mean(w for _, w in views) for views in per_seed.values())
    return with_tie, without_tie


def test_mjbench_published_equals_the_reference_on_malformed_completions(tmp_path):
    data = write_mjbench_disk(tmp_path / "mj")
    res = mjbench.SUITE(
        backend(malformed_judge()),
        config(tmp_path / "o", seeds=(0, 1), data_dir=str(data), parser="published"),
    )
    rows = samples(res.samples_path)
    for split in ("alignment", "safety", "quality"):
        with_tie, without_tie = _mj_reference([r for r in rows if r["split"] == split])
        assert res.metrics[f"mean.{split}.acc_with_tie"] == approx(with_tie), split
        assert res.metrics[f"mean.{split}.acc_without_tie"] == (
            None if without_tie is None else approx(without_tie)
        )


def test_mjbench_published_requests_use_the_published_parser(tmp_path):
    seen = []

    def judge(request, sampling):
        seen.append(request.parser)
        return "<think>the first image <answer>9</answer></think><answer>11</answer><answer>0</answer>"

    data = write_mjbench_disk(tmp_path / "mj")
    res = mjbench.SUITE(backend(judge), config(tmp_path / "o", data_dir=str(data), parser="published"))
    assert set(seen) == {"published"}
    # 9 vs 11 in both orders: slot B wins each time -> response 1 first, response 0 after the swap
    assert res.metrics["alignment.parse_failure_rate"] == 0.0
    strict = mjbench.SUITE(backend(judge), config(tmp_path / "s", data_dir=str(data)))
    assert strict.metrics["alignment.parse_failure_rate"] == 1.0  # 11 and 0 are out of range for the project


def test_published_and_pairwise_parsers_at_their_edges():
    """Edges the mutation run found (docs/development.md): reasoning read with the text, exact failure reasons."""
    from perception_judge.evaluation.benchmarks import mmrb2
    from perception_judge.evaluation.benchmarks import multimodal_rewardbench as mmrb
    from perception_judge.evaluation.benchmarks.published import (
        parse_published_prefix,
        published_ranking,
        request_parser,
        tag_ints,
        whole_completion,
    )

    assert tag_ints(None) == []
    assert whole_completion(None) == "" and whole_completion(None, "r") == "<think>r</think>"
    assert parse_published_prefix("<answer>7</answer>", 2, reasoning="<answer>3</answer>") == (
        [3.0, 7.0],
        None,
    )
    assert parse_published_prefix("none", 2) == (None, "published rule: no integer inside an <answer> block")
    assert published_ranking(range(12)) == "LKJIHGFEDCBA"  # more values than the protocol's slots
    assert request_parser("published", prefix=True) == "published_prefix"
    assert request_parser("published") == "published" and request_parser("strict", prefix=True) == "protocol"
    # MMRB2: the published evaluator reads the whole completion, its think block included
    assert mmrb2.parse_published("no json here", 2, reasoning='{"better_response": "A"}') == (
        [1.0, 0.0],
        None,
    )
    assert mmrb2.parse_published("no json here", 2) == (None, "published rule: no better_response")
    for fenced in ('```json\n{"better_response": "B"}\n```', '```\n{"better_response": "B"}```'):
        assert mmrb2._unfenced(fenced) == '{"better_response": "B"}'
    assert mmrb2.parse_strict('{"better_response": "A"}', 2) == ([1.0, 0.0], None)
    assert mmrb2.parse_strict("B is better", 2) == (None, "no JSON object after the reasoning")
    assert mmrb2.parse_strict('{"better_response": "tie"}', 2) == (None, "better_response not A or B")
    # Multimodal RewardBench
    assert mmrb.parse_published("no verdict", 2) == (None, "published rule: neither [[A]] nor [[B]]")
    assert mmrb.parse_strict("[[A]], not [[X]]", 2) == ([1.0, 0.0], None)  # only A and B are verdicts
    assert mmrb.parse_strict("[[A]] or [[B]]", 2) == (None, "not one verdict")
