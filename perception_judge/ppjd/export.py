"""PPJD folder -> training set (the format of :mod:`perception_judge.core.trainset`; docs/ppjd.md §6).

Rows are seeded by (export seed, record key) and written in key order, so the tables depend only on the set of
records (one build, or parts merged); the *mix* gives rows per record (the fraction as a probability). Train /
validation are split by ``image_group`` (the source image's sha256; text-only records: the question).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import itertools
import os
import random
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from perception_judge.core.images import ImageError, resolve_under
from perception_judge.core.io import atomic_write_json, now, sibling_name
from perception_judge.core.options import Options, key_values
from perception_judge.core.protocol import JUDGE_TAGS, PROMPT_STYLES
from perception_judge.core.schema import PROTOCOLS, RESPONSE_KINDS, PPJDRecord, sha256_hex
from perception_judge.core.trainset import SPLITS, rows_to_dataset, split_path, training_row
from perception_judge.ppjd.partition import merge_plan, read_partition
from perception_judge.ppjd.store import DAMAGED_FILE, ManifestError, iter_records, read_manifest, shard_paths

DEFAULT_MIX = {"batch": 1.0, "pair": 0.0, "single": 0.0}
_PAIRS = (("r_c", "r_rp"), ("r_c", "r_rp_r"), ("r_rp", "r_rp_r"))


class ExportError(ValueError):
    """A record cannot be exported (names the record key)."""


def parse_mix(text: str | list[str] | dict[str, float] | None) -> dict[str, float]:
    """``"batch=1,pair=0.5"`` (or several such strings, or a dict) -> rows per record per protocol."""
    if text is None or text == "":
        return dict(DEFAULT_MIX)
    if not isinstance(text, dict):
        text = key_values(
            [text] if isinstance(text, str) else text, "mix", "protocol=rows, e.g. batch=1,pair=0.5"
        )
    mix = dict.fromkeys(PROTOCOLS, 0.0)
    for name, value in text.items():
        if name not in PROTOCOLS:
            raise ValueError(f"unknown protocol {name!r} in the mix; expected {', '.join(PROTOCOLS)}")
        try:
            mix[name] = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"mix value for {name} must be a number, got {value!r}") from None
        if not 0 <= mix[name] <= 6:
            raise ValueError(f"mix value for {name} must be between 0 and 6, got {mix[name]}")
    if sum(mix.values()) <= 0:
        raise ValueError("the mix gives no rows at all")
    return mix


class ExportOptions(Options):
    """The options of an export; a documented key is also an ``export`` flag."""

    seed: int = 0
    """seed of the slot permutations and the split"""
    val_fraction: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.1
    """fraction of source images (image groups) that go to validation"""
    mix: Annotated[dict[str, float], BeforeValidator(parse_mix)] = Field(
        default_factory=lambda: dict(DEFAULT_MIX)
    )
    """rows per record per protocol, e.g. batch=1,pair=0.5,single=0.5 (integer part always, fraction as a
    probability)"""
    chunk_rows: Annotated[int, Field(ge=1)] = 256  # rows per parquet write
    skip_invalid: bool = False
    """skip (and list) records whose image is missing or corrupt"""
    overwrite: bool = False
    """replace an existing export in --out"""
    prompt_style: Literal[PROMPT_STYLES] = "full"
    """judge prompt wording: full (real judges, default) or tiny (the dozen-token prompt of the CPU-scale tiny
    judges; recorded in export_info.json, and the evaluation renders the same style)"""
    license: str = "other"
    """the card's licence: a Hub licence id (cc-by-4.0 ...) if the source data and teacher terms allow one"""
    allow_incomplete: bool = False
    """export what is there: a build split into parts (build-ppjd --num-parts) with missing or unfinished parts, or
    a folder with damaged record lines (export_info.json lists them); default: refuse, naming them"""


def image_group(record: PPJDRecord) -> str:
    return record.image_sha256 or "text:" + sha256_hex(record.question)[:40]


