"""Where the pairs of the pair-based suites come from (option ``source``).

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

from itertools import combinations
from typing import Any

from perception_judge.core.schema import RESPONSE_KINDS
from perception_judge.evaluation.benchmarks import vlrewardbench
from perception_judge.evaluation.benchmarks.common import (
    BenchmarkDataError,
    BenchmarkFileMissing,
    ImageSource,
    first_field,
    opt,
    opt_path,
    read_jsonl,
)
from perception_judge.evaluation.benchmarks.pairs import PairItem

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
    from perception_judge.core.trainset import load_training_set

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


__all__ = ["SOURCES", "SOURCE_OPTIONS", "SOURCE_PATH_OPTIONS", "infer_source", "load_pair_source"]
