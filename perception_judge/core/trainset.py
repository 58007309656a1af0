"""The training-set format: what ``perception-judge export`` writes and ``train_grpo.py`` / the evaluation read.

A folder of ``train.parquet`` and ``validation.parquet`` (the columns of ``schema.TRAIN_COLUMNS``; no source image in
both splits), ``README.md`` (the dataset card) and ``export_info.json`` (settings and counts).
``load_training_set(folder)`` returns a ``datasets.DatasetDict`` whose images decode to PIL, as trl takes them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from perception_judge.core.schema import TRAIN_COLUMNS, ground_truth_for

SPLITS = ("train", "validation")


def features() -> Any:
    """The ``datasets.Features`` of a training row (messages with block-list content, images as Image)."""
    from datasets import Features, Image, List, Value

    text = Value("string")
    lists = {
        "prompt": List({"role": text, "content": List({"type": text, "text": text})}),
        "images": List(Image()),
        "responses": List(text),
        "kinds": List(text),
    }
    return Features({c: lists.get(c, text) for c in TRAIN_COLUMNS})  # every other column is a string


def training_row(
    protocol: str,
    question: str,
    texts: dict[str, str],
    kinds: list[str],
    images: list[Any],
    record_key: str,
    image_group: str,
    style: str = "full",
) -> dict[str, Any]:
    """One training row: the responses of ``kinds`` (from ``texts``, by kind) in slot order, the judge prompt
    (in the prompt ``style``) with one image placeholder per image, and the ground truth derived from the kinds."""
    from perception_judge.core.protocol import build_messages

    responses = [texts[k] for k in kinds]
    return {
        "prompt": build_messages(protocol, question, responses, n_images=len(images), style=style),
        "images": images,
        "protocol": protocol,
        "ground_truth": ground_truth_for(protocol, kinds),
        "question": question,
        "responses": responses,
        "kinds": list(kinds),
        "record_key": record_key,
        "image_group": image_group,
    }


def rows_to_dataset(rows: Iterable[dict[str, Any]]) -> Any:
    """A ``datasets.Dataset`` with the training features from row dicts (images: PIL, bytes or paths)."""
    from datasets import Dataset

    rows = list(rows)
    for i, row in enumerate(rows):
        if missing := [c for c in TRAIN_COLUMNS if c not in row]:
            raise ValueError(f"training row {i} ({row.get('record_key', '?')}) lacks columns {missing}")
    columns = {c: [row[c] for row in rows] for c in TRAIN_COLUMNS}
    return Dataset.from_dict(columns, features=features())


def prompt_style_of(folder: str | Path) -> str:
    """The prompt style an exported training set was rendered in (``export_info.json``; ``full`` when absent)."""
    info = Path(folder) / "export_info.json"
    settings = json.loads(info.read_text()).get("settings", {}) if info.is_file() else {}
    return str(settings.get("prompt_style", "full"))


def split_path(folder: str | Path, split: str) -> Path:
    return Path(folder) / f"{split}.parquet"


def _check_columns(names: list[str], where: str) -> None:
    if missing := [c for c in TRAIN_COLUMNS if c not in names]:
        raise ValueError(
            f"{where}: missing column(s) {missing}; a training set has {list(TRAIN_COLUMNS)} "
            "(written by `perception-judge export`)"
        )


def to_training_features(table: Any, where: str) -> Any:
    """A ``datasets.Dataset`` cast to the training-set features (other columns dropped); a missing column or one of
    another type is a ValueError naming ``where``."""
    want = features()
    _check_columns(table.column_names, where)
    table = table.remove_columns([c for c in table.column_names if c not in want])
    try:
        return table.cast(want)
    except (ValueError, TypeError) as e:
        bad = [
            f"{c} is {table.features[c]!r}, expected {want[c]!r}"
            for c in want
            if c in table.features and repr(table.features[c]) != repr(want[c])
        ]
        raise ValueError(
            f"{where}: column types differ from the training-set format: {'; '.join(bad) or e}"
        ) from None


def load_training_set(folder: str | Path, splits: Iterable[str] = SPLITS) -> Any:
    """Load the parquet splits of an exported training set as a ``DatasetDict`` (missing splits are skipped,
    a folder with no split at all is an error naming the folder)."""
    from datasets import DatasetDict, load_dataset

    folder = Path(folder)
    files = {s: str(split_path(folder, s)) for s in splits if split_path(folder, s).is_file()}
    if not files:
        raise FileNotFoundError(
            f"no training set in {str(folder)!r}: expected {', '.join(f'{s}.parquet' for s in splits)} "
            "(written by `perception-judge export`)"
        )
    import pyarrow.parquet as pq

    for path in files.values():  # name the file, the column and what was expected, before datasets does not
        try:
            names = pq.read_schema(path).names
        except Exception as e:  # pyarrow raises several types for a damaged file
            raise ValueError(f"{path}: not a readable parquet file ({type(e).__name__}: {e})") from None
        _check_columns(names, path)
    ds = load_dataset("parquet", data_files=files)
    return DatasetDict({split: to_training_features(table, files[split]) for split, table in ds.items()})