def choose_validation_groups(groups: list[str], fraction: float, seed: int) -> set[str]:
    """A seeded choice of round(fraction * n) groups (at least 1 and at most n-1 when fraction > 0, n >= 2)."""
    groups = sorted(set(groups))
    n = len(groups)
    if fraction <= 0 or n < 2:
        return set()
    random.Random(f"perception-judge/export/split/{seed}").shuffle(groups)
    return set(groups[: min(n - 1, max(1, round(fraction * n)))])


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
    kinds_per_row: list[tuple[str, list[str]]] = []

    for _ in range(_count(rng, mix.get("batch", 0.0))):
        kinds = list(RESPONSE_KINDS)
        for _try in range(12):  # a permutation not used yet, where possible
            rng.shuffle(kinds)
            if ("batch", kinds) not in kinds_per_row:
                break
        kinds_per_row.append(("batch", kinds))

    n_pair = _count(rng, mix.get("pair", 0.0))
    pairs = list(_PAIRS)
    rng.shuffle(pairs)
    for i in range(n_pair):
        better, worse = pairs[i % len(pairs)]
        kinds_per_row.append(("pair", [better, worse] if rng.random() < 0.5 else [worse, better]))

    n_single = _count(rng, mix.get("single", 0.0))
    wrong = ["r_rp", "r_rp_r"]
    order = ["r_c", rng.choice(wrong)] if rng.random() < 0.5 else [rng.choice(wrong), "r_c"]
    order += [k for k in RESPONSE_KINDS if k not in order]
    kinds_per_row += [("single", [order[i % len(order)]]) for i in range(n_single)]
    return [
        training_row(protocol, record.question, texts, kinds, images, record.key, group, style)
        for protocol, kinds in kinds_per_row
    ]


def _image_cell(ppjd_dir: Path, record: PPJDRecord) -> dict[str, Any] | None:
    if record.image is None:
        return None
    where = f"record {record.key}: image"
    try:
        path = resolve_under(ppjd_dir, record.image)
    except ImageError as e:
        raise ExportError(f"{where} path {record.image!r}: {e.detail or e.reason}") from None
    if not path.is_file():
        raise ExportError(f"{where} {record.image!r} is missing from {str(ppjd_dir)!r}")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ExportError(f"{where} {record.image!r} cannot be read: {e.strerror or e}") from None
    if record.image_sha256 and sha256_hex(data) != record.image_sha256:
        raise ExportError(f"{where} {record.image!r} does not match its sha256 (corrupt copy)")
    return {"bytes": data, "path": path.name}


def _records(ppjd_dir: Path, allow_incomplete: bool) -> tuple[list[tuple[Path, PPJDRecord]], dict[str, Any]]:
    """Every record with the folder it lives in, in key order (see the module docstring), the parts of a split
    build merged, and what the export records about the folder. A key in two parts, or a damaged record line
    (unless ``allow_incomplete``), is an error naming it."""
    partitioned = read_partition(ppjd_dir) is not None
    parts, partition = merge_plan(ppjd_dir, allow_incomplete) if partitioned else ([ppjd_dir], {})
    owner: dict[str, Path] = {}
    out, damaged = [], []
    for folder in parts:
        found: list[tuple[str, int]] = []
        for record in iter_records(folder, found):
            if record.key in owner:
                raise ExportError(
                    f"record {record.key} is in two parts: {owner[record.key].name} and {folder.name}"
                )
            owner[record.key] = folder
            out.append((folder, record))
        damaged += [f"{folder.name + '/' if partitioned else ''}{name} line {n}" for name, n in found]
    if damaged and not allow_incomplete:
        listed = ", ".join(damaged[:5]) + (f" and {len(damaged) - 5} more" if len(damaged) > 5 else "")
        raise ExportError(
            f"{str(ppjd_dir)!r}: {len(damaged)} damaged line(s) hold no readable record ({listed}), so the export "
            f"would miss their records: run the same build-ppjd command on the folder again (it sets damaged lines "
            f"aside in {DAMAGED_FILE} and builds their records again), or pass --allow-incomplete to export without them"
        )
    info = {"partition": partition} if partition else {}
    return sorted(out, key=lambda fr: fr[1].key), info | ({"damaged_lines": damaged} if damaged else {})


