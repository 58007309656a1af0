"""Pairwise items judged in both orders: the shared engine of VL-RewardBench, MJ-Bench and the position,
verbosity and self-enhancement suites, and the pair sources the bias suites read.

A :class:`PairItem` holds two candidates and, where known, the human preference in **response space**:
``"A"`` = ``responses[0]`` is better, ``"B"`` = ``responses[1]``, ``"C"`` = a tie, ``None`` = unknown. Each item
is judged in the original order (variant ``orig``) and with the two candidates swapped (``swap``); the swapped
verdict is un-swapped before it is compared, so "A" always means ``responses[0]``.

Pair sources (option ``source`` of the bias suites):

=============  ===========================================================================================
mllm_judge     MLLM-as-a-Judge ``pair.jsonl`` (``data_dir`` or ``pair_file``; ``images_dir``); human A/B/C;
               candidate names from ``answer1.name`` / ``answer2.name``
vlrewardbench  VL-RewardBench (``data_dir``, ``split``): ``human_ranking``; names from ``models`` if present
ppjd           a PPJD training-set folder (``trainset_dir``, ``split`` default ``validation``; columns
               question, responses, kinds, images): every pair of kinds in a row, better kind known
               (r_c > r_rp > r_rp_r); names are the kinds. A sweep of a training run points position and
               verbosity here (the run's ``train_set``) when no other source is set
pairs_jsonl    a JSONL of our generic pair records (``pairs_file``): ``id, question, responses[2]``, optional
               ``names[2]``, ``image`` (path under ``images_dir`` or the file's folder), ``preferred`` (0, 1,
               "A", "B", "tie" or null)
=============  ===========================================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks.common import (
    BenchmarkDataError,
    BenchmarkFileMissing,
    ImageSource,
    Outcome,
    first_field,
    macro,
    opt,
    opt_path,
    read_jsonl,
    slug,
)
from perception_judge.protocol import build_messages
from perception_judge.schema import RESPONSE_KINDS, JudgeRequest

ORIG, SWAP = "orig", "swap"
ORDERS: tuple[str, ...] = (ORIG, SWAP)
SOURCES: tuple[str, ...] = ("mllm_judge", "vlrewardbench", "ppjd", "pairs_jsonl")
SOURCE_OPTIONS: tuple[str, ...] = (
    "source",
    "data_dir",
    "pair_file",
    "images_dir",
    "split",
    "trainset_dir",
    "pairs_file",
    "missing_images",
)
SOURCE_PATH_OPTIONS: tuple[str, ...] = ("data_dir", "pair_file", "trainset_dir", "pairs_file")
"""The options that name where the pairs are (one per source; :func:`infer_source` picks the source by them)."""


@dataclass
class PairItem:
    """Two candidates for one question (and its images), with the human preference where known."""

    item_id: str
    question: str
    responses: list[str]
    preferred: str | None  # "A" | "B" | "C" | None, in response space
    group: str = ""
    names: list[str | None] = field(default_factory=lambda: [None, None])
    load_images: Callable[[], list[Any]] = field(default=lambda: [], repr=False)
    check_images: Callable[[], None] = field(default=lambda: None, repr=False)  # fail fast on missing files
    meta: dict[str, Any] = field(default_factory=dict)


def requests_both_orders(
    suite: str,
    item_id: str,
    question: str,
    responses: Sequence[str],
    images: Sequence[Any],
    tag: str = "",
    orders: Sequence[str] = ORDERS,
    swap_images: bool = False,
) -> list[JudgeRequest]:
    """Pair-protocol requests for two candidates in each order (variant ``f"{tag}{order}"``). Swapping
    exchanges the two responses, or the two images when ``swap_images`` (MJ-Bench: the candidates are images)."""
    out = []
    for order in orders:
        swapped = order == SWAP
        resp = list(responses)
        imgs = list(images)
        if swapped and swap_images:
            imgs.reverse()
        elif swapped:
            resp.reverse()
        out.append(
            JudgeRequest(
                request_id=f"{suite}:{item_id}:{tag}{order}",
                messages=build_messages("pair", question, resp, n_images=len(imgs)),
                images=imgs,
                n_scores=2,
                parser="protocol",
                meta={"variant": f"{tag}{order}", "suite": suite},
            )
        )
    return out


def pair_requests(
    item: PairItem,
    suite: str,
    prepare: Callable[[Any], Any] | None = None,
    swap_images: bool = False,
) -> list[JudgeRequest]:
    """The item's requests in both orders; its images are loaded once and passed through ``prepare`` (the
    suite's image policy)."""
    images = [prepare(im) if prepare else im for im in item.load_images()]
    return requests_both_orders(
        suite, item.item_id, item.question, item.responses, images, swap_images=swap_images
    )


