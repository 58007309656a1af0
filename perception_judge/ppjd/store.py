"""The PPJD output folder (docs/ppjd.md §5): ``records-NNNNN.jsonl`` shards (one ``PPJDRecord`` per line),
``failures.jsonl`` (the last line of a key is its state; a key with a record is done), ``images/<sha256>.<ext>``,
``manifest.json``, ``damaged-lines.jsonl`` and ``.lock`` (flock: one builder per folder). A line is one ``os.write``
on an ``O_APPEND`` descriptor; the shards, not the manifest, are the truth ("Crash safety" in the docs).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perception_judge.core.io import atomic_open, atomic_write_bytes, atomic_write_json, now
from perception_judge.core.schema import Failure, PPJDRecord, sha256_hex

MANIFEST_FORMAT = "perception-judge/ppjd/1"
SHARD_PREFIX = "records-"
FAILURES_FILE = "failures.jsonl"
MANIFEST_FILE = "manifest.json"
LOCK_FILE = ".lock"
IMAGES_DIR = "images"
DAMAGED_FILE = "damaged-lines.jsonl"


def shard_name(index: int) -> str:
    return f"{SHARD_PREFIX}{index:05d}.jsonl"


def shard_paths(folder: str | os.PathLike[str]) -> list[Path]:
    return sorted(p for p in Path(folder).glob(f"{SHARD_PREFIX}*.jsonl") if p.is_file())


def check_out(folder: str | os.PathLike[str]) -> None:
    """Before any work: ``--out`` is new, empty or a PPJD build (not a file, nor a folder of other files)."""
    out, marks = Path(folder), (MANIFEST_FILE, LOCK_FILE, "partition.json")
    ours = out.is_dir() and (not any(out.iterdir()) or any((out / m).exists() for m in marks))
    if out.exists() and not ours:
        raise ValueError(
            f"--out {str(out)!r} is a file or a folder of other files: choose a new or empty folder"
        )


@dataclass
class ScanReport:
    """What opening a folder found."""

    torn_lines_repaired: int = 0
    corrupt_lines: int = 0  # complete lines that are no record: set aside in damaged-lines.jsonl
    duplicate_records: int = 0
    manifest_rebuilt: str = ""  # why manifest.json could not be read (it is rebuilt from the shards)


def _scan_jsonl(path: Path, repair: bool) -> Iterator[tuple[dict[str, Any] | None, bool]]:
    """Yield (object or None for a corrupt line, is_torn_tail). With ``repair``, truncate a torn tail."""
    good_end = 0
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):  # the process died mid-write: drop the torn tail
                yield None, True
                break
            good_end += len(line)
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                # A complete but unreadable line can only be a torn write followed by another run's append on a
                # file system without O_APPEND atomicity; skip it rather than crash.
                obj = None
            yield (obj if isinstance(obj, dict) else None), False
    if repair and good_end < path.stat().st_size:
        with open(path, "r+b") as f:
            f.truncate(good_end)
            os.fsync(f.fileno())


def iter_records(
    folder: str | os.PathLike[str], damaged: list[tuple[str, int]] | None = None
) -> Iterator[PPJDRecord]:
    """Every record of a PPJD folder, once per key, in shard order (read-only; torn tails skipped). A complete line
    that is no record is appended to ``damaged`` as (shard name, line number)."""
    seen: set[str] = set()
    for shard in shard_paths(folder):
        for n, (obj, torn) in enumerate(_scan_jsonl(shard, repair=False), start=1):
            if obj is None or "key" not in obj:
                if damaged is not None and not torn:
                    damaged.append((shard.name, n))
            elif obj["key"] not in seen:
                seen.add(obj["key"])
                yield PPJDRecord.from_dict(obj)


def read_failures(folder: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """key -> the last failure line of that key (read-only)."""
    path = Path(folder) / FAILURES_FILE
    lines = _scan_jsonl(path, repair=False) if path.is_file() else ()
    return {obj["key"]: obj for obj, _ in lines if obj is not None and "key" in obj}


class ManifestError(ValueError):
    """``manifest.json`` exists but cannot be read (the message names it)."""


def read_manifest(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The manifest of a PPJD folder, None when it has none; :class:`ManifestError` when it is unreadable."""
    path = Path(folder) / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ManifestError(f"{str(path)!r} is unreadable ({e}); the shards hold every record") from None
    if not isinstance(manifest, dict):
        raise ManifestError(f"{str(path)!r} is unreadable (a {type(manifest).__name__}, not an object)")
    return manifest


