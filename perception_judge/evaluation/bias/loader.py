"""Loader for the official MM-JudgeBias data (``naver-ai/MM-JudgeBias``, CC-BY-4.0, split ``test``).

Each record has 13 fields: ``id, bias_type, bias_category, task_type, domain_type, difficulty,
unbiased_source, biased_source, response, unbiased_instruction, biased_instruction, unbiased_image,
biased_image``. Accepted layouts (nothing is downloaded; point ``path`` at a local copy):

* a ``datasets`` folder written by ``save_to_disk`` (a ``Dataset`` or a ``DatasetDict`` with the split);
* a folder of parquet files (a Hub snapshot: ``data/test-*.parquet`` or ``*.parquet``);
* a JSONL file (or a folder holding one ``*.jsonl``) whose image fields are null, a path (relative to
  ``images_dir``) or a ``{"bytes"|"path"}`` cell.

Image cells may be null for restricted sources (21.6% of the rows upstream). With ``images_dir`` a null cell is
filled from ``<id:04d>_<role>.jpg`` (role ``unbiased`` / ``biased``), then ``<id:04d>.jpg`` (any of .jpg, .jpeg,
.png). Two cells are defined exactly and filled without a file: the biased image of ``text_dominance`` and
``response_dominance`` (the black null image), and the biased image of the types whose perturbation leaves the
image unchanged (``image_dominance``, ``instruction_misalignment``, ``detail_description``), which is the
unbiased image. A row whose expected image is still missing is **not judged** (upstream B2 judged it without
the image): it is skipped and counted (``on_missing="error"`` raises instead, naming how many).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perception_judge.evaluation.bias.perturbations import BiasPair, BiasSide, null_image
from perception_judge.evaluation.bias.taxonomy import BIAS_TYPES, get_bias, normalize_category

FIELDS: tuple[str, ...] = (
    "id",
    "bias_type",
    "bias_category",
    "task_type",
    "domain_type",
    "difficulty",
    "unbiased_source",
    "biased_source",
    "response",
    "unbiased_instruction",
    "biased_instruction",
    "unbiased_image",
    "biased_image",
)
META_FIELDS = ("bias_category", "task_type", "domain_type", "difficulty", "unbiased_source", "biased_source")
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
        return {k: v for k, v in self.__dict__.items() if k != "missing_ids"} | {
            "missing_ids": self.missing_ids[:50]
        }


def _read_records(path: Path, split: str) -> list[dict[str, Any]]:
    if path.is_file() and path.suffix == ".jsonl":
        return _read_jsonl(path)
    if path.is_dir():
        if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
            return _read_saved_dataset(path, split)
        if (path / split / "state.json").is_file():
            return _read_saved_dataset(path / split, split)
        parquets = sorted(path.glob(f"**/{split}-*.parquet")) or sorted(path.glob("**/*.parquet"))
        if parquets:
            return _read_parquet(parquets)
        jsonls = sorted(path.glob("*.jsonl"))
        if len(jsonls) == 1:
            return _read_jsonl(jsonls[0])
        if len(jsonls) > 1:
            raise ValueError(
                f"{str(path)!r} holds several .jsonl files; pass one of them: {[p.name for p in jsonls]}"
            )
    if not path.exists():
        raise FileNotFoundError(f"MM-JudgeBias data not found at {str(path)!r}")
    raise ValueError(
        f"{str(path)!r} is not MM-JudgeBias data: expected a save_to_disk folder, a folder of parquet files, or "
        "a .jsonl file"
    )


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{str(path)!r} line {lineno}: not JSON ({e})") from None
    return rows


def _undecoded(ds: Any) -> Any:
    """Cast image columns to undecoded ``{bytes, path}`` cells (nothing is decoded at load time)."""
    from datasets import Image

    for col in ("unbiased_image", "biased_image"):
        if col in ds.column_names and type(ds.features[col]).__name__ == "Image":
            ds = ds.cast_column(col, Image(decode=False))
    return ds


def _read_saved_dataset(path: Path, split: str) -> list[dict[str, Any]]:
    from datasets import DatasetDict, load_from_disk

    ds = load_from_disk(str(path))
    if isinstance(ds, DatasetDict):
        if split not in ds:
            raise KeyError(f"{str(path)!r} has no split {split!r}; splits: {list(ds)}")
        ds = ds[split]
    return list(_undecoded(ds))


def _read_parquet(files: list[Path]) -> list[dict[str, Any]]:
    from datasets import load_dataset

    ds = load_dataset("parquet", data_files=[str(f) for f in files], split="train")
    return list(_undecoded(ds))


def _find_in_dir(images_dir: Path | None, rid: int, role: str) -> str | None:
    if images_dir is None:
        return None
    for stem in (f"{rid:04d}_{role}", f"{rid:04d}"):
        for ext in IMAGE_EXTS:
            p = images_dir / f"{stem}{ext}"
            if p.is_file():
                return str(p)
    return None


def _cell(value: Any, images_dir: Path | None, base: Path) -> Any:
    """A usable image value (PIL / {bytes, path} / absolute path) or None when the cell is empty or dangling."""
    if value is None:
        return None
    if isinstance(value, dict):
        if value.get("bytes"):
            return value
        value = value.get("path")
        if not value:
            return None
    if isinstance(value, str | os.PathLike):
        s = os.fspath(value)
        if not s:
            return None
        if s.startswith("data:"):
            return s
        for root in (images_dir, base):
            if root is not None and (root / s).is_file():
                return str(root / s)
        return s if os.path.isabs(s) and os.path.isfile(s) else None
    return value  # a PIL image or raw bytes


def load_official(
    path: str | os.PathLike[str],
    images_dir: str | os.PathLike[str] | None = None,
    split: str = "test",
    bias_types: list[str] | None = None,
    ids: list[int] | None = None,
    limit_per_type: int | None = None,
    on_missing: str = "skip",
) -> tuple[list[BiasPair], LoadReport]:
    """Read the official records into :class:`BiasPair` objects (ids kept); see the module docstring."""
    if on_missing not in ("skip", "error"):
        raise ValueError(f"on_missing must be 'skip' or 'error', got {on_missing!r}")
    p = Path(path)
    img_dir = Path(images_dir) if images_dir else None
    if img_dir is not None and not img_dir.is_dir():
        raise FileNotFoundError(f"images_dir {str(img_dir)!r} is not a folder")
    base = p if p.is_dir() else p.parent
    records = _read_records(p, split)
    wanted = {get_bias(t).bias_type for t in bias_types} if bias_types else set(BIAS_TYPES)
    id_set = set(ids) if ids else None
    report = LoadReport(str(p), n_rows=len(records))
    per_type: Counter[str] = Counter()
    missing: Counter[str] = Counter()
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
        if bias_type not in wanted or (id_set is not None and rid not in id_set):
            continue
        if limit_per_type is not None and per_type[bias_type] >= limit_per_type:
            continue
        unb = _cell(rec["unbiased_image"], img_dir, base)
        bia = _cell(rec["biased_image"], img_dir, base)
        if unb is None and bias_type != "unnecessary_image":
            unb = _find_in_dir(img_dir, rid, "unbiased")
            report.filled_from_dir += unb is not None
        if bia is None:
            found = _find_in_dir(img_dir, rid, "biased")
            report.filled_from_dir += found is not None
            if found is not None:
                bia = found
            elif bias_type in _NULL_IMAGE_TYPES:
                bia = null_image()
            elif bias_type in _UNCHANGED_IMAGE_TYPES:
                bia = unb
        if (unb is None and bias_type != "unnecessary_image") or bia is None:
            missing[bias_type] += 1
            report.missing_ids.append(rid)
            continue
        if bias_type == "unnecessary_image":
            unb = None  # the unbiased call of a text-only task has no image part
        meta = {k: str(rec.get(k) or "") for k in META_FIELDS}
        meta["bias_category"] = spec.category
        pairs.append(
            BiasPair(
                rid,
                bias_type,
                str(rec["response"]),
                BiasSide(
                    str(rec["unbiased_instruction"] or ""),
                    unb,
                    "official",
                    "official" if unb is not None else None,
                ),
                BiasSide(str(rec["biased_instruction"] or ""), bia, "official", "official"),
                meta,
            )
        )
        per_type[bias_type] += 1
    report.n_pairs = len(pairs)
    report.n_missing_image = sum(missing.values())
    report.missing_by_type = dict(missing)
    if report.n_missing_image and on_missing == "error":
        raise MissingImagesError(report.summary())
    return pairs, report


__all__ = ["FIELDS", "LoadReport", "MissingImagesError", "load_official"]