def slot_verdict(outcome: Outcome | None) -> str | None:
    """The verdict in slot terms (A = the response shown first); None on failure / no judgment."""
    if outcome is None or outcome.scores is None:
        return None
    return M.pair_verdict(outcome.scores[0], outcome.scores[1])


def response_verdict(outcome: Outcome | None, order: str) -> str | None:
    """The verdict in response terms (A = ``responses[0]``): the swapped order's verdict un-swapped."""
    v = slot_verdict(outcome)
    return M.swap_verdict(v) if order == SWAP else v


def response_scores(outcome: Outcome | None, order: str) -> tuple[float, float] | None:
    """(score of responses[0], score of responses[1]) of one judgment; None on failure."""
    if outcome is None or outcome.scores is None:
        return None
    s0, s1 = outcome.scores[0], outcome.scores[1]
    return (s1, s0) if order == SWAP else (s0, s1)


def order_outcomes(
    outcomes: dict[tuple[int, str, int], Outcome], judged: Sequence[int], seed: int
) -> list[dict[str, Outcome | None]]:
    """Per judged item (``judged``: the item indices :func:`judged_items` returns), its judgment in each order
    under one seed."""
    return [{o: outcomes.get((i, o, seed)) for o in ORDERS} for i in judged]


def order_verdicts(
    outcomes: dict[tuple[int, str, int], Outcome], judged: Sequence[int], seed: int
) -> list[dict[str, str | None]]:
    """Per judged item, its verdict in each order under one seed, in response terms."""
    return [
        {o: response_verdict(v, o) for o, v in per_order.items()}
        for per_order in order_outcomes(outcomes, judged, seed)
    ]


def order_metrics(
    items: Sequence[PairItem],
    verdicts: Sequence[dict[str, str | None]],
    group_name: str = "category",
) -> dict[str, float | None]:
    """Accuracy metrics of one run where every item was judged in both orders (``verdicts[i][order]`` in
    response terms). A tie or a failure is wrong; items without a decisive preference are left out.

    * ``acc`` — correct judgments / judgments over both orders (the expectation of Flex-Judge's random swap);
    * ``acc_orig_order`` / ``acc_swapped_order`` — one order only;
    * ``acc_both_orders`` — items correct in both orders;
    * ``acc.by_{group}.<g>`` and ``acc.macro`` — per group and their unweighted mean;
    * ``pred_tie_rate`` — predicted ties / parsed judgments."""
    idx = [i for i, it in enumerate(items) if it.preferred in ("A", "B")]
    out: dict[str, float | None] = {}

    def acc(ids: list[int], orders: Sequence[str]) -> float | None:
        n = sum(len(orders) for _ in ids)
        correct = sum(verdicts[i].get(o) == items[i].preferred for i in ids for o in orders)
        return M.rate(correct, n)

    out["acc"] = acc(idx, ORDERS)
    out["acc_orig_order"] = acc(idx, (ORIG,))
    out["acc_swapped_order"] = acc(idx, (SWAP,))
    out["acc_both_orders"] = M.rate(
        sum(all(verdicts[i].get(o) == items[i].preferred for o in ORDERS) for i in idx), len(idx)
    )
    parsed = [v for i in range(len(items)) for v in verdicts[i].values() if v is not None]
    out["pred_tie_rate"] = M.rate(sum(v == "C" for v in parsed), len(parsed))
    groups: dict[str, list[int]] = {}
    for i in idx:
        groups.setdefault(items[i].group, []).append(i)
    per = {g: acc(ids, ORDERS) for g, ids in sorted(groups.items())}
    out["acc.macro"] = macro(per)
    out.update({f"acc.by_{group_name}.{slug(g)}": v for g, v in per.items()})
    return out


def vote_over(verdicts: Sequence[str | None]) -> str | None:
    """Majority verdict over seeds × orders (response terms); failures abstain."""
    return M.vote_verdict(verdicts)


def voted_verdicts(per_seed: Sequence[Sequence[dict[str, str | None]]], n: int) -> list[str | None]:
    """The :func:`vote_over` verdict of each of ``n`` items over seeds × orders (``per_seed[s][i][order]``)."""
    return [vote_over([run[j][o] for run in per_seed for o in ORDERS]) for j in range(n)]


