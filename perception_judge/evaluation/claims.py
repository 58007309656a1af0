"""Many workers on one sweep: ``eval sweep RUN --claim`` (a SLURM array, ``srun`` tasks, Ray tasks, processes).

The first worker pins the plan and the model list (``OUT/claims/plan.json``, an exclusive create); a worker with
another plan is refused. A worker claims a cell by creating ``OUT/claims/<cell>.claim`` with ``O_CREAT|O_EXCL``
(atomic on local and network file systems, unlike ``flock`` across hosts) and keeps it alive by touching it every
``lease_s / 4`` seconds from a heartbeat thread. A claim whose file has not been touched for ``lease_s``, measured
against the file server's clock (the mtime of a file this worker just touched), is stale: one worker takes it over,
holding ``<cell>.takeover`` (an exclusive ``mkdir``) while it re-checks and replaces the claim. Workers write only
their cells; ``eval collect OUT`` writes the tables and the report.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from perception_judge.core.io import atomic_write_text, temp_name

CLAIMS_DIR = "claims"


class PlanMismatch(ValueError):
    """A worker started with another plan than the one the sweep was pinned to."""


class Claims:
    def __init__(self, out_dir: str | os.PathLike[str], lease_s: float = 60.0) -> None:
        if lease_s <= 0:
            raise ValueError(f"lease_s must be > 0, got {lease_s}")
        self.dir = Path(out_dir) / CLAIMS_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        self.lease_s = float(lease_s)
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
        self._clock = self.dir / f".clock-{self.worker.replace(':', '-')}"
        self.held: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, daemon=True, name="claims-heartbeat")
        self._beat.start()

    def pin_plan(self, plan: dict[str, Any]) -> None:
        """Pin ``plan`` for every worker (the first one writes it), or refuse one that differs."""
        path = self.dir / "plan.json"
        text = json.dumps(plan, sort_keys=True, default=str)
        tmp = temp_name(path)
        atomic_write_text(tmp, text)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
        tmp.unlink(missing_ok=True)
        if path.read_text(encoding="utf-8") != text:
            pinned = json.loads(path.read_text(encoding="utf-8"))
            differs = sorted(k for k in set(pinned) | set(plan) if pinned.get(k) != json.loads(text).get(k))
            raise PlanMismatch(
                f"{str(path)!r}: this sweep was started with another plan ({', '.join(differs)} differ); "
                "every --claim worker needs the same run, config, suites, seeds and models (or another --out)"
            )

    def _path(self, cell: str) -> Path:
        return self.dir / f"{cell}.claim"

    def server_now(self) -> float:
        """The file server's clock: the mtime of a file this worker has just touched."""
        self._clock.touch()
        return self._clock.stat().st_mtime

    def acquire(self, cell: str) -> bool:
        """Claim ``cell``; False when another live worker holds it. A stale claim is taken over by one worker."""
        if self._create(cell):
            return True
        try:
            age = self.server_now() - self._path(cell).stat().st_mtime
        except FileNotFoundError:
            return self._create(cell)  # released meanwhile
        if age <= self.lease_s:
            return False
        gate = self.dir / f"{cell}.takeover"
        try:
            gate.mkdir()
        except FileExistsError:
            with contextlib.suppress(OSError):  # a worker that died while taking over
                if self.server_now() - gate.stat().st_mtime > self.lease_s:
                    gate.rmdir()
            return False
        try:
            with contextlib.suppress(FileNotFoundError):
                if self.server_now() - self._path(cell).stat().st_mtime <= self.lease_s:
                    return False  # its owner came back
                self._path(cell).unlink()
            return self._create(cell)
        finally:
            gate.rmdir()

    def _create(self, cell: str) -> bool:
        try:
            fd = os.open(self._path(cell), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            json.dump({"worker": self.worker, "since": time.time()}, f)
        with self._lock:
            self.held.add(cell)
        return True

    def release(self, cell: str) -> None:
        with self._lock:
            self.held.discard(cell)
        self._path(cell).unlink(missing_ok=True)

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.lease_s / 4):
            with self._lock:
                held = list(self.held)
            for cell in held:
                with contextlib.suppress(FileNotFoundError):
                    os.utime(self._path(cell))

    def close(self) -> None:
        self._stop.set()
        for cell in list(self.held):
            self.release(cell)
        self._clock.unlink(missing_ok=True)


def claimed_cells(out_dir: str | os.PathLike[str]) -> list[str]:
    """Cells some worker holds now (live or stale)."""
    d = Path(out_dir) / CLAIMS_DIR
    return sorted(p.name[: -len(".claim")] for p in d.glob("*.claim")) if d.is_dir() else []