class FolderLocked(RuntimeError):
    pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _line(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


class PPJDStore:
    """Writer of one PPJD folder (see the module docstring). Use ``with PPJDStore(...) as store``."""

    def __init__(self, folder: str | os.PathLike[str], shard_size: int = 5000, fsync_every: int = 32) -> None:
        if shard_size < 1:
            raise ValueError("shard_size must be >= 1")
        self.folder = Path(folder)
        self.shard_size = shard_size
        self.fsync_every = max(1, fsync_every)
        self.done: set[str] = set()
        self.failed: dict[str, tuple[str, str]] = {}
        self.report = ScanReport()
        self.manifest: dict[str, Any] = {}
        self._lock_fd: int | None = None
        self._shard_fd: int | None = None
        self._fail_fd: int | None = None
        self._shard_index = self._shard_count = self._unsynced = 0
        self._shard_lines: dict[str, int] = {}

    def open(self) -> ScanReport:
        (self.folder / IMAGES_DIR).mkdir(parents=True, exist_ok=True)
        fd = os.open(self.folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise FolderLocked(
                f"another process is building into {str(self.folder)!r} (it holds {LOCK_FILE}); "
                "wait for it or stop it first"
            ) from None
        self._lock_fd = fd
        # Temp files of writes a killed process never renamed into place (we hold the lock: nobody else writes).
        for d in (self.folder, self.folder / IMAGES_DIR):
            for stale in d.glob(".*.tmp-*"):
                with contextlib.suppress(OSError):
                    stale.unlink()
        self._scan()
        try:
            self.manifest = read_manifest(self.folder) or {}
        except ManifestError as e:  # write_manifest rebuilds it from the shards (earlier runs are lost)
            self.report.manifest_rebuilt, self.manifest = str(e), {}
        shards = shard_paths(self.folder)
        index = int(shards[-1].stem[len(SHARD_PREFIX) :]) if shards else 0
        count = self._shard_lines.get(shards[-1].name, 0) if shards else 0
        if count >= self.shard_size:
            index, count = index + 1, 0
        self._switch_shard(index, count)
        self._fail_fd = os.open(self.folder / FAILURES_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return self.report

    def _read(self, path: Path) -> Iterator[dict[str, Any]]:
        """The readable lines of ``path``; the torn tail is truncated, and complete lines without a readable key
        are set aside afterwards (:meth:`_set_aside`)."""
        bad = []
        for n, (obj, torn) in enumerate(_scan_jsonl(path, repair=True), start=1):
            if torn:
                self.report.torn_lines_repaired += 1
            elif obj is None or "key" not in obj:
                bad.append(n)
            else:
                yield obj
        if bad:
            self._set_aside(path, bad)

    def _set_aside(self, path: Path, bad: list[int]) -> None:
        """Move the lines ``bad`` (1-based) of ``path`` into damaged-lines.jsonl, so readers and the export find
        the file whole again; the keys they held are not done, so this run builds them again."""
        self.report.corrupt_lines += len(bad)
        with (
            open(path, "rb") as src,
            atomic_open(path, "wb") as dst,
            open(self.folder / DAMAGED_FILE, "ab") as out,
        ):
            for n, line in enumerate(src, start=1):
                if n not in bad:
                    dst.write(line)
                else:
                    out.write(
                        _line({"file": path.name, "line": n, "text": line.decode("utf-8", "replace")[:-1]})
                    )

    def _scan(self) -> None:
        for shard in shard_paths(self.folder):
            lines = 0
            for obj in self._read(shard):
                lines += 1
                if obj["key"] in self.done:
                    self.report.duplicate_records += 1
                self.done.add(obj["key"])
            self._shard_lines[shard.name] = lines
        fpath = self.folder / FAILURES_FILE
        for obj in self._read(fpath) if fpath.is_file() else ():
            if obj["key"] not in self.done:  # a key retried into a record is done, not failed
                self.failed[obj["key"]] = (str(obj.get("stage", "")), str(obj.get("reason", "")))

    def _switch_shard(self, index: int, count: int) -> None:
        if self._shard_fd is not None:
            os.fsync(self._shard_fd)
            os.close(self._shard_fd)
        self._shard_index, self._shard_count = index, count
        path = self.folder / shard_name(index)
        self._shard_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._shard_lines.setdefault(path.name, count)

    def close(self) -> None:
        for fd in (self._shard_fd, self._fail_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.fsync(fd)
                os.close(fd)
        self._shard_fd = self._fail_fd = None
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> PPJDStore:
        self.open()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _maybe_sync(self) -> None:
        self._unsynced += 1
        if self._unsynced >= self.fsync_every:
            self.sync()

    def sync(self) -> None:
        for fd in (self._shard_fd, self._fail_fd):
            if fd is not None:
                os.fsync(fd)
        self._unsynced = 0

    def put_image(self, data: bytes, ext: str) -> tuple[str, str]:
        """Store image bytes under ``images/<sha256>.<ext>`` (idempotent); returns (relative path, sha256)."""
        sha = sha256_hex(data)
        rel = f"{IMAGES_DIR}/{sha}.{ext.lower().lstrip('.') or 'bin'}"
        path = self.folder / rel
        if not (path.is_file() and path.stat().st_size == len(data)):
            atomic_write_bytes(path, data)
        return rel, sha

    def append_record(self, record: PPJDRecord) -> bool:
        """Append a record; False (and nothing written) when its key is already done."""
        if record.key in self.done:
            return False
        if self._shard_count >= self.shard_size:
            self._switch_shard(self._shard_index + 1, 0)
        assert self._shard_fd is not None, "store not open"
        _write_all(self._shard_fd, _line(record.to_dict()))
        self._shard_count += 1
        self._shard_lines[shard_name(self._shard_index)] = self._shard_count
        self.done.add(record.key)
        self.failed.pop(record.key, None)
        self._maybe_sync()
        return True

    def append_failure(self, failure: Failure) -> None:
        assert self._fail_fd is not None, "store not open"
        _write_all(self._fail_fd, _line(failure.to_dict()))
        self.failed[failure.key] = (failure.stage, failure.reason)
        self._maybe_sync()

    def counts(self) -> dict[str, Any]:
        reasons = Counter(f"{stage}/{reason}" for stage, reason in self.failed.values())
        by_reason = dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
        return {"records": len(self.done), "failed": len(self.failed), "failed_by_reason": by_reason}

    def write_manifest(self, **updates: Any) -> dict[str, Any]:
        m = {"format": MANIFEST_FORMAT, "created": now(), **self.manifest, **updates, "updated": now()}
        m["counts"] = self.counts()
        m["shards"] = [
            {"file": name, "records": n}
            for name, n in sorted(self._shard_lines.items())
            if n or name == shard_name(self._shard_index)
        ]
        m["failures_file"] = FAILURES_FILE
        self.manifest = m
        atomic_write_json(self.folder / MANIFEST_FILE, m, indent=2)  # redacted: no URL credentials
        return m
