"""Where the pairs of the position, verbosity and self-enhancement suites come from (option ``source``, inferred
from the path option given when omitted): ``mllm_judge`` (``pair.jsonl``), ``vlrewardbench``, ``ppjd`` (every pair
of kinds of a training-set row, r_c > r_rp > r_rp_r) or ``pairs_jsonl``. See ``docs/benchmarks.md`` (pair sources).
"""

from __future__ import annotations

import functools
from itertools import combinations
from pathlib import Path
from typing import Any, Literal

from perception_judge.core.schema import RESPONSE_KINDS
from perception_judge.evaluation.benchmarks import common, mllm_judge, vlrewardbench
from perception_judge.evaluation.benchmarks.pairs import PairItem


class PairSourceOptions(common.JudgeOptions):
    """``split``: default ``validation`` (ppjd) or ``test`` (vlrewardbench)."""

    source: Literal["mllm_judge", "vlrewardbench", "ppjd", "pairs_jsonl"] | None = None
    data_dir: common.OptPath = None
    pair_file: common.OptPath = None
    images_dir: common.OptPath = None
    split: str | None = None
    trainset_dir: common.OptPath = None
    pairs_file: common.OptPath = None
    missing_images: Literal["error", "skip"] = "error"


def infer_source(opts: PairSourceOptions) -> str:
    if opts.source is not None:
        return opts.source
    for key, source in (("pairs_file", "pairs_jsonl"), ("trainset_dir", "ppjd"), ("pair_file", "mllm_judge")):
        if getattr(opts, key) is not None:
            return source
    if opts.data_dir is not None:
        return "mllm_judge" if (opts.data_dir / "pair.jsonl").is_file() else "vlrewardbench"
    raise ValueError(
        "no pair source: set 'source' (mllm_judge, vlrewardbench, ppjd, pairs_jsonl) and its path option "
        "(data_dir, pair_file, trainset_dir or pairs_file)"
    )


def _required(opts: PairSourceOptions, key: str, suite: str) -> Path:
    value = getattr(opts, key)
    if value is None:
        raise ValueError(f"option {key!r} is required (e.g. --set {suite}.{key}=/path/to/...)")
    return value


_PREFERRED = {0: "A", 1: "B", "0": "A", "1": "B", "A": "A", "B": "B", "C": "C", "TIE": "C"}


def _preferred(value: Any) -> str | None:
    """A generic record's ``preferred``: 0 / "A" → "A", 1 / "B" → "B", "tie" / "C" → "C", null → None."""
    key = value.strip().upper() if isinstance(value, str) else value if type(value) is int else None
    if value is not None and key not in _PREFERRED:
        raise ValueError(f"'preferred' must be 0, 1, 'A', 'B', 'tie' or null, got {value!r}")
    return _PREFERRED.get(key)


def load_pair_source(
    opts: PairSourceOptions, limit: int | None, suite: str
) -> tuple[list[PairItem], dict[str, Any]]:
    """PairItems from the configured source (their image paths checked), and a description of the source."""
    source = infer_source(opts)
    if source == "mllm_judge":
        path = mllm_judge.setting_file("pair", opts.pair_file, opts.data_dir)
        images = mllm_judge.image_source(opts.images_dir, [path], opts.missing_images)
        items = [
            PairItem(
                item_id=it.item_id.replace(":", "_") + f"_r{it.row}",
                question=it.question,
                responses=list(it.responses),
                preferred=it.gt,
                group=it.dataset,
                names=list(it.names),
                load_images=lambda it=it: [images.load(it.image, it.where)],
                check_images=lambda it=it: images.check(it.image, it.where),
            )
            for it in mllm_judge.load_items("pair", path)[0]
        ]
        desc = {"source": "mllm_judge", "file": str(path)}
    elif source == "vlrewardbench":
        data_dir = _required(opts, "data_dir", suite)
        items, _, path = vlrewardbench.load_items(
            data_dir, opts.split or "test", opts.images_dir, opts.missing_images
        )
        desc = {"source": "vlrewardbench", "path": str(path)}
    elif source == "ppjd":
        items, desc = _ppjd_items(_required(opts, "trainset_dir", suite), opts.split or "validation")
    else:
        items, desc = _jsonl_items(_required(opts, "pairs_file", suite), opts)
    items = items[:limit]  # a None limit keeps everything
    for item in items:
        item.check_images()
    return items, desc


def _ppjd_items(folder: Path, split: str) -> tuple[list[PairItem], dict[str, Any]]:
    from perception_judge.core.trainset import load_training_set

    if not folder.is_dir():
        raise common.BenchmarkFileMissing(f"PPJD training set: no such folder {str(folder)!r}")
    try:
        ds = load_training_set(folder, splits=[split])[split]
    except FileNotFoundError as e:
        raise common.BenchmarkFileMissing(f"PPJD training set: {e} (split {split!r})") from None
    imgs = ds.select_columns(["images"])
    rank = {k: i for i, k in enumerate(RESPONSE_KINDS)}
    seen: set[tuple[str, str, str]] = set()
    items: list[PairItem] = []
    for i, row in enumerate(ds.select_columns(["question", "responses", "kinds", "record_key"])):
        responses, kinds = list(row["responses"]), list(row["kinds"])
        for a, b in combinations(range(len(kinds)), 2):
            ka, kb = kinds[a], kinds[b]
            key = (str(row["record_key"]), *sorted((ka, kb)))
            if ka not in rank or kb not in rank or ka == kb or key in seen:
                continue
            seen.add(key)
            items.append(
                PairItem(
                    item_id=f"{row['record_key']}_{ka}_vs_{kb}",
                    question=str(row["question"]),
                    responses=[responses[a], responses[b]],
                    preferred="A" if rank[ka] < rank[kb] else "B",
                    group="_vs_".join(sorted((ka, kb), key=rank.get)),
                    names=[ka, kb],
                    load_images=lambda i=i: list(imgs[i]["images"]),
                )
            )
    return items, {"source": "ppjd", "folder": str(folder), "split": split}


def _jsonl_items(path: Path, opts: PairSourceOptions) -> tuple[list[PairItem], dict[str, Any]]:
    records = common.read_jsonl(path, "pairs file")
    images = common.ImageSource([opts.images_dir or path.parent], opts.missing_images, "pair image")
    items = []
    for row, rec in enumerate(records, 1):
        where = f"pairs file: {path!s} record {row}"
        responses = rec.get("responses")
        question = common.first_field(rec, ("question", "query", "instruction"))
        if not common.two_texts(responses):
            raise common.BenchmarkDataError(f"{where}: 'responses' must be two strings")
        if not isinstance(question, str):
            raise common.BenchmarkDataError(f"{where}: no 'question'")
        try:
            preferred = _preferred(rec.get("preferred"))
        except ValueError as e:
            raise common.BenchmarkDataError(f"{where}: {e}") from None
        item = PairItem(
            item_id=str(rec.get("id", row)),
            question=question,
            responses=list(responses),
            preferred=preferred,
            group=str(rec.get("group") or rec.get("category") or ""),
            names=[str(n) if n is not None else None for n in rec.get("names") or [None, None]][:2],
        )
        if (image := common.first_field(rec, ("image", "image_path"))) is not None:
            context = f"{path} record {row}"
            item.load_images = lambda image=image, c=context: [images.load(image, c)]
            item.check_images = functools.partial(images.check, image, context)
        items.append(item)
    return items, {"source": "pairs_jsonl", "file": str(path)}
