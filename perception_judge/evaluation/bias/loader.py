"""Loader for the official MM-JudgeBias data (``naver-ai/MM-JudgeBias``, CC-BY-4.0, split ``test``; nothing is
downloaded) with the 13 :data:`FIELDS`: null image cells filled from ``images_dir`` or defined exactly, and a row whose
expected image is still missing skipped and counted, or an error (docs/evaluation.md "The official MM-JudgeBias data").
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perception_judge.evaluation.benchmarks.common import BenchmarkFileMissing, load_table
from perception_judge.evaluation.bias.perturbations import BiasPair, BiasSide
from perception_judge.evaluation.bias.taxonomy import get_bias, normalize_category, select

META_FIELDS = ("bias_category", "task_type", "domain_type", "difficulty", "unbiased_source", "biased_source")
_PAIR_FIELDS = ("response", "unbiased_instruction", "biased_instruction", "unbiased_image", "biased_image")
FIELDS: tuple[str, ...] = ("id", "bias_type", *META_FIELDS, *_PAIR_FIELDS)
IMAGE_EXTS = (".jpg", ".jpeg", ".png")
_UNCHANGED_IMAGE_TYPES = ("image_dominance", "instruction_misalignment", "detail_description")
_NULL_IMAGE_TYPES = ("text_dominance", "response_dominance")


class MissingImagesError(ValueError):
    """Rows whose expected image is missing (raised with ``on_missing="error"``)."""


@dataclass
class LoadReport:
    """What the loader did: rows read, rows kept, and rows refused for a missing image (ids per bias type)."""

    path: str
    n_rows: int = 0
    n_pairs: int = 0
    n_missing_image: int = 0
    missing_by_type: dict[str, int] = field(default_factory=dict)
    missing_ids: list[int] = field(default_factory=list)
    filled_from_dir: int = 0

    def summary(self) -> str:
        s = f"{self.n_pairs} of {self.n_rows} MM-JudgeBias rows loaded from {self.path}"
        if self.n_missing_image:
            by = ", ".join(f"{t}: {n}" for t, n in sorted(self.missing_by_type.items()))
            s += (
                f"; {self.n_missing_image} row(s) refused because an expected image is missing ({by}). "
                "Rebuild the restricted images (upstream scripts/prepare_dataset.py) and pass images_dir"
            )
        return s

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "missing_ids": self.missing_ids[:50]}


def _read_records(path: Path, split: str) -> list[dict[str, Any]]:
    """The rows through the benchmarks' table loader, image cells left undecoded (``{bytes, path}``)."""
    from datasets import Image, load_dataset

    try:
        rows = load_table(path, split, "MM-JudgeBias data").rows
    except BenchmarkFileMissing:  # a folder of parquet files named otherwise (a Hub snapshot): all of them
        if not (path.is_dir() and (shards := sorted(path.glob("**/*.parquet")))):
            raise
        rows = load_dataset("parquet", data_files=[str(f) for f in shards], split="train")
    if isinstance(rows, list):
        return rows
    for col in ("unbiased_image", "biased_image"):
        if isinstance(rows.features.get(col), Image):
            rows = rows.cast_column(col, Image(decode=False))
    return list(rows)


def _cell(value: Any, images_dir: Path | None, base: Path) -> Any:
    """A usable image value (PIL / {bytes, path} / absolute path) or None when the cell is empty or dangling."""
    if isinstance(value, dict):
        if value.get("bytes"):
            return value
        value = value.get("path")
    if not isinstance(value, str | os.PathLike):
        return value  # None, a PIL image or raw bytes
    s = os.fspath(value)
    if not s:
        return None
    if s.startswith("data:"):
        return s
    for root in (images_dir, base):
        if root is not None and (root / s).is_file():
            return str(root / s)
    return s if os.path.isabs(s) and os.path.isfile(s) else None


def _image(rec: dict[str, Any], role: str, images_dir: Path | None, base: Path, report: LoadReport) -> Any:
    """The image of one side: its cell, else ``<id:04d>_<role>.<ext>`` or ``<id:04d>.<ext>`` in ``images_dir``
    (counted in ``filled_from_dir``); None when there is none."""
    value = _cell(rec[f"{role}_image"], images_dir, base)
    if value is None and images_dir is not None:
        rid = int(rec["id"])
        names = [f"{stem}{ext}" for stem in (f"{rid:04d}_{role}", f"{rid:04d}") for ext in IMAGE_EXTS]
        value = next((str(images_dir / n) for n in names if (images_dir / n).is_file()), None)
        report.filled_from_dir += value is not None
    return value


def load_official(
    path: str | os.PathLike[str],
    images_dir: str | os.PathLike[str] | None = None,
    split: str = "test",
    bias_types: list[str] | None = None,
    on_missing: str = "skip",
) -> tuple[list[BiasPair], LoadReport]:
    """Read the official records into :class:`BiasPair` objects (ids kept); see the module docstring."""
    if on_missing not in ("skip", "error"):
        raise ValueError(f"on_missing must be 'skip' or 'error', got {on_missing!r}")
    p = Path(path)
    img_dir = Path(images_dir) if images_dir else None
    if img_dir is not None and not img_dir.is_dir():
        raise FileNotFoundError(f"images_dir {str(img_dir)!r} is not a folder")
    records = _read_records(p, split)
    base = p if p.is_dir() else p.parent
    wanted = {b.bias_type for b in select(bias_types)}
    report = LoadReport(str(p), n_rows=len(records))
    pairs: list[BiasPair] = []
    for n, rec in enumerate(records):
        lacking = [f for f in FIELDS if f not in rec]
        if lacking:
            raise ValueError(f"MM-JudgeBias record #{n} (id {rec.get('id', '?')}) lacks fields {lacking}")
        rid, bias_type = int(rec["id"]), str(rec["bias_type"]).strip()
        spec = get_bias(bias_type)
        if normalize_category(rec["bias_category"]) != spec.category:
            raise ValueError(
                f"record {rid}: category {rec['bias_category']!r} does not match bias {bias_type!r}"
            )
        if bias_type not in wanted:
            continue
        text_only = bias_type == "unnecessary_image"  # its unbiased call has no image part
        unb = None if text_only else _image(rec, "unbiased", img_dir, base, report)
        bia = _image(rec, "biased", img_dir, base, report)
        no_image = bia is None and bias_type in _NULL_IMAGE_TYPES  # sent without an image part, as upstream
        if bia is None and bias_type in _UNCHANGED_IMAGE_TYPES:
            bia = unb
        if (unb is None and not text_only) or (bia is None and not no_image):
            report.missing_by_type[bias_type] = report.missing_by_type.get(bias_type, 0) + 1
            report.missing_ids.append(rid)
            continue
        meta = {k: str(rec.get(k) or "") for k in META_FIELDS} | {"bias_category": spec.category}
        unbiased = BiasSide(
            str(rec["unbiased_instruction"] or ""), unb, "official", "official" if unb is not None else None
        )
        biased = BiasSide(
            str(rec["biased_instruction"] or ""), bia, "official", "official" if bia is not None else None
        )
        pairs.append(BiasPair(rid, bias_type, str(rec["response"]), unbiased, biased, meta))
    report.n_pairs, report.n_missing_image = len(pairs), len(report.missing_ids)
    if report.n_missing_image and on_missing == "error":
        raise MissingImagesError(report.summary())
    return pairs, report
