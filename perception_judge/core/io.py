"""Files and terminals: the one atomic writer of the project (docs/architecture.md "Files that cross stage
borders"), and its one progress display (a bar on a terminal, plain lines in a log). A file is written under a
temporary name beside it, unique per host, process, thread and call and within the file-name limit, then renamed into
place; JSON is redacted on the way out (:mod:`perception_judge.core.redact`).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from perception_judge.core.redact import redact

_COUNTER = itertools.count()
_HOST = socket.gethostname().replace("/", "_").replace(".", "_")[:40] or "host"
_STEM_MAX = 150  # bytes of a name kept whole in a sibling's name; a tag of up to 100 bytes fits in 255


def sibling_name(name: str, tag: str) -> str:
    """``.NAME.TAG``: a hidden name for a temporary (or set-aside) copy of ``name`` beside it, within the 255-byte
    limit of file names whatever ``name`` is: a name over 150 bytes is cut and a hash of it appended (the same
    name always gives the same stem, so ``sibling_name(name, "tag-") + "*"`` globs every one of them)."""
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) > _STEM_MAX:
        digest = hashlib.sha256(raw).hexdigest()[:16]
        name = raw[: _STEM_MAX - 17].decode("utf-8", "ignore") + "~" + digest
    return f".{name}.{tag}"


def temp_name(path: Path) -> Path:
    """A hidden temporary name beside ``path``, unique per host, process, thread and call."""
    tag = f"tmp-{_HOST}-{os.getpid()}-{threading.get_ident()}-{next(_COUNTER)}"
    return path.with_name(sibling_name(path.name, tag))


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", fsync: bool = True) -> Iterator[IO[Any]]:
    """``with atomic_open(path) as f: ...`` writes a temporary file and renames it onto ``path`` when the block
    ends without an error (the temporary file is removed otherwise). ``fsync`` flushes the file, and the folder
    after the rename, so the new name survives a power loss too. Text modes write UTF-8."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    try:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": ""})) as f:
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if fsync:
        with contextlib.suppress(OSError):  # not every file system lets a folder be opened and synced
            fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, fsync: bool = True) -> None:
    with atomic_open(path, "wb", fsync) as f:
        f.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str, fsync: bool = True) -> None:
    with atomic_open(path, "w", fsync) as f:
        f.write(text)


def atomic_write_json(
    path: str | os.PathLike[str], data: Any, fsync: bool = True, indent: int | None = 1
) -> None:
    """``data`` as UTF-8 JSON (secrets redacted, URL credentials too; non-JSON values as ``str``), written
    atomically."""
    atomic_write_text(path, json.dumps(redact(data), ensure_ascii=False, indent=indent, default=str), fsync)


def check_writable(folder: str | os.PathLike[str], what: str, flag: str = "--out DIR") -> None:
    """Create ``folder`` and write a probe file in it, then remove what it made; before a job's work, an
    ``OptionError`` names the folder and ``flag`` when that fails (a read-only file system, a full disk)."""
    from perception_judge.core.options import OptionError

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise OptionError(
            f"cannot write {what} to {str(folder)!r}: a file, not a folder; pass {flag} elsewhere"
        )
    made = [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = temp_name(folder / ".write-probe")
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        probe.unlink()
    except OSError as e:
        raise OptionError(
            f"cannot write {what} to {str(folder)!r} ({e.strerror or e}): pass {flag} somewhere you can write to"
        ) from None
    finally:  # nothing left behind, also when the probe fails in a folder it made (a full disk)
        for p in made:
            with contextlib.suppress(OSError):
                p.rmdir()


def now() -> str:
    """The local time as ISO 8601 with its UTC offset, the timestamp of every file the project writes."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


LINE_EVERY_S = 30.0  # seconds between the plain progress lines of a loop whose stderr is no terminal
# what enabled=None means (`eval -q`: False, no progress)
PROGRESS: dict[str, bool | None] = {"enabled": None}


class _Lines:
    """Progress where stderr is no terminal (a SLURM log, a pipe): a plain line at most every :data:`LINE_EVERY_S`
    seconds (``bias seed 0: 120/480 item (25%), 2.10/s, ETA 171 s; postfix``), a last one at the end if any."""

    def __init__(self, total: int | None, desc: str, unit: str) -> None:
        self.total, self.desc, self.unit, self.n, self.postfix, self.lines = total, desc, unit, 0, "", 0
        self.started = self.last = time.monotonic()

    def update(self, n: int = 1, every: float | None = None) -> None:
        self.n += n
        if time.monotonic() - self.last >= (LINE_EVERY_S if every is None else every):
            self.last, self.lines, total = time.monotonic(), self.lines + 1, self.total
            rate = self.n / max(self.last - self.started, 1e-9)
            done = (
                f"{self.n}/{total} {self.unit} ({self.n / total:.0%})" if total else f"{self.n} {self.unit}"
            )
            eta = f", ETA {(total - self.n) / rate:.0f} s" if total and rate and self.n < total else ""
            tail = f"; {self.postfix}" if self.postfix else ""
            print(f"{self.desc}: {done}, {rate:.2f}/s{eta}{tail}", file=sys.stderr, flush=True)

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        self.postfix = text

    def close(self) -> None:
        if self.lines:
            self.update(0, every=0)
            self.lines = 0


def progress_bar(
    total: int | None, desc: str, unit: str = "it", enabled: bool | None = None, **kwargs: Any
) -> Any:
    """The progress of every long loop (synthesis, PPJD builds, supervised steps, judge calls): a tqdm bar where
    stderr is a terminal, plain lines elsewhere (:class:`_Lines`); nothing with ``enabled=False`` or nothing to do."""
    from tqdm.auto import tqdm

    enabled = PROGRESS["enabled"] if enabled is None else enabled
    if enabled is not False and total != 0 and not sys.stderr.isatty():
        return _Lines(total, desc, unit)
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        disable=enabled is False or total == 0,
        dynamic_ncols=True,
        **kwargs,
    )


def library_bars_off() -> None:
    """Turn off the progress bars of huggingface_hub, transformers and datasets (in a log file, or with ``-q``): the
    variables they read when imported, and the switches of those already imported."""
    for var in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
        os.environ.setdefault(var, "1")
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    if "datasets" in sys.modules:
        from datasets.utils.logging import disable_progress_bar

        disable_progress_bar()
