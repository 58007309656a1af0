"""The PPJD build loop: source -> load -> pre-check -> teacher -> answers -> validate -> store (docs/ppjd.md §5).

:func:`make_record` is the step of one item: a record or a failure (an :class:`Outcome`), nothing written.
:class:`Builder` runs it over a source: a producer feeds a bounded queue with the keys still to build, the teacher's
``concurrency`` workers take each item through the step and the builder writes its outcome. SIGINT / SIGTERM give
the items in flight ``stop_grace_s`` to finish (then they stay pending); a fatal teacher error, too many teacher
failures in a row or our own output failing to write stop the run at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from perception_judge.core.images import ImageError, image_bytes, load_image, read_image_file
from perception_judge.core.io import now, progress_bar
from perception_judge.core.redact import redact_text
from perception_judge.core.schema import Failure, PPJDRecord, SourceItem
from perception_judge.llm_client import RETRYABLE_REASONS
from perception_judge.ppjd.options import BuildOptions
from perception_judge.ppjd.partition import part_of
from perception_judge.ppjd.sources import Source, item_key
from perception_judge.ppjd.store import DAMAGED_FILE, PPJDStore
from perception_judge.ppjd.teacher import StageError, Teacher, TeacherInput
from perception_judge.ppjd.validate import precheck, validate


@dataclass
class BuildSummary:
    status: str = "running"  # complete | failed | incomplete | interrupted | aborted
    out_dir: str = ""
    teacher: str = ""
    seen: int = 0
    records_new: int = 0
    failed_new: int = 0
    skipped_done: int = 0
    skipped_failed: int = 0
    duplicates: int = 0
    other_parts: int = 0  # items of the other parts of a partitioned build
    in_flight_lost: int = 0
    pending: int = 0  # items the teacher did not answer for (a transport fault): the next run builds them
    records_total: int = 0
    failed_total: int = 0
    failures_by_reason: dict[str, int] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0
    records_per_s: float = 0.0
    abort_reason: str = ""
    scan: dict[str, Any] = field(default_factory=dict)


class _Abort(Exception):
    pass


def _transport(reason: str) -> bool:  # no answer from the teacher (connection, timeout, 5xx, 429)
    return reason.removeprefix("llm_") in RETRYABLE_REASONS


def load_item_image(item: SourceItem, options: BuildOptions) -> tuple[bytes, str, Image.Image] | None:
    """(original bytes, file extension, RGB image) of an item, or None for a text-only item. Raises
    StageError(load, image_<reason>) for missing, corrupt, oversized or escaping images."""
    if err := item.meta.get("image_error"):
        if err.get("reason") == "missing_field":
            raise StageError("precheck", "missing_fields", err.get("detail", "no image"))
        raise StageError("load", f"image_{err.get('reason', 'error')}", err.get("detail", ""))
    src = item.image
    if src is None:
        return None
    try:
        if isinstance(src, Image.Image):
            image = load_image(src, max_pixels=options.max_image_pixels)
            return image_bytes(image, "PNG"), "png", image
        if isinstance(src, str | os.PathLike):
            src = read_image_file(Path(src), options.max_image_bytes)
        if not isinstance(src, bytes | bytearray | memoryview):
            raise ImageError("bad_path", f"unsupported image value {type(src).__name__}")
        data = bytes(src)
        image = load_image(data, max_bytes=options.max_image_bytes, max_pixels=options.max_image_pixels)
        with Image.open(io.BytesIO(data)) as probe:
            ext = "jpg" if probe.format == "JPEG" else (probe.format or "bin").lower()
        return data, ext, image
    except ImageError as e:
        raise StageError("load", f"image_{e.reason}", e.detail) from None
    except OSError as e:
        raise StageError("load", "image_unreadable", f"{type(e).__name__}: {e}") from None


@dataclass
class Outcome:
    """What :func:`make_record` made of one item: a record (its image still to store) or a failure."""

    key: str
    item: SourceItem
    record: PPJDRecord | None = None
    image: tuple[bytes, str] | None = None  # the original bytes and extension, stored before the record
    failure: StageError | None = None


async def make_record(key: str, item: SourceItem, teacher: Teacher, options: BuildOptions) -> Outcome:
    """One item through load, pre-check, the teacher and validation; writes nothing. An exception of the teacher
    other than StageError fails the item as ``teacher/exception``."""
    try:
        if item.meta.get("row_error"):
            raise StageError("source", "bad_row", str(item.meta["row_error"])[:300])
        loaded = load_item_image(item, options)
        precheck(item, loaded is not None, options)
        cf = await teacher.process(TeacherInput(key, item, loaded[2] if loaded else None))
        checked = validate(item, cf, options)
    except StageError as e:
        return Outcome(key, item, failure=e)
    except Exception as e:
        return Outcome(key, item, failure=StageError("teacher", "exception", f"{type(e).__name__}: {e}"))
    meta: dict[str, Any] = {
        "similarity_rp": checked.similarity_rp,
        "usage": cf.usage,
        "teacher_meta": cf.meta,
        "source_meta": {k: v for k, v in item.meta.items() if k != "image_ref"},
        **({"spec": item.spec} if item.spec is not None else {}),
    }
    record = PPJDRecord(
        key=key,
        item_id=item.item_id,
        source=item.source,
        question=item.question,
        answer=item.answer,
        r_c=item.response,
        r_rp=cf.r_rp,
        r_rp_r=cf.r_rp_r,
        answer_rp=checked.answer_rp,
        answer_rp_r=checked.answer_rp_r,
        attributes=list(cf.attributes),
        teacher=teacher.name,
        meta=meta,
    )
    return Outcome(key, item, record, loaded[:2] if loaded else None)


class Builder:
    """One run of the build over ``source`` with ``teacher`` into ``options.out`` (see the module docstring);
    ``handle_signals`` installs the SIGINT / SIGTERM handlers."""

    def __init__(
        self, source: Source, teacher: Teacher, options: BuildOptions, handle_signals: bool = False
    ) -> None:
        if not options.out:
            raise ValueError("no output folder (options.out)")
        self.source, self.teacher, self.options = source, teacher, options
        self.concurrency = options.concurrency or teacher.concurrency
        self.handle_signals = handle_signals
        self.store = PPJDStore(options.out, shard_size=options.shard_size, fsync_every=options.fsync_every)
        self.summary = BuildSummary(out_dir=str(options.out), teacher=teacher.name)
        self.redact = getattr(getattr(teacher, "client", None), "redact", None) or redact_text
        self.reasons: Counter[str] = Counter()
        self.consecutive = self.in_flight = 0
        self.tasks: list[asyncio.Task[Any]] = []
        self.run_info: dict[str, Any] = {}
        self.runs: list[dict[str, Any]] = []
        self.last_manifest = time.monotonic()

    def _open(self) -> None:
        """Open the folder, say what its scan repaired, and record this run in the manifest."""
        self.summary.scan = scan = asdict(self.store.open())
        if scan["manifest_rebuilt"]:
            what = "rebuilding it from the shards (the history of earlier runs is lost)"
            print(f"build-ppjd: {scan['manifest_rebuilt']}: {what}", file=sys.stderr, flush=True)
        if n := scan["corrupt_lines"]:
            what = f"set aside in {DAMAGED_FILE}; their records are built again in this run"
            print(f"build-ppjd: {n} damaged line(s) {what}", file=sys.stderr, flush=True)
        hidden = {"out", "progress", "stop_grace_s"}
        self.run_info = {
            "started": now(),
            "status": "running",
            "teacher": self.teacher.describe(),
            "source": self.source.describe(),
            "config": self.options.model_dump(exclude=hidden) | {"concurrency": self.concurrency},
            "pid": os.getpid(),
        }
        self.runs = list(self.store.manifest.get("runs", []))
        for r in self.runs:
            if r.get("status") == "running":
                r["status"] = "interrupted"  # that process died without closing
        self.runs.append(self.run_info)
        self.store.write_manifest(runs=self.runs, teacher=self.teacher.name, source=self.source.describe())

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Our own output could not be written (a full disk, a read-only mount): never the item's fault. The run
        stops, every record already written stays, the item stays pending for the next run."""
        try:
            yield
        except OSError as e:
            what = "disk full" if e.errno == errno.ENOSPC else f"{type(e).__name__}: {e.strerror or e}"
            raise self._abort(
                f"cannot write to the output folder {str(self.options.out)!r} ({what}); every record written so "
                "far is kept and the run resumes where it stopped once the folder is writable again"
            ) from None

    def _abort(self, reason: str) -> _Abort:
        self.summary.abort_reason = reason
        self.stop.set()
        return _Abort(reason)

    def _write_manifest(self, status: str) -> None:
        counted = ("records_new", "failed_new", "pending", "skipped_done", "skipped_failed", "duplicates")
        summary = {k: getattr(self.summary, k) for k in (*counted, "other_parts")}
        summary["usage"] = self.teacher.usage()
        self.run_info |= {"status": status, "summary": summary, "updated": now()}
        with self._writing():
            self.store.write_manifest(runs=self.runs)
        self.last_manifest = time.monotonic()

    def _fail(self, key: str, item: SourceItem, e: StageError) -> None:
        detail = self.redact(e.detail)[:1000]
        with self._writing():
            self.store.append_failure(Failure(key, item.item_id, e.stage, e.reason, detail, e.attempts))
        self.summary.failed_new += 1
        self.reasons[f"{e.stage}/{e.reason}"] += 1

    async def _write(self, out: Outcome) -> None:
        """Store an outcome (the image, then the record; or the failure) and count it. A fatal teacher error, or
        too many teacher-call failures in a row, stops the run."""
        if (e := out.failure) is None:
            assert out.record is not None
            with self._writing():
                if out.image is not None:  # a new image file is fsynced: off the event loop
                    out.record.image, out.record.image_sha256 = await asyncio.to_thread(
                        self.store.put_image, *out.image
                    )
                self.store.append_record(out.record)
            self.summary.records_new += 1
            self.consecutive = 0
            return
        if e.fatal:
            raise self._abort(f"{e.stage}/{e.reason}: {self.redact(e.detail)[:300]}")
        if _transport(e.reason):  # not the item's fault: the same command builds it once the teacher answers
            self.summary.pending += 1
            self.reasons[f"{e.stage}/{e.reason} (left pending)"] += 1
        else:
            self._fail(out.key, out.item, e)
        teacher = e.stage in ("verify", "attributes", "rewrite", "teacher") and e.reason != "rc_rejected"
        self.consecutive = self.consecutive + 1 if teacher else 0
        if teacher and self.consecutive == self.options.max_consecutive_failures:  # once
            last = f"{e.stage}/{e.reason}: {self.redact(e.detail)[:120]}"
            self._abort(
                f"{self.consecutive} items in a row failed at the teacher (last: {last}); is the server up, and "
                "does the model reply with the JSON asked for?"
            )

    async def _item(self, key: str, item: SourceItem, progress: Any) -> None:
        out = await make_record(key, item, self.teacher, self.options)
        try:
            await self._write(out)
        except _Abort:
            raise
        except Exception as e:  # a record that cannot be stored (not JSON, say): this item only
            self._fail(key, item, StageError("store", "exception", f"{type(e).__name__}: {e}"))
        progress.set_postfix_str(f"done={self.summary.records_new}, failed={self.summary.failed_new}", False)
        progress.update(1)
        if time.monotonic() - self.last_manifest >= self.options.manifest_every_s:
            with contextlib.suppress(_Abort):  # stop is set; the final manifest write tries again
                self._write_manifest("running")

    def _wanted(self, key: str, taken: set[str]) -> bool | None:
        """Whether this run builds ``key`` (counting why not); None once ``limit`` new keys are taken."""
        o, s = self.options, self.summary
        if o.num_parts > 1 and part_of(key, o.num_parts) != (o.part or 0):
            s.other_parts += 1
        elif key in self.store.done:
            s.skipped_done += 1
        elif key in taken:
            s.duplicates += 1
        elif key in self.store.failed and not (o.retry_failed or _transport(self.store.failed[key][1])):
            s.skipped_failed += 1
        elif o.limit is not None and len(taken) >= o.limit:
            return None
        else:
            return True
        return False

    async def _produce(self, queue: asyncio.Queue[tuple[str, SourceItem] | None]) -> None:
        taken: set[str] = set()
        try:
            for item in self.source:
                if self.stop.is_set():
                    break
                self.summary.seen += 1
                key = item_key(item)
                if (wanted := self._wanted(key, taken)) is None:
                    break
                if wanted:
                    taken.add(key)
                    await queue.put((key, item))
        except asyncio.CancelledError:
            raise  # the workers are being cancelled too: no end markers (the queue may be full)
        except BaseException:
            for _ in range(self.concurrency):
                await queue.put(None)
            raise
        for _ in range(self.concurrency):
            await queue.put(None)

    async def _work(self, queue: asyncio.Queue[tuple[str, SourceItem] | None], progress: Any) -> None:
        while (job := await queue.get()) is not None:
            if self.stop.is_set():
                continue  # drain: an item not started yet is picked up by the next run
            self.in_flight += 1
            try:
                await self._item(*job, progress)
            except _Abort:
                pass  # stop is set; keep draining the queue
            except asyncio.CancelledError:
                self.summary.in_flight_lost += 1
                raise
            finally:
                self.in_flight -= 1

    def _cancel_in_flight(self) -> None:
        for t in self.tasks:
            t.cancel()

    def _on_signal(self) -> None:
        if self.stop.is_set():
            self._cancel_in_flight()
            return
        grace = self.options.stop_grace_s
        message = (
            f"\nbuild-ppjd: stopping; {self.in_flight} item(s) in flight get {grace:g} s to finish (signal again to "
            "abort them now; unfinished items stay pending)"
        )
        print(message, file=sys.stderr, flush=True)
        self.summary.abort_reason = self.summary.abort_reason or "interrupted"
        self.stop.set()
        asyncio.get_running_loop().call_later(grace, self._cancel_in_flight)

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        loop, installed = asyncio.get_running_loop(), []
        for sig in (signal.SIGINT, signal.SIGTERM) if self.handle_signals else ():
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self._on_signal)
                installed.append(sig)
        try:
            yield
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    async def run(self) -> BuildSummary:
        """Build (resumable): every item ends as a record or a failure, or stays pending when the run stops."""
        started, self.stop = time.monotonic(), asyncio.Event()
        self._open()
        o, total = self.options, self.source.estimate_count()  # total: the items left, when the source knows
        if total is not None:
            total = max(0, total - len(self.store.done) - (0 if o.retry_failed else len(self.store.failed)))
            total = total if o.limit is None else min(total, o.limit)
        progress = progress_bar(total, "build-ppjd", "rec", enabled=o.progress, smoothing=0.1)
        queue: asyncio.Queue[tuple[str, SourceItem] | None] = asyncio.Queue(maxsize=self.concurrency * 2)
        status = "interrupted"
        try:
            with self._signals():
                self.tasks = [asyncio.create_task(self._produce(queue))]
                self.tasks += [
                    asyncio.create_task(self._work(queue, progress)) for _ in range(self.concurrency)
                ]
                results = await asyncio.gather(*self.tasks, return_exceptions=True)
            for r in results:
                if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
                    raise r
            if self.summary.abort_reason and self.summary.abort_reason != "interrupted":
                status = "aborted"
            elif not self.stop.is_set() and not any(isinstance(r, asyncio.CancelledError) for r in results):
                status, self.summary.abort_reason = self._outcome()
        finally:
            self._cancel_in_flight()
            progress.close()
            self._finish(status, started)
        return self.summary

    def _outcome(self) -> tuple[str, str]:
        """``complete``, or why a run that went through its items did not do what it was asked."""
        s, rate = self.summary, self.options.max_failure_rate
        if s.pending:
            return "incomplete", f"{s.pending} item(s) left pending: the teacher did not answer; run it again"
        if (tried := s.records_new + s.failed_new) and (not s.records_new or s.failed_new > rate * tried):
            return "failed", f"{s.failed_new} of {tried} items failed (--max-failure-rate {rate:g})"
        return "complete", ""

    def _finish(self, status: str, started: float) -> None:
        s = self.summary
        s.status, s.elapsed_s = status, round(time.monotonic() - started, 3)
        s.records_per_s = round((s.records_new + s.failed_new) / s.elapsed_s, 3) if s.elapsed_s > 0 else 0.0
        s.records_total, s.failed_total = len(self.store.done), len(self.store.failed)
        s.failures_by_reason = dict(sorted(self.reasons.items(), key=lambda kv: (-kv[1], kv[0])))
        s.usage = self.teacher.usage()
        self.run_info.update(finished=now(), elapsed_s=s.elapsed_s, abort_reason=s.abort_reason)
        try:
            with self._writing():
                self.store.sync()
            self._write_manifest(status)
        except _Abort:  # the records are on disk; only the run's bookkeeping could not be written
            s.status = "aborted"
        finally:
            try:
                with self._writing():
                    self.store.close()
            except _Abort:
                s.status = "aborted"


