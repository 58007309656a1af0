"""VL-RewardBench's official ``cal.py``: the judgement file the suite writes in its input layout, read back by an
independent implementation of the script written here from its code (``vl-rewardbench/VL_RewardBench`` ``cal.py``:
``get_dataset_from_id`` lines 39-62, the reparse of ``distribution`` lines 92-113, ``classify`` 181-210,
``distribution_dataset`` 227-276), with none of the project's code.

Judge plan (seeds 0, 1, 2 x orders orig / swap = six judgements an item; statuses in cal.py's terms):

| item (source → group) | plan | cal.py class | project vote |
|---|---|---|---|
| mathverse_1 (reasoning_tasks → reasoning) | 3 agree, 2 reject, 1 failure | other | right |
| RLAIF-V_2 (rlaif-v → hallucination) | 4 agree, 2 ties | agree | right |
| wildvision-battle_3 (→ general) | 4 reject, 2 agree | reject | wrong |
| hallucination_pair_4 (povid → hallucination) | 3 ties, 3 agree | other | right |
| vlfeedback_5 (→ general) | 6 agree | agree | right |
| unknown_6 (vlfeedback → general) | 4 failures, 2 agree | doesntMatch | right |

Official: general 1 / 2, hallucination 1 / 1, reasoning none decided (n/a: macro n/a), overall 2 / 3.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from benchmark_fixtures import VLRB, backend, config, write_vlrb_disk

from perception_judge.evaluation.benchmarks import vlrewardbench
from perception_judge.evaluation.benchmarks.vlrb_cal import cal_source, classify

approx = pytest.approx
JUDGEMENTS = [(seed, order) for seed in (0, 1, 2) for order in ("orig", "swap")]
PLAN = {
    "mathverse_1": ["agree", "agree", "reject", "agree", "reject", "fail"],
    "RLAIF-V_2": ["agree", "tie", "agree", "agree", "tie", "agree"],
    "wildvision-battle_3": ["reject", "agree", "reject", "reject", "agree", "reject"],
    "hallucination_pair_4": ["tie", "agree", "tie", "agree", "tie", "agree"],
    "vlfeedback_5": ["agree"] * 6,
    "unknown_6": ["fail", "fail", "agree", "fail", "fail", "agree"],
}
ALL_DECIDED = {  # every source and every group has a decided item: cal.py prints its numbers
    "mathverse_1": ["agree", "agree", "reject", "fail", "agree", "agree"],
    "RLAIF-V_2": ["reject"] * 4 + ["agree", "tie"],
    "wildvision-battle_3": ["agree"] * 6,
    "hallucination_pair_4": ["agree", "agree", "agree", "agree", "reject", "reject"],
    "vlfeedback_5": ["reject", "reject", "reject", "reject", "tie", "tie"],
    "unknown_6": ["agree", "agree", "agree", "agree", "fail", "fail"],
}
FAILURES = [
    "<answer>7.5</answer><answer>3</answer>",
    "[[8]] [[2]]",
    "I cannot judge this.",
    "<answer> 8 </answer>",
]


def preferred_of(item_id: str) -> str:
    ranking = next(r for i, _, r in VLRB if i == item_id)
    return "A" if ranking == [0, 1] else "B"


def plan_judge(plan):
    """The completion that gives each judgement its planned status (malformed forms for failures; slot scores
    after the order's swap)."""

    def judge(request, sampling):
        _, item_id, order = request.request_id.split(":")
        status = plan[item_id][JUDGEMENTS.index((sampling.seed, order))]
        if status == "fail":
            return FAILURES[sampling.seed % len(FAILURES)]
        if status == "tie":
            return "<think>both fine</think><answer>6</answer><answer>6</answer>"
        preferred = preferred_of(item_id)
        winner = preferred if status == "agree" else {"A": "B", "B": "A"}[preferred]
        if order == "swap":
            winner = {"A": "B", "B": "A"}[winner]
        scores = (8, 3) if winner == "A" else (2, 9)
        return f"<think>draft</think><answer>{scores[0]}</answer>\n<answer>{scores[1]}</answer>"

    return judge


# --------------------------------------------------------------------------------- the reference: cal.py
CAL_PATTERN = (
    r"(?:Overall Judgment|Therefore)\s*.*\s*-*\s*Answer\s*(\d+)\s*is\s*(?:the\s*)?(?:slightly\s*)?better"
)
GROUP_OF = {"vlfeedback": "general", "povid": "hallucination", "reasoning_tasks": "reasoning",
            "rlhf-v": "hallucination", "rlaif-v": "hallucination", "wildvision-battle": "general"}  # fmt: skip


def ref_source(id_value: str) -> str:
    cut = min((id_value.find("_"), id_value.find("-")), key=lambda x: x if x != -1 else float("inf"))
    prefix = id_value[:cut] if cut != -1 else id_value
    if prefix == "RLAIF":
        return "rlaif-v"
    if prefix == "RLHF":
        return "rlhf-v"
    if prefix in ("mathverse", "mmmu"):
        return "reasoning_tasks"
    if prefix == "wildvision":
        return "wildvision-battle"
    return "povid" if prefix == "hallucination" else "vlfeedback"


def ref_status(record: dict) -> str:
    """cal.py lines 97-113 (reparse=True): the rejected answer's number from ranking and random_number, the
    judge's answer number from filter_choice."""
    rejected = record["ranking"].index(1 if record["meta"]["random_number"] == 0 else 0) + 1
    text = record["meta"]["filter_choice"].replace("\n", "").replace("*", "")
    match = re.search(CAL_PATTERN, text, re.IGNORECASE)
    if not match:
        return "doesntMatch"
    return "reject" if int(match.group(1)) == rejected else "agree"


def ref_cal(records: list[dict]) -> dict:
    """cal.py's distribution (k above every item's count) -> classify -> distribution_dataset."""
    dist = {}
    for r in records:
        key = r["id"] + r["query"] + "\t".join(sorted(r["response"]))
        d = dist.setdefault(key, {"agree": 0, "reject": 0, "doesntMatch": 0, "dataset": ref_source(r["id"])})
        d[ref_status(r)] += 1
    per_source = {}
    for d in dist.values():
        total = d["agree"] + d["reject"] + d["doesntMatch"]
        cls = "agree" if d["agree"] > total / 2 else "reject" if d["reject"] > total / 2 else "x"
        s = per_source.setdefault(d["dataset"], {"agree": 0, "reject": 0})
        if cls != "x":
            s[cls] += 1
    correct = {g: 0 for g in ("general", "hallucination", "reasoning")}
    total = dict(correct)
    for source, s in per_source.items():
        correct[GROUP_OF[source]] += s["agree"]
        total[GROUP_OF[source]] += s["agree"] + s["reject"]
    groups = {g: correct[g] / total[g] if total[g] else None for g in correct}
    crashes = any(s["agree"] + s["reject"] == 0 for s in per_source.values()) or not all(total.values())
    return {
        "groups": groups,
        "overall": sum(correct.values()) / sum(total.values()) if sum(total.values()) else None,
        "macro": None if not all(total.values()) else sum(groups.values()) / 3,
        "crashes": crashes,
    }


def run_suite(tmp_path, plan):
    data = write_vlrb_disk(tmp_path / "vlrb")
    res = vlrewardbench.SUITE(
        backend(plan_judge(plan)),
        config(
            tmp_path / "o", seeds=(0, 1, 2), data_dir=str(data), parser="published", aggregation="mean,vote"
        ),
    )
    lines = (tmp_path / "o" / "vlrewardbench.cal.jsonl").read_text(encoding="utf-8").splitlines()
    return res, [json.loads(line) for line in lines]


@pytest.mark.parametrize("plan", [PLAN, ALL_DECIDED], ids=["some_undecided", "all_decided"])
def test_cal_file_reads_back_to_the_same_verdicts_and_official_numbers(tmp_path, plan):
    res, records = run_suite(tmp_path, plan)
    assert res.protocol["official"]["file"].endswith("vlrewardbench.cal.jsonl")
    assert len(records) == 6 * 6
    for r in records:  # cal.py's input layout
        assert {"id", "query", "response", "ranking", "meta"} <= set(r) and "0" not in r
        assert {"random_number", "filter_choice", "flag_status"} <= set(r["meta"])
    # every line reads back (regex path and flag_status path alike) to the judgement the samples file holds
    samples = {
        (s["item_id"], s["seed"], s["variant"]): s
        for s in map(json.loads, Path(res.samples_path).read_text(encoding="utf-8").splitlines())
    }
    for r in records:
        planned = plan[r["meta"]["item_id"]][JUDGEMENTS.index((r["meta"]["seed"], r["meta"]["order"]))]
        expected = {"agree": "agree", "reject": "reject"}.get(planned, "doesntMatch")
        assert ref_status(r) == r["meta"]["flag_status"] == expected
        assert (r["meta"]["item_id"], r["meta"]["seed"], r["meta"]["order"]) in samples
        assert r["id"] == r["meta"]["item_id"] and r["meta"]["random_number"] == (
            r["meta"]["order"] == "swap"
        )
    ref = ref_cal(records)
    m = res.metrics
    assert m["official.acc"] == approx(ref["overall"])
    assert m["official.acc.macro"] == (None if ref["macro"] is None else approx(ref["macro"]))
    for g, value in ref["groups"].items():
        assert m[f"official.acc.by_category.{g}"] == (None if value is None else approx(value)), g
    assert (res.protocol["official"]["cal_py"].startswith("cal.py stops")) == ref["crashes"]


def test_cal_rule_differs_from_the_project_vote(tmp_path):
    res, _ = run_suite(tmp_path, PLAN)
    m = res.metrics
    assert m["official.acc"] == approx(2 / 3) and m["official.n"] == 3 and m["official.n_undecided"] == 3
    assert m["official.acc.by_category.general"] == approx(1 / 2)
    assert m["official.acc.by_category.hallucination"] == approx(1.0)
    # no decided reasoning item: n/a with its reason, never 0
    assert m["official.acc.by_category.reasoning"] is None and m["official.acc.macro"] is None
    why = res.protocol["undefined_metrics"]
    assert (
        "reasoning" in why["official.acc.by_category.reasoning"]
        and "divides by zero" in why["official.acc.macro"]
    )
    note = res.protocol["official"]["cal_py"]
    assert "povid" in note and "reasoning_tasks" in note and "reasoning" in note
    assert res.protocol["official_rule"].startswith("VL-RewardBench cal.py")
    # the project's vote (sign of #B - #A over the six judgements, failures and ties abstaining): mathverse_1
    # (3 - 2), hallucination_pair_4 and unknown_6 are right, wildvision_3 wrong -> 5 of 6
    assert m["vote.acc"] == approx(5 / 6)


@pytest.mark.parametrize(
    "record_id",
    ["RLAIF-V-Dataset_1", "RLHF-V_2", "rlaif_3", "mathverse_4", "mmmu-pro_5", "wildvision-battle_6", "povid_7",
     "hallucination_pair-8", "vlfeedback_9", "VLFeedback-10", "plain", "a-b_c", ""],
)  # fmt: skip
def test_source_rule_is_cal_py(record_id):
    assert cal_source(record_id) == ref_source(record_id)


def test_classify_is_a_strict_majority_of_all_judgements():
    assert classify(3, 2, 1) == "other" and classify(4, 2, 0) == "agree" and classify(1, 1, 0) == "other"
    assert (
        classify(0, 2, 1) == "reject" and classify(1, 0, 2) == "doesntMatch" and classify(1, 0, 0) == "agree"
    )
