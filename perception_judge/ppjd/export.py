"""PPJD folder -> training set (the format of :mod:`perception_judge.core.trainset`).

Per record, with randomness seeded by (export seed, record key), rows written in canonical key order -- so the
result depends neither on record order nor on how the folder was built (one machine, or parts merged:
:mod:`perception_judge.ppjd.partition`):

* **batch** rows: (r_c, r_rp, r_rp+r) in a random permutation of slots A/B/C; ``ground_truth`` is the order
  string best to worst (``order_from_kinds``), e.g. ``"BCA"``;
* **pair** rows (optional): two of the three responses in random order; ``ground_truth`` ``"AB"`` or ``"BA"``;
* **single** rows (optional): one response; ``ground_truth`` ``"correct"`` (r_c) or ``"incorrect"``.

How many rows of each protocol a record gives is the *mix*: ``{"batch": 1, "pair": 0.5}`` means one batch row
per record and a pair row for half of them (the integer part is always emitted, the fraction is a
probability; several rows of one protocol use different permutations / pairs / responses where possible).

The prompt is ``protocol.build_messages(protocol, question, responses, n_images=1 or 0)``; ``images`` holds the
original image bytes (the trainer applies the pixel policy). Train / validation are split by ``image_group``
(the sha256 of the source image; text-only records group by question), so no image is in both splits.

Files are written chunk by chunk (constant memory) into a temp folder and moved into place at the end:
``train.parquet``, ``validation.parquet`` (absent when empty), ``README.md`` (dataset card),
``export_info.json``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import shutil
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from perception_judge.core.images import ImageError, resolve_under
from perception_judge.core.protocol import validate_style
from perception_judge.core.schema import (
    PROTOCOLS,
    RESPONSE_KINDS,
    PPJDRecord,
    sha256_hex,
)
from perception_judge.core.trainset import rows_to_dataset, split_path, training_row
from perception_judge.ppjd.partition import merge_plan, read_partition
from perception_judge.ppjd.store import iter_records, read_manifest, shard_paths

DEFAULT_MIX = {"batch": 1.0, "pair": 0.0, "single": 0.0}
_PAIRS = (("r_c", "r_rp"), ("r_c", "r_rp_r"), ("r_rp", "r_rp_r"))


class ExportError(ValueError):
    """A record cannot be exported (names the record key)."""


def parse_mix(text: str | dict[str, float] | None) -> dict[str, float]:
    """``"batch=1,pair=0.5"`` (or a dict) -> rows per record per protocol."""
    if text is None or text == "":
        return dict(DEFAULT_MIX)
    if isinstance(text, dict):
        items = list(text.items())
    else:
        items = []
        for part in str(text).split(","):
            if not part.strip():
                continue
            if "=" not in part:
                raise ValueError(f"bad mix entry {part!r}: expected protocol=rows, e.g. batch=1,pair=0.5")
            name, value = part.split("=", 1)
            items.append((name.strip(), value.strip()))
    mix = {p: 0.0 for p in PROTOCOLS}
    for name, value in items:
        if name not in PROTOCOLS:
            raise ValueError(f"unknown protocol {name!r} in the mix; expected {', '.join(PROTOCOLS)}")
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"mix value for {name} must be a number, got {value!r}") from None
        if v < 0 or v > 6:
            raise ValueError(f"mix value for {name} must be between 0 and 6, got {v}")
        mix[name] = v
    if sum(mix.values()) <= 0:
        raise ValueError("the mix gives no rows at all")
    return mix


@dataclass
class ExportConfig:
    seed: int = 0
    val_fraction: float = 0.1
    mix: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    chunk_rows: int = 256
    skip_invalid: bool = False
    overwrite: bool = False
    prompt_style: str = "full"
    allow_incomplete: bool = (
        False  # a partitioned folder with missing or unfinished parts: export what is there
    )

    def __post_init__(self) -> None:
        self.mix = parse_mix(self.mix)
        validate_style(self.prompt_style)
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        if self.chunk_rows < 1:
            raise ValueError("chunk_rows must be >= 1")


def image_group(record: PPJDRecord) -> str:
    if record.image_sha256:
        return record.image_sha256
    return "text:" + sha256_hex(record.question)[:40]


def choose_validation_groups(groups: list[str], fraction: float, seed: int) -> set[str]:
    """A seeded choice of round(fraction * n) groups (at least 1 and at most n-1 when fraction > 0, n >= 2)."""
    groups = sorted(set(groups))
    n = len(groups)
    if fraction <= 0 or n < 2:
        return set()
    k = min(n - 1, max(1, round(fraction * n)))
    rng = random.Random(f"perception-judge/export/split/{seed}")
    rng.shuffle(groups)
    return set(groups[:k])


def _count(rng: random.Random, expected: float) -> int:
    whole = int(expected)
    return whole + (1 if rng.random() < expected - whole else 0)


def record_rows(
    record: PPJDRecord,
    image_cell: dict[str, Any] | None,
    mix: dict[str, float],
    seed: int,
    style: str = "full",
) -> list[dict]:
    """Training rows of one record (see the module docstring)."""
    rng = random.Random(f"perception-judge/export/{seed}/{record.key}")
    texts = record.responses()
    images = [image_cell] if image_cell is not None else []
    group = image_group(record)
    rows: list[dict[str, Any]] = []

    def row(protocol: str, kinds: list[str]) -> dict[str, Any]:
        return training_row(protocol, record.question, texts, kinds, images, record.key, group, style)

    n_batch = _count(rng, mix.get("batch", 0.0))
    perms: list[list[str]] = []
    for _ in range(n_batch):
        kinds = list(RESPONSE_KINDS)
        for _try in range(12):
            rng.shuffle(kinds)
            if kinds not in perms:
                break
        perms.append(list(kinds))
        rows.append(row("batch", kinds))

    n_pair = _count(rng, mix.get("pair", 0.0))
    pairs = list(_PAIRS)
    rng.shuffle(pairs)
    for i in range(n_pair):
        better, worse = pairs[i % len(pairs)]
        if rng.random() < 0.5:
            rows.append(row("pair", [better, worse]))
        else:
            rows.append(row("pair", [worse, better]))

    n_single = _count(rng, mix.get("single", 0.0))
    order = (
        ["r_c", rng.choice(["r_rp", "r_rp_r"])]
        if rng.random() < 0.5
        else [rng.choice(["r_rp", "r_rp_r"]), "r_c"]
    )
    order += [k for k in RESPONSE_KINDS if k not in order]
    for i in range(n_single):
        kind = order[i % len(order)]
        rows.append(row("single", [kind]))
    return rows


def _image_cell(ppjd_dir: Path, record: PPJDRecord) -> dict[str, Any] | None:
    if record.image is None:
        return None
    try:
        path = resolve_under(ppjd_dir, record.image)
    except ImageError as e:
        raise ExportError(
            f"record {record.key}: image path {record.image!r}: {e.detail or e.reason}"
        ) from None
    if not path.is_file():
        raise ExportError(f"record {record.key}: image {record.image!r} is missing from {str(ppjd_dir)!r}")
    data = path.read_bytes()
    if record.image_sha256 and sha256_hex(data) != record.image_sha256:
        raise ExportError(
            f"record {record.key}: image {record.image!r} does not match its sha256 (corrupt copy)"
        )
    return {"bytes": data, "path": path.name}


def _check_record(record: PPJDRecord) -> None:
    for name in ("question", "r_c", "r_rp", "r_rp_r"):
        if not isinstance(getattr(record, name), str) or not getattr(record, name).strip():
            raise ExportError(f"record {record.key}: field {name!r} is empty")


def _records(
    ppjd_dir: Path, allow_incomplete: bool = False
) -> tuple[list[tuple[Path, PPJDRecord]], dict[str, Any]]:
    """Every record with the folder it lives in, in canonical key order, so an export depends only on the set of
    records: a one-machine build and a build split into parts (``partition.json``, merged here) give the same
    tables. A key in two parts is an error naming both."""
    if read_partition(ppjd_dir) is None:
        return sorted(((ppjd_dir, r) for r in iter_records(ppjd_dir)), key=lambda fr: fr[1].key), {}
    parts, info = merge_plan(ppjd_dir, allow_incomplete)
    owner: dict[str, Path] = {}
    out = []
    for folder in parts:
        for record in iter_records(folder):
            if record.key in owner:
                raise ExportError(
                    f"record {record.key} is in two parts: {owner[record.key].name} and {folder.name}"
                )
            owner[record.key] = folder
            out.append((folder, record))
    return sorted(out, key=lambda fr: fr[1].key), info


class _SplitWriter:
    def __init__(self, path: Path, chunk_rows: int) -> None:
        self.path = path
        self.chunk_rows = chunk_rows
        self.buffer: list[dict[str, Any]] = []
        self.writer: Any = None
        self.rows = 0

    def add(self, row: dict[str, Any]) -> None:
        self.buffer.append(row)
        if len(self.buffer) >= self.chunk_rows:
            self.flush()

    def flush(self) -> None:
        if not self.buffer:
            return
        import pyarrow.parquet as pq

        table = rows_to_dataset(self.buffer).data.table
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, table.schema)
        self.writer.write_table(table)
        self.rows += len(self.buffer)
        self.buffer = []

    def close(self) -> None:
        self.flush()
        if self.writer is not None:
            self.writer.close()


def export_ppjd(
    ppjd_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str], config: ExportConfig | None = None
) -> dict[str, Any]:
    """Write the training set of a PPJD folder into ``out_dir``; returns the export info (also written)."""
    config = config or ExportConfig()
    src = Path(ppjd_dir)
    out = Path(out_dir)
    if read_partition(src) is None and not shard_paths(src):
        raise FileNotFoundError(f"no PPJD records in {str(src)!r} (expected records-*.jsonl from build-ppjd)")
    if split_path(out, "train").exists() and not config.overwrite:
        raise FileExistsError(
            f"{str(split_path(out, 'train'))!r} exists; pass --overwrite to replace the export"
        )

    records, partition = _records(src, config.allow_incomplete)
    groups = [image_group(r) for _, r in records]
    val_groups = choose_validation_groups(groups, config.val_fraction, config.seed)

    out.parent.mkdir(parents=True, exist_ok=True)
    _recover(out)
    for stale in [*out.parent.glob(f".{out.name}.export-tmp-*"), *out.glob(".export-tmp-*")]:
        shutil.rmtree(stale, ignore_errors=True)  # left by an interrupted export
    tmp = out.parent / f".{out.name}.export-tmp-{os.getpid()}-{time.time_ns()}"
    tmp.mkdir()
    writers = {s: _SplitWriter(split_path(tmp, s), config.chunk_rows) for s in ("train", "validation")}
    counts: dict[str, Counter[str]] = {s: Counter() for s in writers}
    gt_counts: dict[str, Counter[str]] = {p: Counter() for p in PROTOCOLS}
    records_per_split: Counter[str] = Counter()
    groups_per_split: dict[str, set[str]] = {s: set() for s in writers}
    skipped: dict[str, str] = {}
    text_only = 0
    try:
        for folder, record in records:
            try:
                _check_record(record)
                cell = _image_cell(folder, record)
            except ExportError as e:
                if not config.skip_invalid:
                    raise
                skipped[record.key] = str(e)
                continue
            group = image_group(record)
            split = "validation" if group in val_groups else "train"
            records_per_split[split] += 1
            groups_per_split[split].add(group)
            text_only += cell is None
            for row in record_rows(record, cell, config.mix, config.seed, config.prompt_style):
                writers[split].add(row)
                counts[split][row["protocol"]] += 1
                gt_counts[row["protocol"]][row["ground_truth"]] += 1
        for w in writers.values():
            w.close()
        overlap = groups_per_split["train"] & groups_per_split["validation"]
        if overlap:  # pragma: no cover - guaranteed by construction
            raise RuntimeError(f"{len(overlap)} image groups are in both splits")
        manifest = (
            read_manifest(src) or (read_manifest(records[0][0]) if records and partition else None) or {}
        )
        info: dict[str, Any] = {
            "format": "perception-judge/trainset/1",
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "source": str(src.resolve()),
            "settings": {
                k: v for k, v in asdict(config).items() if k not in ("overwrite", "allow_incomplete")
            },
            "records": {s: records_per_split[s] for s in writers},
            "image_groups": {s: len(groups_per_split[s]) for s in writers},
            "text_only_records": text_only,
            "rows": {s: {p: counts[s][p] for p in PROTOCOLS} for s in writers},
            "rows_total": {s: writers[s].rows for s in writers},
            "ground_truth": {p: dict(sorted(gt_counts[p].items())) for p in PROTOCOLS if gt_counts[p]},
            "skipped_records": skipped,
            **({"partition": partition} if partition else {}),
            "ppjd": {
                "teacher": manifest.get("teacher"),
                "counts": manifest.get("counts"),
                "source": manifest.get("source"),
            },
            "files": [f"{s}.parquet" for s in writers if writers[s].rows],
        }
        (tmp / "export_info.json").write_text(
            json.dumps(info, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        (tmp / "README.md").write_text(dataset_card(info), encoding="utf-8")
        _swap_in(tmp, out)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise ExportError(
                f"disk full while writing the export of {str(src)!r} beside {str(out)!r}; the previous export (if any) "
                "is untouched: free some space and run it again"
            ) from None
        raise
    finally:
        for w in writers.values():
            if w.writer is not None:
                with contextlib.suppress(Exception):  # already closed
                    w.writer.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return info


def _swap_in(new: Path, out: Path) -> None:
    """Replace the folder ``out`` by ``new`` as a whole: readers see the old export or the new one, never a mix.
    The old folder is renamed aside first (``_recover`` restores it if the process dies between the two renames)."""
    old = out.parent / f".{out.name}.export-old"
    if old.exists():
        shutil.rmtree(old)
    if out.exists():
        for f in out.iterdir():  # files that are not the export's (notes, a user's own files) are kept
            if not (new / f.name).exists() and not f.name.startswith(".export-tmp-"):
                (shutil.copytree if f.is_dir() else shutil.copy2)(f, new / f.name)
        os.replace(out, old)
    os.replace(new, out)
    shutil.rmtree(old, ignore_errors=True)


def _recover(out: Path) -> None:
    """Undo a swap that died between its two renames: the old export comes back."""
    old = out.parent / f".{out.name}.export-old"
    if old.exists() and not out.exists():
        os.replace(old, out)
    elif old.exists():
        shutil.rmtree(old, ignore_errors=True)


def dataset_card(info: dict[str, Any]) -> str:
    s = info["settings"]
    files = info["files"]
    configs = "\n".join(f"      - split: {f.split('.')[0]}\n        path: {f}" for f in files)
    lines = [
        "---",
        "license: other",
        "task_categories:",
        "  - visual-question-answering",
        "tags:",
        "  - llm-as-a-judge",
        "  - perception",
        "  - ppjd",
        "configs:",
        "  - config_name: default",
        "    data_files:",
        configs,
        "---",
        "",
        "# PPJD training set",
        "",
        "Perceptually perturbed judgment data exported by `perception-judge export`. Every source record holds "
        "a verified-correct response (r_c), a version with perceptual errors only (r_rp) and one with perceptual "
        "and reasoning errors (r_rp+r); the target order is r_c > r_rp > r_rp+r.",
        "",
        "## Counts",
        "",
        "| split | records | image groups | batch rows | pair rows | single rows | rows |",
        "|---|---|---|---|---|---|---|",
    ]
    for split in ("train", "validation"):
        r = info["rows"][split]
        lines.append(
            f"| {split} | {info['records'][split]} | {info['image_groups'][split]} | {r['batch']} | {r['pair']} | "
            f"{r['single']} | {info['rows_total'][split]} |"
        )
    lines += [
        "",
        f"Text-only records (no image): {info['text_only_records']}. Records skipped as invalid: "
        f"{len(info['skipped_records'])}.",
        "",
        "Ground-truth distribution per protocol: "
        + "; ".join(
            f"{p}: " + ", ".join(f"{k} {v}" for k, v in d.items()) for p, d in info["ground_truth"].items()
        ),
        "",
        "## Settings",
        "",
        f"- seed: {s['seed']}",
        f"- validation fraction (of image groups): {s['val_fraction']}",
        f"- rows per record: {', '.join(f'{k}={v:g}' for k, v in s['mix'].items())}",
        f"- prompt style: {s.get('prompt_style', 'full')}",
        f"- teacher: {info['ppjd'].get('teacher')}",
        f"- source PPJD folder: `{info['source']}`",
        f"- created: {info['created']}",
        "",
        "## Columns",
        "",
        '`prompt` (chat messages with `{"type": "image"}` placeholders), `images` (original images), `protocol` '
        "(batch / pair / single), `ground_truth` (slot order best to worst, e.g. `BCA`, or correct / incorrect), "
        "`question`, `responses` (slot order), `kinds` (r_c / r_rp / r_rp_r per slot), `record_key`, "
        "`image_group` (sha256 of the source image; the split groups on it).",
        "",
        "## Loading",
        "",
        "```python",
        "from perception_judge.core.trainset import load_training_set",
        "ds = load_training_set('THIS_FOLDER')        # DatasetDict with train / validation",
        "# or: datasets.load_dataset('parquet', data_files={'train': 'train.parquet', ...})",
        "```",
        "",
    ]
    return "\n".join(lines)


__all__ = [
    "DEFAULT_MIX",
    "ExportConfig",
    "ExportError",
    "choose_validation_groups",
    "dataset_card",
    "export_ppjd",
    "image_group",
    "parse_mix",
    "record_rows",
]
