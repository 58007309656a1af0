"""VL-RewardBench's official scoring, the benchmark's ``cal.py`` (repository ``vl-rewardbench/VL_RewardBench``): the
judgement file it reads (:func:`cal_records`; its fields: docs/benchmarks.md "The judgement file for the official
script") and its rule (:func:`official_metrics`), so that the unmodified script scores the project's judgements and
``official.*`` equals what it prints. Line numbers below are ``cal.py``'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks.pairs import ORDERS, SWAP, PairItem

GROUPS: tuple[str, ...] = ("general", "hallucination", "reasoning")
SOURCE_GROUP: dict[str, str] = {
    "vlfeedback": "general",
    "wildvision-battle": "general",
    "povid": "hallucination",
    "rlhf-v": "hallucination",
    "rlaif-v": "hallucination",
    "reasoning_tasks": "reasoning",
}
"""cal.py's ``group_mapping`` (lines 241-248)."""
RANDOM_NUMBER = {"orig": 0, "swap": 1}
NO_VERDICT = {
    "C": "Overall Judgment: no preference, the two scores tie.",
    None: "Overall Judgment: none, the completion has no parsable scores.",
}
RULE = (
    "VL-RewardBench cal.py (classify + distribution_dataset): per item a strict majority of all its k judgements "
    "(agree > total/2 or reject > total/2, total = agree + reject + doesntMatch; ties and unparsed judgements count "
    "in total); accuracy = agree / (agree + reject) items per group; overall = sum agree / sum (agree + reject); "
    "macro = mean of general, hallucination and reasoning"
)


def cal_source(record_id: str) -> str:
    """cal.py's ``get_dataset_from_id`` (lines 39-62): the id's prefix before its first ``_`` or ``-``, read
    case-sensitively: ``RLAIF`` → rlaif-v, ``RLHF`` → rlhf-v, ``mathverse`` / ``mmmu`` → reasoning_tasks,
    ``wildvision`` → wildvision-battle, ``hallucination`` → povid, anything else → vlfeedback (``RLAIF-V-Dataset_12``
    → rlaif-v, ``rlaif_3`` → vlfeedback, ``mmmu-pro_1`` → reasoning_tasks)."""
    cuts = [i for i in (record_id.find("_"), record_id.find("-")) if i != -1]
    prefix = record_id[: min(cuts)] if cuts else record_id
    named = {"RLAIF": "rlaif-v", "RLHF": "rlhf-v", "mathverse": "reasoning_tasks", "mmmu": "reasoning_tasks"}
    named |= {"wildvision": "wildvision-battle", "hallucination": "povid"}
    return named.get(prefix, "vlfeedback")


def judgement_status(verdict: str | None, preferred: str) -> str:
    """One judgement in cal.py's terms (lines 104-113): ``agree`` when its verdict (response terms) is the human's
    preferred response, ``reject`` when it is the other one, ``doesntMatch`` for a tie (C) or no verdict (None)."""
    if verdict not in ("A", "B"):
        return "doesntMatch"
    return "agree" if verdict == preferred else "reject"


def filter_choice(slot_verdict: str | None) -> str:
    """The sentence cal.py's regex (line 102) reads as the judge's verdict: ``Answer 1`` / ``Answer 2`` is the
    response shown first / second (slot terms); a tie or no verdict gets a sentence it does not match."""
    if slot_verdict in ("A", "B"):
        return f"Overall Judgment: Answer {1 if slot_verdict == 'A' else 2} is better."
    return NO_VERDICT[slot_verdict if slot_verdict == "C" else None]


def cal_record(item: PairItem, order: str, seed: int, verdict: str | None) -> dict[str, Any]:
    """One judgement as a line of cal.py's input, ``verdict`` in response terms: ``ranking`` and ``random_number``
    (lines 99-100 turn them into the rejected answer's number), ``filter_choice`` (line 102) and ``flag_status``
    (its ``reparse=False`` path, line 94), plus the project's ``seed``, ``order`` and ``item_id``."""
    slot = M.swap_verdict(verdict) if order == SWAP else verdict
    meta = {"random_number": RANDOM_NUMBER[order], "filter_choice": filter_choice(slot)}
    meta |= {"flag_status": judgement_status(verdict, str(item.preferred)), "seed": seed, "order": order}
    record = {"id": item.record_id or item.item_id, "query": item.question, "response": list(item.responses)}
    ranking = [0, 1] if item.preferred == "A" else [1, 0]
    return record | {"ranking": ranking, "meta": meta | {"item_id": item.item_id}}


def cal_records(
    items: Sequence[PairItem], per_seed: Mapping[int, Sequence[Mapping[str, str | None]]]
) -> list[dict[str, Any]]:
    """Every judgement of every item with a decisive human preference as cal.py's input lines:
    ``per_seed[seed][i][order]`` is item i's verdict in response terms (None on a failure)."""
    return [
        cal_record(item, order, seed, verdicts[i].get(order))
        for seed, verdicts in per_seed.items()
        for i, item in enumerate(items)
        if item.preferred in ("A", "B")
        for order in ORDERS
    ]


