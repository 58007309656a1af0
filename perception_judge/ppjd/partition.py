"""A PPJD build split across machines (``build-ppjd --num-parts N --part I``), merged exactly by ``export``.

Part I builds the keys with ``int(key, 16) % N == I`` into ``OUT/part-0000I-of-0000N/``; ``OUT/partition.json``
records the partition (N, the scheme, the source and teacher fingerprints): the first part creates it exclusively
(safe across hosts on a shared file system, unlike ``flock``), every later part must match it.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from perception_judge.core.io import atomic_write_json, temp_name
from perception_judge.core.schema import sha256_hex
from perception_judge.ppjd.store import ManifestError, read_manifest

PARTITION_FILE = "partition.json"
SCHEME = "int(key, 16) % num_parts"


class PartitionError(ValueError):
    """A part that does not belong to the folder's partition, or a partitioned folder that cannot be merged."""


def part_of(key: str, num_parts: int) -> int:
    """The part of a record key: ``int(key, 16) % num_parts``."""
    return int(key, 16) % num_parts


def part_dir(out: str | os.PathLike[str], part: int, num_parts: int) -> Path:
    return Path(out) / f"part-{part:05d}-of-{num_parts:05d}"


def resolve_part(part: int | None, num_parts: int, env: dict[str, str] | None = None) -> int:
    """``--part``, else ``SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN``; checked against ``num_parts``."""
    env = dict(os.environ if env is None else env)
    if part is None:
        if "SLURM_ARRAY_TASK_ID" not in env:
            raise PartitionError("--num-parts needs --part I (or run it as a SLURM array task)")
        part = int(env["SLURM_ARRAY_TASK_ID"]) - int(env.get("SLURM_ARRAY_TASK_MIN", "0"))
    if num_parts < 1 or not 0 <= part < num_parts:
        raise PartitionError(f"--part must be in 0..{num_parts - 1} for --num-parts {num_parts}, got {part}")
    return part


def fingerprint(description: dict[str, Any]) -> str:
    return sha256_hex(json.dumps(description, sort_keys=True, default=str))[:16]


def claim_partition(
    out: str | os.PathLike[str], num_parts: int, source: dict[str, Any], teacher: dict[str, Any]
) -> None:
    """Record the partition in ``OUT/partition.json`` (the first part creates it exclusively) or check that this
    part matches it; a part started with another N, source or teacher is refused with what differs."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    want = {
        "format": "perception-judge/ppjd-partition/1",
        "num_parts": int(num_parts),
        "scheme": SCHEME,
        "source": fingerprint(source),
        "teacher": fingerprint(teacher),
        "source_description": source,
        "teacher_description": teacher,
    }
    path = out / PARTITION_FILE
    tmp = temp_name(path)
    atomic_write_json(tmp, want, indent=2)  # the descriptions redacted: no URL credentials
    try:
        with contextlib.suppress(FileExistsError):  # exclusive: fails when another part got there first
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    have = read_partition(out)
    assert have is not None
    for key in ("num_parts", "scheme", "source", "teacher"):
        if have.get(key) != want[key]:
            raise PartitionError(
                f"{str(path)!r} was started with {key} {have.get(key)!r}; this part has {want[key]!r}: every part "
                "of a build needs the same --num-parts, source and teacher (or another --out)"
            )


def read_partition(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    path = Path(folder) / PARTITION_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _last_status(part: Path) -> str | None:
    """None when the last run of a part completed, else the part's name (and why, if its manifest is unreadable)."""
    try:
        runs = (read_manifest(part) or {}).get("runs") or [{}]
    except ManifestError:
        return f"{part.name} (manifest.json unreadable: run the part again to rebuild it)"
    return None if runs[-1].get("status") in ("complete", "failed") else part.name  # failed: every item tried


def merge_plan(
    folder: str | os.PathLike[str], allow_incomplete: bool = False
) -> tuple[list[Path], dict[str, Any]]:
    """The part folders of a partitioned PPJD folder, and what the export records about them. A missing part or
    one whose last run did not complete is an error naming it, unless ``allow_incomplete`` (then it is listed)."""
    info = read_partition(folder)
    if info is None:
        raise PartitionError(f"{str(folder)!r} is not a partitioned PPJD folder (no {PARTITION_FILE})")
    n = int(info["num_parts"])
    dirs = [part_dir(folder, i, n) for i in range(n)]
    parts = [d for d in dirs if d.is_dir()]
    missing = [d.name for d in dirs if not d.is_dir()]
    unfinished = [name for d in parts if (name := _last_status(d)) is not None]
    if (missing or unfinished) and not allow_incomplete:
        listed = (("missing", missing), ("not finished", unfinished))
        what = "; ".join(f"{label}: {', '.join(names)}" for label, names in listed if names)
        raise PartitionError(
            f"{str(folder)!r}: {n} parts, {what}: run those parts (the same build-ppjd command with their --part), "
            "or pass --allow-incomplete to export what is there"
        )
    return parts, {"num_parts": n, "scheme": info["scheme"], "missing": missing, "unfinished": unfinished}
