"""The PPJD build loop: source -> load -> pre-check -> teacher -> answers -> validate -> store (docs/ppjd.md §5).

A producer feeds a bounded queue with the keys not done yet (nor failed, unless ``retry_failed``); ``concurrency``
workers take each item through all stages to a record or a failure. SIGINT / SIGTERM give the items in flight
``stop_grace_s`` to finish, then cancel them (they stay pending); a fatal teacher error, ``max_consecutive_failures``
teacher failures in a row or our own output failing to write stop the run at once.
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

from perception_judge.core.images import (
    DEFAULT_MAX_IMAGE_BYTES,
    DEFAULT_MAX_IMAGE_PIXELS,
    ImageError,
    image_bytes,
    load_image,
    read_image_file,
)
from perception_judge.core.io import now, progress_bar
from perception_judge.core.schema import Failure, PPJDRecord, SourceItem
from perception_judge.ppjd.partition import part_of
from perception_judge.ppjd.sources import Source, item_key
from perception_judge.ppjd.store import PPJDStore
from perception_judge.ppjd.teacher import StageError, Teacher, TeacherInput
from perception_judge.ppjd.validate import PrecheckConfig, ValidationConfig, precheck, validate


@dataclass
class BuildConfig:
    out_dir: str
    concurrency: int = 16
    retry_failed: bool = False
    limit: int | None = None  # at most this many new items this run
    shard_size: int = 5000
    fsync_every: int = 32
    manifest_every_s: float = 10.0
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    max_consecutive_failures: int = 200  # transient teacher failures in a row before the run stops
    precheck: PrecheckConfig = field(default_factory=PrecheckConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    progress: bool | None = None  # None: a bar when stderr is a terminal, periodic log lines otherwise
    handle_signals: bool = False
    stop_grace_s: float = 10.0  # after SIGINT/SIGTERM: seconds the items in flight get before cancellation
    # a build split across machines: this run takes the keys with int(key, 16) % num_parts == part
    num_parts: int = 1
    part: int = 0

    def __post_init__(self) -> None:
        if self.num_parts < 1 or not 0 <= self.part < self.num_parts:
            raise ValueError(f"part must be in 0..{self.num_parts - 1}, got {self.part}")
        if self.stop_grace_s < 0:
            raise ValueError(f"stop_grace_s must be >= 0, got {self.stop_grace_s}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.limit is not None and self.limit < 0:
            raise ValueError("limit must be >= 0")


@dataclass
class BuildSummary:
    status: str = "running"  # complete | interrupted | aborted
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


def load_item_image(item: SourceItem, config: BuildConfig) -> tuple[bytes, str, Image.Image] | None:
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
            image = load_image(src, max_pixels=config.max_image_pixels)
            return image_bytes(image, "PNG"), "png", image
        if isinstance(src, str | os.PathLike):
            src = read_image_file(Path(src), config.max_image_bytes)
        if not isinstance(src, bytes | bytearray | memoryview):
            raise ImageError("bad_path", f"unsupported image value {type(src).__name__}")
        data = bytes(src)
        image = load_image(data, max_bytes=config.max_image_bytes, max_pixels=config.max_image_pixels)
        with Image.open(io.BytesIO(data)) as probe:
            ext = "jpg" if probe.format == "JPEG" else (probe.format or "bin").lower()
        return data, ext, image
    except ImageError as e:
        raise StageError("load", f"image_{e.reason}", e.detail) from None
    except OSError as e:
        raise StageError("load", "image_unreadable", f"{type(e).__name__}: {e}") from None


class _Progress:
    """A tqdm bar on a terminal, a log line every 30 s otherwise."""

    def __init__(self, enabled: bool | None, total: int | None) -> None:
        tty = sys.stderr.isatty() if enabled is None else enabled
        self.bar = progress_bar(total, "build-ppjd", "rec", enabled=True, smoothing=0.1) if tty else None
        self.started = self.last_log = time.monotonic()
        self.total = total

    def update(self, done: int, failed: int) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(done=done, failed=failed, refresh=False)
            return
        now = time.monotonic()
        if now - self.last_log >= 30:
            self.last_log = now
            rate = (done + failed) / max(now - self.started, 1e-9)
            eta = f", ETA {max(0, self.total - done - failed) / max(rate, 1e-9):.0f} s" if self.total else ""
            line = f"build-ppjd: {done} done, {failed} failed, {rate:.2f} rec/s{eta}"
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


async def run_build(source: Source, teacher: Teacher, config: BuildConfig) -> BuildSummary:
    """Build PPJD records from ``source`` with ``teacher`` into ``config.out_dir`` (resumable)."""
    summary = BuildSummary(out_dir=str(config.out_dir), teacher=teacher.name)
    started = time.monotonic()
    store = PPJDStore(config.out_dir, shard_size=config.shard_size, fsync_every=config.fsync_every)
    summary.scan = asdict(store.open())
    redact = getattr(getattr(teacher, "client", None), "redact", None) or (lambda s: s)
    stop = asyncio.Event()
    reasons: Counter[str] = Counter()
    state = {"consecutive": 0, "in_flight": 0, "last_manifest": time.monotonic()}
    hidden = ("out_dir", "handle_signals", "progress", "stop_grace_s")
    run_info: dict[str, Any] = {
        "started": now(),
        "status": "running",
        "teacher": teacher.describe(),
        "source": source.describe(),
        "config": {k: v for k, v in asdict(config).items() if k not in hidden},
        "pid": os.getpid(),
    }
    runs = list(store.manifest.get("runs", []))
    for r in runs:
        if r.get("status") == "running":
            r["status"] = "interrupted"  # that process died without closing
    runs.append(run_info)
    store.write_manifest(runs=runs, teacher=teacher.name, source=source.describe())

    total = source.estimate_count()
    if total is not None:
        total = max(0, total - len(store.done) - (0 if config.retry_failed else len(store.failed)))
        total = total if config.limit is None else min(total, config.limit)
    progress = _Progress(config.progress, total)
    queue: asyncio.Queue[tuple[str, SourceItem] | None] = asyncio.Queue(maxsize=config.concurrency * 2)

    def abort(reason: str) -> _Abort:
        summary.abort_reason = reason
        stop.set()
        return _Abort(reason)

    @contextlib.contextmanager
    def writing() -> Iterator[None]:
        """Our own output could not be written (a full disk, a read-only mount): never the item's fault. The run
        stops, every record already written stays, the item stays pending for the next run."""
        try:
            yield
        except OSError as e:
            what = "disk full" if e.errno == errno.ENOSPC else f"{type(e).__name__}: {e.strerror or e}"
            raise abort(
                f"cannot write to the output folder {str(config.out_dir)!r} ({what}); every record written so far "
                "is kept and the run resumes where it stopped once the folder is writable again"
            ) from None

    def write_manifest(status: str) -> None:
        counted = ("records_new", "failed_new", "skipped_done", "skipped_failed", "duplicates", "other_parts")
        run_info["status"] = status
        run_info["summary"] = {k: getattr(summary, k) for k in counted} | {"usage": teacher.usage()}
        run_info["updated"] = now()
        with writing():
            store.write_manifest(runs=runs)
        state["last_manifest"] = time.monotonic()

    def fail(key: str, item: SourceItem, e: StageError) -> None:
        with writing():
            store.append_failure(
                Failure(key, item.item_id, e.stage, e.reason, redact(e.detail)[:1000], e.attempts)
            )
        summary.failed_new += 1
        reasons[f"{e.stage}/{e.reason}"] += 1

    async def process(key: str, item: SourceItem) -> None:
        try:
            if item.meta.get("row_error"):
                raise StageError("source", "bad_row", str(item.meta["row_error"])[:300])
            loaded = load_item_image(item, config)
            precheck(item, loaded is not None, config.precheck)
            cf = await teacher.process(TeacherInput(key, item, loaded[2] if loaded else None))
            checked = validate(item, cf, config.validation)
            image_rel = image_sha = None
            if loaded is not None:
                with writing():  # a new image file is fsynced: off the event loop, so other items keep moving
                    image_rel, image_sha = await asyncio.to_thread(store.put_image, loaded[0], loaded[1])
            meta: dict[str, Any] = {
                "similarity_rp": checked.similarity_rp,
                "usage": cf.usage,
                "teacher_meta": cf.meta,
                "source_meta": {k: v for k, v in item.meta.items() if k != "image_ref"},
            }
            if item.spec is not None:
                meta["spec"] = item.spec
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
                image=image_rel,
                image_sha256=image_sha,
                teacher=teacher.name,
                meta=meta,
            )
            with writing():
                store.append_record(record)
            summary.records_new += 1
            state["consecutive"] = 0
        except StageError as e:
            if e.fatal:
                raise abort(f"{e.stage}/{e.reason}: {redact(e.detail)[:300]}") from None
            fail(key, item, e)
            llm = e.reason.startswith("llm_")
            state["consecutive"] = state["consecutive"] + 1 if llm else 0
            if llm and state["consecutive"] >= config.max_consecutive_failures:
                n, last = state["consecutive"], f"{e.stage}/{e.reason}"
                abort(f"{n} teacher calls in a row failed (last: {last}); is the server up?")
        except _Abort:
            raise
        except Exception as e:
            fail(key, item, StageError("teacher", "exception", f"{type(e).__name__}: {e}"))
        progress.update(summary.records_new, summary.failed_new)
        if time.monotonic() - state["last_manifest"] >= config.manifest_every_s:
            with contextlib.suppress(_Abort):  # stop is set; the final manifest write tries again
                write_manifest("running")

    async def producer() -> None:
        seen_keys: set[str] = set()
        try:
            for item in source:
                if stop.is_set():
                    break
                summary.seen += 1
                key = item_key(item)
                if config.num_parts > 1 and part_of(key, config.num_parts) != config.part:
                    summary.other_parts += 1
                elif key in store.done:
                    summary.skipped_done += 1
                elif key in seen_keys:
                    summary.duplicates += 1
                elif key in store.failed and not config.retry_failed:
                    summary.skipped_failed += 1
                elif config.limit is not None and len(seen_keys) >= config.limit:
                    break
                else:
                    seen_keys.add(key)
                    await queue.put((key, item))
        except asyncio.CancelledError:
            raise  # the workers are being cancelled too: no end markers (the queue may be full)
        except BaseException:
            for _ in range(config.concurrency):
                await queue.put(None)
            raise
        for _ in range(config.concurrency):
            await queue.put(None)

    async def worker() -> None:
        while (job := await queue.get()) is not None:
            if stop.is_set():
                continue  # drain: an item not started yet is picked up by the next run
            state["in_flight"] += 1
            try:
                await process(*job)
            except _Abort:
                pass  # stop is set; keep draining the queue
            except asyncio.CancelledError:
                summary.in_flight_lost += 1
                raise
            finally:
                state["in_flight"] -= 1

    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[Any]] = []
    signals_installed: list[int] = []

    def cancel_in_flight() -> None:
        for t in tasks:
            t.cancel()

    def on_signal() -> None:
        if stop.is_set():
            cancel_in_flight()
            return
        message = (
            f"\nbuild-ppjd: stopping; {state['in_flight']} item(s) in flight get {config.stop_grace_s:g} s to "
            "finish (signal again to abort them now; unfinished items stay pending)"
        )
        print(message, file=sys.stderr, flush=True)
        summary.abort_reason = summary.abort_reason or "interrupted"
        stop.set()
        loop.call_later(config.stop_grace_s, cancel_in_flight)

    for sig in (signal.SIGINT, signal.SIGTERM) if config.handle_signals else ():
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal)
            signals_installed.append(sig)
    status = "interrupted"
    try:
        tasks = [asyncio.create_task(producer())] + [
            asyncio.create_task(worker()) for _ in range(config.concurrency)
        ]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        cancelled = any(isinstance(r, asyncio.CancelledError) for r in results)
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
                raise r
        if summary.abort_reason and summary.abort_reason != "interrupted":
            status = "aborted"
        elif not stop.is_set() and not cancelled:
            status = "complete"
    finally:
        for sig in signals_installed:
            loop.remove_signal_handler(sig)
        cancel_in_flight()
        progress.close()
        summary.status = status
        summary.elapsed_s = round(time.monotonic() - started, 3)
        n = summary.records_new + summary.failed_new
        summary.records_per_s = round(n / summary.elapsed_s, 3) if summary.elapsed_s > 0 else 0.0
        summary.records_total, summary.failed_total = len(store.done), len(store.failed)
        summary.failures_by_reason = dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
        summary.usage = teacher.usage()
        run_info.update(finished=now(), elapsed_s=summary.elapsed_s, abort_reason=summary.abort_reason)
        try:
            with writing():
                store.sync()
            write_manifest(status)
        except _Abort:  # the records are on disk; only the run's bookkeeping could not be written
            summary.status = "aborted"
        finally:
            try:
                with writing():
                    store.close()
            except _Abort:
                summary.status = "aborted"
    return summary


def build(source: Source, teacher: Teacher, config: BuildConfig) -> BuildSummary:
    """Synchronous wrapper around :func:`run_build` (closes the teacher at the end)."""

    async def main() -> BuildSummary:
        try:
            return await run_build(source, teacher, config)
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
