"""PPJD sources: where (image, question, answer, r_c) items come from (docs/ppjd.md §2).

A bad row or image never stops the stream: it is attached to the item (``meta["row_error"]`` /
``meta["image_error"]``) and becomes a per-record failure. ``meta["image_ref"]`` (``path:<relative path>``,
``sha256:<hex>`` or None) goes into the record key with the question, answer and r_c.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from PIL import Image

from perception_judge.core.images import ImageError, cell_value, decode_data_url, resolve_under
from perception_judge.core.schema import SourceItem, content_key, sha256_hex

FIELDS = ("item_id", "image", "question", "answer", "response")

DEFAULT_CANDIDATES: dict[str, tuple[str, ...]] = {
    "item_id": ("item_id", "id", "uid", "sample_id", "idx"),
    "image": ("image", "image_path", "img", "img_path", "image_file", "images"),
    "question": ("question", "prompt", "query", "instruction"),
    "answer": ("answer", "answer_gt", "ground_truth", "gt", "label"),
    "response": ("response", "chosen", "correct_response", "r_c", "solution"),
}

PRESETS: dict[str, dict[str, str]] = {
    "mmpr": {"image": "image", "question": "question", "answer": "answer_gt", "response": "chosen"},
    "synthetic": {f: f for f in FIELDS},
}

TABLE_SUFFIXES = (".jsonl", ".parquet")
BENCHMARK_ONLY = (  # MMRB2's pairs (benchmark/{task}.json) and its hub copy (rl-research/multimodal-rewardbench-2)
    {"prompt_source", "response_a", "response_b", "chosen"},
    {"pair_id", "response_a_text", "response_b_text", "chosen"},
)


def refuse_benchmark_only(path: Path) -> None:
    """MMRB2's licence (CC BY-NC 4.0: "benchmarking purposes only ... should not be used for training models")
    rules out training records built from it: a file whose columns (parquet) or first row (JSONL) are its pairs'."""
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            columns = set(pq.ParquetFile(path).schema_arrow.names)
        else:
            with open(path, "rb") as fh:
                columns = set(json.loads(next((line for line in fh if line.strip()), b"{}")))
    except (OSError, ValueError, TypeError):  # unreadable: its rows report it
        return
    if any(signature <= columns for signature in BENCHMARK_ONLY):
        raise ValueError(
            f"{str(path)!r} holds MMRB2 pairs: their licence (CC BY-NC 4.0) allows benchmarking only and says the "
            "data should not be used for training models; evaluate on it (eval run --suites mmrb2) instead"
        )


class Source(Protocol):
    name: str

    def __iter__(self) -> Iterator[SourceItem]: ...

    def estimate_count(self) -> int | None: ...

    def describe(self) -> dict[str, Any]: ...


def image_ref_of(image: Any) -> str | None:
    """A stable reference to an item's image for its key (without reading files)."""
    if image is None:
        return None
    if isinstance(image, Image.Image):
        return "pil:" + sha256_hex(f"{image.mode}{image.size}".encode() + image.tobytes())
    if isinstance(image, bytes | bytearray | memoryview):
        return "sha256:" + sha256_hex(bytes(image))
    if isinstance(image, str | os.PathLike):
        return "path:" + os.fspath(image)
    return "obj:" + type(image).__name__


def item_key(item: SourceItem) -> str:
    """The record key of an item: a content hash of (question, answer, r_c, image reference), so the same content
    reached twice (another file, another run) is built once. Rows that could not be read are keyed by where they
    are."""
    if item.meta.get("row_error"):
        return content_key("ppjd-bad-row/1", item.source, item.item_id)
    ref = item.meta["image_ref"] if "image_ref" in item.meta else image_ref_of(item.image)
    return content_key("ppjd-item/1", item.question, item.answer, item.response, ref)


def _dig(row: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        if not isinstance(row, dict) or part not in row:
            return None
        row = row[part]
    return row


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | bytes | list | dict) and len(value) == 0)