def voted_acc(
    items: Sequence[PairItem], voted: Sequence[str | None], group_name: str = "category"
) -> dict[str, float | None]:
    """Accuracy of one voted verdict per item (a tie or failure is wrong), overall, per group and macro."""
    idx = [i for i, it in enumerate(items) if it.preferred in ("A", "B")]
    out: dict[str, float | None] = {"acc": M.rate(sum(voted[i] == items[i].preferred for i in idx), len(idx))}
    groups: dict[str, list[int]] = {}
    for i in idx:
        groups.setdefault(items[i].group, []).append(i)
    per = {
        g: M.rate(sum(voted[i] == items[i].preferred for i in ids), len(ids))
        for g, ids in sorted(groups.items())
    }
    out["acc.macro"] = macro(per)
    out.update({f"acc.by_{group_name}.{slug(g)}": v for g, v in per.items()})
    return out


# ----------------------------------------------------------------------------------------------------------
# Sources for the bias suites
# ----------------------------------------------------------------------------------------------------------


def infer_source(options: dict[str, Any]) -> str:
    source = opt(options, "source")
    if source is not None:
        if source not in SOURCES:
            raise ValueError(f"option 'source' must be one of {', '.join(SOURCES)}, got {source!r}")
        return str(source)
    if opt(options, "pairs_file") is not None:
        return "pairs_jsonl"
    if opt(options, "trainset_dir") is not None:
        return "ppjd"
    if opt(options, "pair_file") is not None:
        return "mllm_judge"
    data_dir = opt_path(options, "data_dir", required=False)
    if data_dir is not None:
        return "mllm_judge" if (data_dir / "pair.jsonl").is_file() else "vlrewardbench"
    raise ValueError(
        "no pair source: set 'source' (mllm_judge, vlrewardbench, ppjd, pairs_jsonl) and its path option "
        "(data_dir, pair_file, trainset_dir or pairs_file)"
    )


def _preferred(value: Any) -> str | None:
    """A generic record's ``preferred``: 0 / "A" → "A", 1 / "B" → "B", "tie" / "C" → "C", null → None."""
    if value is None:
        return None
    mapped = None
    if isinstance(value, int) and not isinstance(value, bool):
        mapped = {0: "A", 1: "B"}.get(value)
    elif isinstance(value, str):
        mapped = {"0": "A", "1": "B", "A": "A", "B": "B", "C": "C", "TIE": "C"}.get(value.strip().upper())
    if mapped is None:
        raise ValueError(f"'preferred' must be 0, 1, 'A', 'B', 'tie' or null, got {value!r}")
    return mapped


def load_pair_source(
    options: dict[str, Any], limit: int | None, suite: str
) -> tuple[list[PairItem], dict[str, Any]]:
    """PairItems from the configured source, and a description of the source for the protocol."""
    source = infer_source(options)
    missing = opt(options, "missing_images", "error")
    if source == "mllm_judge":
        from perception_judge.evaluation.benchmarks import mllm_judge

        pair_file = opt_path(options, "pair_file", required=False)
        if pair_file is None:
            pair_file = opt_path(options, "data_dir", suite=suite) / "pair.jsonl"  # type: ignore[operator]
        files = mllm_judge._files({"pair_file": str(pair_file)}, ["pair"])
        images = ImageSource(mllm_judge._image_roots(options, files), missing, "MLLM-as-a-Judge image")
        raw, _ = mllm_judge.load_items("pair", files["pair"])
        items = [
            PairItem(
                item_id=it.item_id.replace(":", "_") + f"_r{it.row}",
                question=it.question,
                responses=list(it.responses),
                preferred=it.gt,
                group=it.dataset,
                names=list(it.names),
                load_images=lambda it=it, f=files["pair"]: [images.load(it.image, f"{f} record {it.row}")],
                check_images=lambda it=it, f=files["pair"]: images.check(it.image, f"{f} record {it.row}"),
            )
            for it in raw
        ]
        desc = {"source": "mllm_judge", "file": str(files["pair"])}
    elif source == "vlrewardbench":
        from perception_judge.evaluation.benchmarks import vlrewardbench

        items, _, path = vlrewardbench.load_items(options, suite)
        desc = {"source": "vlrewardbench", "path": str(path)}
    elif source == "ppjd":
        items, desc = _ppjd_items(options, suite)
    else:
        items, desc = _jsonl_items(options, missing, suite)
    if limit is not None:
        items = items[:limit]
    for item in items:
        item.check_images()
    return items, desc