def build(
    source: Source, teacher: Teacher, options: BuildOptions, handle_signals: bool = False
) -> BuildSummary:
    """Run a :class:`Builder` to the end (closes the teacher at the end)."""

    async def main() -> BuildSummary:
        try:
            return await Builder(source, teacher, options, handle_signals).run()
        finally:
            await teacher.aclose()

    return asyncio.run(main())


def format_summary(summary: BuildSummary) -> str:
    """A plain-text summary table (what the CLI prints at the end)."""
    reason = f" ({summary.abort_reason})" if summary.abort_reason not in ("", summary.status) else ""
    rows = [
        ("status", summary.status + reason),
        ("teacher", summary.teacher),
        ("records written this run", summary.records_new),
        ("failed this run", summary.failed_new),
        ("skipped: already done", summary.skipped_done),
        ("skipped: failed before (use --retry-failed)", summary.skipped_failed),
        ("duplicates in the source", summary.duplicates),
        *([("items of other parts (not this one)", summary.other_parts)] if summary.other_parts else []),
        ("in flight when stopped", summary.in_flight_lost),
        ("left pending (no answer from the teacher)", summary.pending),
        ("records in the folder", summary.records_total),
        ("failed keys in the folder", summary.failed_total),
        ("elapsed", f"{summary.elapsed_s:.1f} s ({summary.records_per_s:.2f} items/s)"),
    ]
    u = summary.usage or {}
    if u.get("requests"):
        usage = (
            f"{u.get('requests', 0)} requests, {u.get('retries', 0)} retries, {u.get('failures', 0)} failed; "
            f"{u.get('prompt_tokens', 0):,} prompt + {u.get('completion_tokens', 0):,} completion tokens"
        )
        rows.append(("teacher usage", usage))
    if summary.scan.get("torn_lines_repaired"):
        rows.append(("torn lines repaired on open", summary.scan["torn_lines_repaired"]))
    width = max(len(r[0]) for r in rows)
    lines = ["build-ppjd summary", *(f"  {name.ljust(width)}  {value}" for name, value in rows)]
    if summary.failures_by_reason:
        lines.append("  failures this run by stage/reason:")
        lines += [f"    {reason:<40} {n}" for reason, n in summary.failures_by_reason.items()]
    return "\n".join(lines)