def expand_inputs(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Files named directly, plus the ``*.jsonl`` / ``*.parquet`` files of named folders (sorted)."""
    out: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(f for f in path.iterdir() if f.suffix in TABLE_SUFFIXES and f.is_file())
            if not found:
                raise FileNotFoundError(f"no .jsonl or .parquet files in {str(path)!r}")
            out.extend(found)
        elif not path.is_file():
            raise FileNotFoundError(f"source input {str(path)!r} does not exist")
        elif path.suffix not in TABLE_SUFFIXES:
            raise ValueError(f"{str(path)!r}: unsupported source file type (expected .jsonl or .parquet)")
        else:
            out.append(path)
    return out


class TableSource:
    """Items from JSONL / parquet rows (see the module docstring)."""

    def __init__(
        self,
        paths: Sequence[str | os.PathLike[str]],
        mapping: dict[str, str] | None = None,
        image_root: str | os.PathLike[str] | None = None,
        preset: str | None = None,
        allow_text_only: bool = False,
        name: str | None = None,
        prefix_map: dict[str, str] | None = None,
    ) -> None:
        self.files = expand_inputs(paths)
        for f in self.files:
            refuse_benchmark_only(f)
        if preset is not None and preset not in PRESETS:
            raise ValueError(f"unknown source preset {preset!r}; known: {', '.join(PRESETS)}")
        self.preset = preset
        self.mapping = {**PRESETS.get(preset or "", {}), **(mapping or {})}
        if unknown := sorted(set(self.mapping) - set(FIELDS)):
            raise ValueError(f"field mapping names unknown fields {unknown}; fields are {', '.join(FIELDS)}")
        self.image_root = Path(image_root) if image_root is not None else None
        self.allow_text_only = allow_text_only
        self.name = name or (preset or "table")
        self.prefix_map = dict(prefix_map or {})
        self._prefix = {f: self._prefix_for(f) for f in self.files}

    def _prefix_for(self, path: Path) -> str:
        """The image subfolder of an annotation file by its name prefix (the longest matching one wins)."""
        if not self.prefix_map:
            return ""
        for prefix, folder in sorted(self.prefix_map.items(), key=lambda kv: -len(kv[0])):
            if path.name.startswith(prefix):
                return folder.rstrip("/") + "/" if folder else ""
        raise ValueError(
            f"source file {path.name!r} matches no image_prefix_map entry "
            f"({', '.join(sorted(self.prefix_map))}); add one or drop the file"
        )

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "table",
            "name": self.name,
            "preset": self.preset,
            "files": [str(f) for f in self.files],
            "mapping": self.mapping,
            "image_root": str(self.image_root) if self.image_root else None,
            "allow_text_only": self.allow_text_only,
            "prefix_map": self.prefix_map,
        }

    def estimate_count(self) -> int | None:
        import pyarrow.parquet as pq

        total = 0
        for f in self.files:
            if f.suffix == ".parquet":
                total += pq.ParquetFile(f).metadata.num_rows
            else:
                with open(f, "rb") as fh:
                    total += sum(1 for _ in fh)
        return total

    def _rows(self) -> Iterator[tuple[Path, int, dict[str, Any] | None, str | None]]:
        """(file, line or row number, the row or None, why it is None)."""
        import pyarrow.parquet as pq

        for f in self.files:
            if f.suffix == ".parquet":
                batches = pq.ParquetFile(f).iter_batches(batch_size=64)
                rows = (row for batch in batches for row in batch.to_pylist())
                yield from ((f, n, row, None) for n, row in enumerate(rows, start=1))
                continue
            with open(f, "rb") as fh:
                for n, raw in enumerate(fh, start=1):
                    if not raw.strip():
                        continue
                    try:
                        row = json.loads(raw)
                    except (json.JSONDecodeError, UnicodeDecodeError) as e:
                        yield f, n, None, f"invalid JSON: {e}"
                        continue
                    error = None if isinstance(row, dict) else f"row is a {type(row).__name__}, not an object"
                    yield f, n, None if error else row, error

    def check(self) -> None:
        """Before any work: --image-root is a folder, the first readable row has a column for every field."""
        if self.image_root is not None and not self.image_root.is_dir():
            raise FileNotFoundError(f"--image-root {str(self.image_root)!r} is not a folder")
        path, _, row, _ = next((r for r in self._rows() if r[2] is not None), (self.files[0], 0, None, None))
        if row is None:
            raise ValueError(f"{str(path)!r} holds no readable row")
        fields = ("question", "answer", "response", *(() if self.allow_text_only else ("image",)))
        columns = {**DEFAULT_CANDIDATES, **{f: (key.split(".")[0],) for f, key in self.mapping.items()}}
        if missing := [f for f in fields if not set(columns[f]) & set(row)]:
            raise ValueError(
                f"{str(path)!r}: no {', '.join(missing)} column in its first row (it has {', '.join(sorted(row))}); "
                f"name the columns with --map FIELD=COLUMN (fields: {', '.join(FIELDS)})"
            )

    def _field(self, row: dict[str, Any], name: str) -> tuple[Any, str | None]:
        if name in self.mapping:
            return _dig(row, self.mapping[name]), self.mapping[name]
        for key in DEFAULT_CANDIDATES[name]:
            if not _empty(value := row.get(key)):
                return value, key
        return None, None

    def __iter__(self) -> Iterator[SourceItem]:
        for path, line, row, error in self._rows():
            if row is None:
                yield SourceItem(
                    f"{path.name}:{line}", "", "", "", source=self.name, meta={"row_error": error}
                )
            else:
                yield self.row_to_item(row, path, line)

    def row_to_item(self, row: dict[str, Any], path: Path, line: int) -> SourceItem:
        loc = f"{path.name}:{line}"
        item_id, _ = self._field(row, "item_id")
        meta: dict[str, Any] = {"file": path.name, "line": line}
        texts: dict[str, str] = {}
        for name in ("question", "answer", "response"):
            value, key = self._field(row, name)
            if value is None or isinstance(value, str):
                texts[name] = value or ""
            elif name == "answer" and isinstance(value, int | float) and not isinstance(value, bool):
                texts[name] = str(value)  # a numeric ground truth is text the schema allows ("42", "3.5")
            else:  # never repr a list / dict / bool into a prompt
                texts[name] = ""
                error = f"field {key or name!r} is {type(value).__name__}, expected text (row {loc})"
                meta.setdefault("row_error", error)
        raw_image, _ = self._field(row, "image")
        image: Any = None
        if _empty(raw_image):
            meta["image_ref"] = None
            if not self.allow_text_only:
                detail = f"row {loc} has no image ({self.mapping.get('image') or 'no image column found'})"
                meta["image_error"] = {"reason": "missing_field", "detail": detail}
        else:
            image, meta["image_ref"], err = self._resolve_image(raw_image, path)
            if err is not None:
                meta["image_error"] = err
        if isinstance(row.get("meta"), dict):
            meta = {**row["meta"], **meta}
        source = row.get("source")
        return SourceItem(
            item_id=str(item_id) if not _empty(item_id) else loc,
            question=texts["question"],
            answer=texts["answer"],
            response=texts["response"],
            image=image,
            source=source if isinstance(source, str) and source else self.name,
            spec=row.get("spec") if isinstance(row.get("spec"), dict) else None,
            meta=meta,
        )

    def _resolve_image(self, raw: Any, path: Path) -> tuple[Any, str | None, dict[str, str] | None]:
        """(image value for the builder, image reference for the key, error or None)."""
        ref = None
        try:
            if isinstance(raw, list):
                if len(raw) != 1:
                    ref = f"list:{len(raw)}"
                    detail = f"{len(raw)} images in one row; one image per item is supported"
                    raise ImageError("multiple_images", detail)
                raw = raw[0]
            if isinstance(raw, dict):
                raw = cell_value(raw)
            if isinstance(raw, str) and raw.startswith("data:"):
                raw = decode_data_url(raw)
            if isinstance(raw, bytes | bytearray | memoryview):
                return bytes(raw), "sha256:" + sha256_hex(bytes(raw)), None
            if not isinstance(raw, str):
                raise ImageError("bad_path", f"unsupported image value {type(raw).__name__}")
            if raw.startswith(("http://", "https://")):
                ref = "url:" + raw
                raise ImageError("remote", f"remote image {raw[:80]!r} is not fetched")
            rel = self._prefix.get(path, "") + raw
            ref = "path:" + rel.replace("\\", "/")
            return str(resolve_under(self.image_root or path.parent, rel)), ref, None
        except ImageError as e:
            return None, ref, {"reason": e.reason, "detail": e.detail}


def synthetic_source(folder: str | os.PathLike[str]) -> TableSource:
    """The source of a ``perception-judge synth`` folder (items.jsonl, images under the folder)."""
    items = Path(folder) / "items.jsonl"
    if not items.is_file():
        raise FileNotFoundError(
            f"{str(folder)!r} is not a synth folder: no items.jsonl (run `perception-judge synth`)"
        )
    return TableSource([items], preset="synthetic", image_root=folder, allow_text_only=True, name="synthetic")


def open_source(
    inputs: Sequence[str | os.PathLike[str]],
    kind: str = "auto",
    mapping: dict[str, str] | None = None,
    image_root: str | os.PathLike[str] | None = None,
    allow_text_only: bool | None = None,
    prefix_map: dict[str, str] | None = None,
) -> Source:
    """The source the CLI asks for: ``auto`` (a synth folder, else a table), ``synthetic``, ``table`` / ``jsonl`` /
    ``parquet``, ``mmpr``."""
    if not inputs:
        raise ValueError("no source input given")
    if kind == "auto":
        synth = len(inputs) == 1 and all(
            (Path(inputs[0]) / f).is_file() for f in ("items.jsonl", "synth_info.json")
        )
        kind = "synthetic" if synth else "table"
    if kind == "synthetic":
        if len(inputs) != 1:
            raise ValueError("the synthetic source takes exactly one synth folder")
        return synthetic_source(inputs[0])
    if kind not in ("table", "jsonl", "parquet", "mmpr"):
        raise ValueError(
            f"unknown source kind {kind!r}; expected auto, synthetic, table, jsonl, parquet or mmpr"
        )
    preset = "mmpr" if kind == "mmpr" else None
    source = TableSource(
        inputs, mapping, image_root, preset, bool(allow_text_only), name=preset, prefix_map=prefix_map
    )
    source.check()
    return source
