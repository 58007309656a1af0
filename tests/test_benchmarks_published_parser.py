"""``parser=published`` on the benchmark suites: the published evaluators' reading of a completion.

The reference below is written from the published rules (MLLM-as-a-Judge under the Perception-Judge
``evaluate_metric`` notebook; Flex-Judge's VL-RewardBench and MJ-Bench scripts), straight from the completion
texts the suite writes to its samples file, with none of the project's parsing or metric code: the suite's numbers
under ``parser=published`` must equal it, on malformed completions too.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import statistics

import pytest
from benchmark_fixtures import backend, config, write_mllm_judge, write_vlrb_disk

from perception_judge.evaluation.benchmarks import mjbench, mllm_judge, vlrewardbench
from perception_judge.evaluation.benchmarks.published import (
    answer_ints,
    parse_published,
    parse_published_prefix,
)

approx = pytest.approx

MESSY = [  # completions a real judge writes; {a} {b} {c} are replaced by per-request numbers
    "<think>first guess <answer>{b}</answer></think><answer>{a}</answer><answer>{b}</answer>",
    "<answer>0</answer><answer>11</answer><answer>{c}</answer>",
    "I cannot judge this image.",
    "<answer>nan</answer><answer>{a}</answer><answer>{b}</answer><answer>{c}</answer>",
    "Assistant 1 gets {a}, assistant 2 gets {b}.",
    "[[{a}]] and [[{b}]] for [Assistant 1's Answer]",
    "<answer>{a}</answer><answer>{a}</answer><answer>{b}</answer><answer>{c}</answer>",
    "<answer>{c}, {a}, {b}</answer>",
    "<think>unfinished <answer>{a}</answer>",
    "<answer>12</answer><answer>{b}</answer><answer>{a}</answer>",
    "<answer>{a}</answer><answer>{b}</answer><answer>{c}</answer><answer>{a}</answer>",
]


def messy_judge(request, sampling) -> str:
    digest = hashlib.sha256(f"{request.request_id}:{sampling.seed}".encode()).digest()
    template = MESSY[digest[0] % len(MESSY)]
    return template.format(a=digest[1] % 11, b=digest[2] % 11, c=digest[3] % 11)


# --------------------------------------------------------------------------------------- the reference rules
def ref_ints(text: str) -> list[int]:
    blocks = re.findall(r"<answer>(.*?)</answer>", text, flags=re.S)
    ints = [int(d) for b in blocks for d in re.findall(r"\d+", b)]
    if not ints:
        ints = [int(d) for b in re.findall(r"\[\[([^\[\]]*)\]\]", text) for d in re.findall(r"\d+", b)]
    return ints


def ref_pair(text: str) -> str:
    ints = ref_ints(text)
    if len(ints) < 2:
        return "C"
    return "A" if ints[0] > ints[1] else "B" if ints[0] < ints[1] else "C"


def ref_score(text: str) -> int:
    ints = ref_ints(text)
    if not ints or ints[0] >= 11:
        return -1
    return math.ceil(ints[0] / 2)


def ref_batch(text: str, gt: str) -> str:
    scores = ref_ints(text)[: len(gt)]
    labels = [chr(ord("A") + i) for i in range(len(scores))]
    return "".join(label for _, label in sorted(zip(scores, labels), reverse=True))


def levenshtein(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def samples(path) -> list[dict]:
    return [json.loads(line) for line in open(path, encoding="utf-8")]


# ------------------------------------------------------------------------------------------------- unit rules
@pytest.mark.parametrize(
    "text, n, scores",
    [
        ("<think>x <answer>3</answer></think><answer>8</answer><answer>2</answer>", 2, [3, 8]),
        ("<answer>0</answer><answer>11</answer>", 2, [0, 11]),
        ("<answer>nan</answer><answer>5</answer><answer>6</answer>", 2, [5, 6]),
        ("<answer> 7 </answer><answer>9</answer><answer>1</answer>", 2, [7, 9]),
        ("[[8]] vs [[3]] ([Assistant 1's Answer])", 2, [8, 3]),
        ("<answer>4, 6</answer>", 2, [4, 6]),
        ("<answer>7.5</answer>", 2, [7, 5]),
    ],
)
def test_published_rule_reads_answer_integers_anywhere(text, n, scores):
    assert parse_published(text, n) == ([float(s) for s in scores], None)
    assert answer_ints(text)[:n] == scores == ref_ints(text)[:n]


@pytest.mark.parametrize(
    "text",
    ["I refuse.", "Scores: 7 and 4", "<answer>nan</answer><answer>inf</answer>", "[Assistant 1's Answer] 8"],
)
def test_published_rule_failures(text):
    scores, error = parse_published(text, 2)
    assert scores is None and "published rule" in error
    assert parse_published_prefix(text, 3)[0] is None and ref_ints(text) == []


def test_a_huge_number_is_out_of_range_not_a_crash():
    # Python refuses int() on more than 4,300 digits; the rule reads any run longer than 6 digits as 999999
    assert parse_published("<answer>" + "9" * 5000 + "</answer><answer>2</answer>", 2) == (
        [999999.0, 2.0],
        None,
    )


def test_published_prefix_keeps_a_short_ranking_and_the_reasoning_counts():
    assert parse_published_prefix("<answer>3</answer><answer>9</answer>", 4) == ([3.0, 9.0], None)
    assert parse_published_prefix("<answer>1</answer>" * 6, 4)[0] == [1.0] * 4
    # a backend that split the think block off: the published scripts read the whole completion
    assert parse_published("<answer>5</answer>", 2, reasoning="<answer>9</answer>") == ([9.0, 5.0], None)


def test_parser_option_is_checked(tmp_path):
    bench = write_mllm_judge(tmp_path / "m")
    with pytest.raises(ValueError, match="'parser'"):
        mllm_judge.run(backend(messy_judge), config(tmp_path / "o", data_dir=str(bench), parser="loose"))


# ---------------------------------------------------------------------------- suites against the reference
def test_mllm_judge_published_equals_the_reference_on_messy_completions(tmp_path):
    bench = write_mllm_judge(tmp_path / "m")
    res = mllm_judge.run(
        backend(messy_judge), config(tmp_path / "o", seeds=(0, 1, 2), data_dir=str(bench), parser="published")
    )
    rows = samples(res.samples_path)
    assert res.protocol["parser"].startswith("published")
    seeds = (0, 1, 2)

    def per_seed(setting):
        return [[r for r in rows if r["setting"] == setting and r["seed"] == s] for s in seeds]

    with_tie, without_tie = [], []
    for run in per_seed("pair"):
        preds = [(ref_pair(r["text"]), r["gt"]) for r in run]
        with_tie.append(sum(p == g for p, g in preds) / len(preds))
        decisive = [(p, g) for p, g in preds if g != "C"]
        without_tie.append(sum(p == g for p, g in decisive) / len(decisive))
    assert res.metrics["mean.pair.acc_with_tie_compat.micro"] == approx(statistics.mean(with_tie))
    assert res.metrics["mean.pair.acc_without_tie.micro"] == approx(statistics.mean(without_tie))

    rs = []
    for run in per_seed("score"):
        rs.append(statistics.correlation([ref_score(r["text"]) for r in run], [r["gt"] for r in run]))
    assert res.metrics["mean.score.pearson_compat.micro"] == approx(statistics.mean(rs))

    lev = []
    for run in per_seed("batch"):
        d = []
        for r in run:
            pred = ref_batch(r["text"], r["gt"])
            d.append(levenshtein(pred, r["gt"]) / max(len(pred), len(r["gt"])))
        lev.append(statistics.mean(d))
    assert res.metrics["mean.batch.norm_levenshtein.micro"] == approx(statistics.mean(lev))

    # the messy judge really is messy: the strict parser fails on more and gives other numbers
    strict = mllm_judge.run(
        backend(messy_judge), config(tmp_path / "s", seeds=(0, 1, 2), data_dir=str(bench), parser="strict")
    )
    assert strict.metrics["pair.parse_failure_rate"] > res.metrics["pair.parse_failure_rate"]
    assert strict.metrics["mean.score.pearson_compat.micro"] != approx(
        res.metrics["mean.score.pearson_compat.micro"]
    )


def _pair_reference(rows, preferred_of):
    """Per seed x order accuracy (a tie or failure wrong), the swapped verdict un-swapped, mean over runs."""
    runs = {}
    for r in rows:
        v = ref_pair(r["text"])
        if r["variant"] == "swap":
            v = {"A": "B", "B": "A"}.get(v, v)
        runs.setdefault((r["seed"], r["variant"]), []).append(v == preferred_of(r))
    return statistics.mean(sum(v) / len(v) for v in runs.values())


def test_vlrewardbench_published_equals_the_reference(tmp_path):
    data = write_vlrb_disk(tmp_path / "vlrb")
    res = vlrewardbench.run(
        backend(messy_judge), config(tmp_path / "o", seeds=(0, 1), data_dir=str(data), parser="published")
    )
    rows = samples(res.samples_path)
    # acc is the mean over seeds of the mean over the two orders
    assert res.metrics["mean.acc"] == approx(_pair_reference(rows, lambda r: r["preferred"]))
    assert res.protocol["parser"].startswith("published")


def test_mjbench_published_requests_use_the_published_parser(tmp_path):
    seen = []

    def judge(request, sampling):
        seen.append(request.parser)
        return "<think>the first image <answer>9</answer></think><answer>11</answer><answer>0</answer>"

    from benchmark_fixtures import write_mjbench_disk

    data = write_mjbench_disk(tmp_path / "mj")
    res = mjbench.run(backend(judge), config(tmp_path / "o", data_dir=str(data), parser="published"))
    assert set(seen) == {"published"}
    # 9 vs 11 in both orders: slot B wins each time -> response 1 first, response 0 after the swap
    assert res.metrics["alignment.parse_failure_rate"] == 0.0
    strict = mjbench.run(backend(judge), config(tmp_path / "s", data_dir=str(data)))
    assert strict.metrics["alignment.parse_failure_rate"] == 1.0  # 11 and 0 are out of range for the project