def classify(agree: int, reject: int, doesnt_match: int) -> str:
    """cal.py's ``classify`` (lines 188-210) of one item: with ``total = agree + reject + doesntMatch``, ``agree``
    if agree > total / 2, ``reject`` if reject > total / 2, ``doesntMatch`` if doesntMatch > total / 2, else
    ``other`` (3 agree, 2 reject, 1 doesntMatch out of 6 is *other*)."""
    total = agree + reject + doesnt_match
    for label, count in (("agree", agree), ("reject", reject), ("doesntMatch", doesnt_match)):
        if count > total / 2:
            return label
    return "other"


def cal_key(record: Mapping[str, Any]) -> str:
    """cal.py's item key (line 92): ``id + query + "\\t".join(sorted(response))``."""
    return str(record["id"]) + str(record["query"]) + "\t".join(sorted(record["response"]))


def item_classes(records: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    """Per item key, (its source by :func:`cal_source`, its :func:`classify` class) over **all** its judgements
    (cal.py with ``k`` at least the judgements per item; a smaller ``k`` keeps a random subset of them)."""
    tallies: dict[str, dict[str, Any]] = {}
    for r in records:
        tally = tallies.setdefault(cal_key(r), {"source": cal_source(str(r["id"])), "agree": 0, "reject": 0})
        tally.setdefault("doesntMatch", 0)
        tally[r["meta"]["flag_status"]] += 1
    return {
        key: (t["source"], classify(t["agree"], t["reject"], t["doesntMatch"])) for key, t in tallies.items()
    }


def official_metrics(records: Sequence[Mapping[str, Any]]) -> tuple[dict[str, float | None], dict[str, str]]:
    """cal.py's numbers on its input lines: each judgement is :func:`judgement_status`, each item (:func:`cal_key`)
    the :func:`classify` class of all its judgements, its group that of its id's :func:`cal_source`; per group
    ``acc.by_category.<group>`` = agree items ÷ (agree + reject) items, ``acc`` (Overall) = Σ agree ÷ Σ (agree +
    reject), ``acc.macro`` = the mean of the three group ratios (lines 249-276); ``n`` (decided items, agree +
    reject) and ``n_undecided``. And, for each number that is undefined, why (cal.py divides by zero there): a group
    without a decided item, the macro without all three groups, the overall without any decided item."""
    agree = dict.fromkeys(GROUPS, 0)
    decided = dict.fromkeys(GROUPS, 0)
    classes = item_classes(records).values()
    for source, label in classes:
        if label in ("agree", "reject"):
            decided[SOURCE_GROUP[source]] += 1
            agree[SOURCE_GROUP[source]] += label == "agree"
    per = {g: M.rate(agree[g], decided[g]) for g in GROUPS}
    missing = [g for g in GROUPS if per[g] is None]
    out: dict[str, float | None] = {
        "acc": M.rate(sum(agree.values()), sum(decided.values())),
        "acc.macro": None if missing else M.mean(per.values()),
        **{f"acc.by_category.{g}": per[g] for g in GROUPS},
        "n": float(sum(decided.values())),
        "n_undecided": float(len(classes) - sum(decided.values())),
    }
    why = {
        f"acc.by_category.{g}": f"no decided (agree or reject) item in {g}; cal.py divides by zero"
        for g in missing
    }
    if missing:
        why["acc.macro"] = f"the mean of the three groups lacks {', '.join(missing)}; cal.py divides by zero"
    if out["acc"] is None:
        why["acc"] = "no decided (agree or reject) item; cal.py divides by zero"
    return out, why


def cal_py_stops(records: Sequence[Mapping[str, Any]]) -> str | None:
    """Why the unmodified cal.py stops with ZeroDivisionError on these lines, or None when it prints its numbers:
    it divides per source (line 253) and per group (lines 269-274), so every source present and each of the three
    groups needs a decided item."""
    present: dict[str, int] = {}
    for source, label in item_classes(records).values():
        present[source] = present.get(source, 0) + (label in ("agree", "reject"))
    empty = sorted(s for s, n in present.items() if n == 0)
    groups = {SOURCE_GROUP[s] for s, n in present.items() if n}
    lacking = [g for g in GROUPS if g not in groups]
    if not empty and not lacking:
        return None
    parts = [f"source(s) without a decided item: {', '.join(empty)} (line 253)"] if empty else []
    parts += [f"group(s) without a decided item: {', '.join(lacking)} (lines 269-274)"] if lacking else []
    return "cal.py stops with ZeroDivisionError: " + "; ".join(parts)