def _ppjd_items(options: dict[str, Any], suite: str) -> tuple[list[PairItem], dict[str, Any]]:
    from perception_judge.trainset import load_training_set

    folder = opt_path(options, "trainset_dir", suite=suite)
    split = str(opt(options, "split", "validation"))
    if not folder.is_dir():  # type: ignore[union-attr]
        raise BenchmarkFileMissing(f"PPJD training set: no such folder {str(folder)!r}", folder)
    try:
        ds = load_training_set(folder, splits=[split])[split]
    except FileNotFoundError as e:
        raise BenchmarkFileMissing(f"PPJD training set: {e} (split {split!r})", folder) from None
    text = ds.select_columns(["question", "responses", "kinds", "record_key"])
    imgs = ds.select_columns(["images"])
    rank = {k: i for i, k in enumerate(RESPONSE_KINDS)}
    seen: set[tuple[str, str, str]] = set()
    items: list[PairItem] = []
    for i in range(len(text)):
        row = text[i]
        responses, kinds = list(row["responses"]), list(row["kinds"])
        for a, b in combinations(range(len(kinds)), 2):
            ka, kb = kinds[a], kinds[b]
            if ka not in rank or kb not in rank or ka == kb:
                continue
            key = (str(row["record_key"]), *sorted((ka, kb)))
            if key in seen:
                continue
            seen.add(key)
            items.append(
                PairItem(
                    item_id=f"{row['record_key']}_{ka}_vs_{kb}",
                    question=str(row["question"]),
                    responses=[responses[a], responses[b]],
                    preferred="A" if rank[ka] < rank[kb] else "B",
                    group=f"{ka}_vs_{kb}" if rank[ka] < rank[kb] else f"{kb}_vs_{ka}",
                    names=[ka, kb],
                    load_images=lambda i=i: list(imgs[i]["images"]),
                )
            )
    return items, {"source": "ppjd", "folder": str(folder), "split": split}


def _jsonl_items(options: dict[str, Any], missing: str, suite: str) -> tuple[list[PairItem], dict[str, Any]]:
    path = opt_path(options, "pairs_file", suite=suite)
    records = read_jsonl(path, "pairs file")  # type: ignore[arg-type]
    roots = [opt_path(options, "images_dir", required=False) or path.parent]  # type: ignore[union-attr]
    images = ImageSource(roots, missing, "pair image")
    items = []
    for row, rec in enumerate(records, 1):
        responses = rec.get("responses")
        question = first_field(rec, ("question", "query", "instruction"))
        if (
            not isinstance(responses, list)
            or len(responses) != 2
            or not all(isinstance(r, str) for r in responses)
        ):
            raise BenchmarkDataError(
                f"pairs file: {path!s} record {row}: 'responses' must be two strings", path
            )
        if not isinstance(question, str):
            raise BenchmarkDataError(f"pairs file: {path!s} record {row}: no 'question'", path)
        names = rec.get("names") or [None, None]
        try:
            preferred = _preferred(rec.get("preferred"))
        except ValueError as e:
            raise BenchmarkDataError(f"pairs file: {path!s} record {row}: {e}", path) from None
        image = first_field(rec, ("image", "image_path"))
        items.append(
            PairItem(
                item_id=str(rec.get("id", row)),
                question=question,
                responses=list(responses),
                preferred=preferred,
                group=str(rec.get("group") or rec.get("category") or ""),
                names=[str(n) if n is not None else None for n in names][:2],
                load_images=(lambda image=image, row=row: [images.load(image, f"{path} record {row}")])
                if image is not None
                else (lambda: []),
                check_images=(lambda image=image, row=row: images.check(image, f"{path} record {row}"))
                if image is not None
                else (lambda: None),
            )
        )
    return items, {"source": "pairs_jsonl", "file": str(path)}


__all__ = [
    "ORDERS",
    "ORIG",
    "SOURCES",
    "SOURCE_OPTIONS",
    "SOURCE_PATH_OPTIONS",
    "SWAP",
    "PairItem",
    "load_pair_source",
    "order_metrics",
    "order_outcomes",
    "order_verdicts",
    "pair_requests",
    "requests_both_orders",
    "response_scores",
    "response_verdict",
    "slot_verdict",
    "vote_over",
    "voted_acc",
    "voted_verdicts",
]