def _write_parquet(path: Path, rows: Iterator[dict[str, Any]], chunk_rows: int) -> int:
    """Write ``rows`` in chunks of ``chunk_rows`` (constant memory); returns how many (no file for none)."""
    import pyarrow.parquet as pq

    n, writer = 0, None
    try:
        while chunk := list(itertools.islice(rows, chunk_rows)):
            table = rows_to_dataset(chunk).data.table
            writer = writer or pq.ParquetWriter(path, table.schema)
            writer.write_table(table)
            n += len(chunk)
    finally:
        if writer is not None:
            writer.close()
    return n


@contextlib.contextmanager
def _writing(src: Path, out: Path) -> Iterator[None]:
    """A full disk or a folder that cannot be written is one line naming it (no traceback)."""
    try:
        yield
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise ExportError(
                f"disk full while writing the export of {str(src)!r} beside {str(out)!r}; the previous export (if "
                "any) is untouched: free some space and run it again"
            ) from None
        if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise ExportError(
                f"cannot write the export into {str(out.parent)!r} ({e.strerror or e}: read-only or not yours); "
                "choose an --out in a writable folder"
            ) from None
        raise


def _staging(out: Path) -> Path:
    """The temporary folder beside ``out`` the export is written into (stale ones removed first)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    _recover(out)
    stale = [
        *out.parent.glob(glob.escape(sibling_name(out.name, "export-tmp-")) + "*"),
        *out.glob(".export-tmp-*"),
    ]
    for folder in stale:
        shutil.rmtree(folder, ignore_errors=True)  # left by an interrupted export
    tmp = out.parent / sibling_name(out.name, f"export-tmp-{os.getpid()}-{time.time_ns()}")
    tmp.mkdir()
    return tmp


def _write_splits(
    tmp: Path, records: list[tuple[Path, PPJDRecord]], options: ExportOptions
) -> dict[str, Any]:
    """Write the train / validation tables of ``records`` into ``tmp``; returns their counts."""
    val_groups = choose_validation_groups(
        [image_group(r) for _, r in records], options.val_fraction, options.seed
    )
    counts: dict[str, Counter[str]] = {s: Counter() for s in SPLITS}
    gt_counts: dict[str, Counter[str]] = {p: Counter() for p in PROTOCOLS}
    records_per_split: Counter[str] = Counter()
    groups_per_split: dict[str, set[str]] = {s: set() for s in SPLITS}
    skipped: dict[str, str] = {}

    def rows_of(split: str) -> Iterator[dict[str, Any]]:
        """The rows of the records of one split (counted on the way)."""
        for folder, record in records:
            group = image_group(record)
            if ("validation" if group in val_groups else "train") != split:
                continue
            try:
                for name in ("question", "r_c", "r_rp", "r_rp_r"):
                    if not isinstance(value := getattr(record, name), str) or not value.strip():
                        raise ExportError(f"record {record.key}: field {name!r} is empty")
                    if name != "question" and (tag := JUDGE_TAGS.search(value)):
                        raise ExportError(
                            f"record {record.key}: {name} contains {tag.group()!r}, a verdict a judge would read"
                        )
                cell = _image_cell(folder, record)
            except ExportError as e:
                if not options.skip_invalid:
                    raise
                skipped[record.key] = str(e)
                continue
            records_per_split[split] += 1
            groups_per_split[split].add(group)
            for row in record_rows(record, cell, options.mix, options.seed, options.prompt_style):
                counts[split][row["protocol"]] += 1
                gt_counts[row["protocol"]][row["ground_truth"]] += 1
                yield row

    rows_total = {s: _write_parquet(split_path(tmp, s), rows_of(s), options.chunk_rows) for s in SPLITS}
    return {
        "records": {s: records_per_split[s] for s in SPLITS},
        "image_groups": {s: len(groups_per_split[s]) for s in SPLITS},
        "text_only_records": sum(r.image is None and r.key not in skipped for _, r in records),
        "rows": {s: {p: counts[s][p] for p in PROTOCOLS} for s in SPLITS},
        "rows_total": rows_total,
        "ground_truth": {p: dict(sorted(gt_counts[p].items())) for p in PROTOCOLS if gt_counts[p]},
        "skipped_records": dict(sorted(skipped.items())),
        "files": [f"{s}.parquet" for s in SPLITS if rows_total[s]],
    }


def _manifest(src: Path, records: list[tuple[Path, PPJDRecord]], info: dict[str, Any]) -> dict[str, Any]:
    """The teacher, counts and source of the PPJD manifest; an unreadable one is a warning (the shards hold the
    records)."""
    try:
        first_part = records[0][0] if records and info.get("partition") else None
        manifest = read_manifest(src) or (read_manifest(first_part) if first_part else None) or {}
    except ManifestError as e:
        info.setdefault("warnings", []).append(
            f"{e}; exported from the shards (build-ppjd on it rebuilds it)"
        )
        manifest = {}
    if source := manifest.get("source"):  # names, never local paths: an export gets published
        root, files = source.get("image_root"), source.get("files") or ()
        source = {**source, "files": [Path(f).name for f in files], "image_root": root and Path(root).name}
    return {"teacher": manifest.get("teacher"), "counts": manifest.get("counts"), "source": source}


def export_ppjd(
    ppjd_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str], options: ExportOptions | None = None
) -> dict[str, Any]:
    """Write the training set of a PPJD folder into ``out_dir``; returns the export info (also written)."""
    options = options or ExportOptions()
    src, out = Path(ppjd_dir), Path(out_dir)
    if read_partition(src) is None and not shard_paths(src):
        raise FileNotFoundError(f"no PPJD records in {str(src)!r} (expected records-*.jsonl from build-ppjd)")
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {str(out)!r} is a file, not a folder")
    if (train := split_path(out, "train")).exists() and not options.overwrite:
        raise FileExistsError(f"{str(train)!r} exists; pass --overwrite to replace the export")
    with _writing(src, out):  # before any work: a folder that cannot be written is said at once
        tmp = _staging(out)
    try:
        records, found = _records(src, options.allow_incomplete)
        if not records:
            raise ExportError(f"no records in {str(src)!r}: nothing to export (failures.jsonl says why)")
        info: dict[str, Any] = {
            "format": "perception-judge/trainset/1",
            "created": now(),
            "source": src.resolve().name,  # the folder's name, never a local path: the card gets published
            "settings": options.model_dump(exclude={"overwrite", "allow_incomplete"}),
        }
        with _writing(src, out):
            info |= _write_splits(tmp, records, options) | found
            info["ppjd"] = _manifest(src, records, info)
            atomic_write_json(tmp / "export_info.json", info, fsync=False, indent=2)
            (tmp / "README.md").write_text(dataset_card(info), encoding="utf-8")
            _swap_in(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return info


def _swap_in(new: Path, out: Path) -> None:
    """Replace the folder ``out`` by ``new`` as a whole: readers see the old export or the new one, never a mix.
    The old folder is renamed aside first (``_recover`` restores it if the process dies between the two renames)."""
    old = out.parent / sibling_name(out.name, "export-old")
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
    old = out.parent / sibling_name(out.name, "export-old")
    if old.exists() and not out.exists():
        os.replace(old, out)
    elif old.exists():
        shutil.rmtree(old, ignore_errors=True)


def dataset_card(info: dict[str, Any]) -> str:
    """The ``README.md`` of an exported training set (``dataset_card.md.jinja``) from its export info."""
    import jinja2

    template = Path(__file__).with_name("dataset_card.md.jinja").read_text()
    jinja = jinja2.Template(template, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    return jinja.render(info=info, s=info["settings"], splits=SPLITS)
