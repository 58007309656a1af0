"""Helpers shared by the local-model backends (hf, vllm): model folders, adapters, fingerprints, batching."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from perception_judge.core.schema import JudgeRequest, JudgeResult
from perception_judge.evaluation.base import error_result

log = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".safetensors", ".bin")
PROCESSOR_FILES = (
    "preprocessor_config.json",
    "processor_config.json",
    "tokenizer_config.json",
    "tokenizer.json",
    "chat_template.jinja",
    "chat_template.json",
)


def is_adapter_dir(path: str | Path) -> bool:
    return (Path(path) / "adapter_config.json").is_file()


def has_full_weights(path: str | Path) -> bool:
    p = Path(path)
    return (p / "config.json").is_file() and any(
        f.suffix in WEIGHT_SUFFIXES
        and not f.name.startswith(("adapter_", "optimizer", "scheduler", "rng_state"))
        for f in p.iterdir()
        if f.is_file()
    )


def has_processor(path: str | Path) -> bool:
    p = Path(path)
    return any((p / f).is_file() for f in PROCESSOR_FILES)


def processor_dir(model_path: str, adapter_path: str | None, processor: str | Path | None = None) -> str:
    """Where a local judge's processor is read from: ``processor``, else the adapter folder when it holds
    processor files, else the model folder."""
    return str(processor or (adapter_path if adapter_path and has_processor(adapter_path) else model_path))


def adapter_base(adapter_dir: str | Path) -> str | None:
    """``base_model_name_or_path`` recorded in an adapter's ``adapter_config.json``."""
    cfg = json.loads((Path(adapter_dir) / "adapter_config.json").read_text())
    return cfg.get("base_model_name_or_path")


def resolve_model(
    model: str | Path, adapter: str | Path | None = None, base_model: str | Path | None = None
) -> tuple[str, str | None]:
    """(base or full model folder, adapter folder or None). A ``model`` that is itself an adapter folder
    becomes the adapter, with the base from ``base_model`` or its ``adapter_config.json``."""
    model = str(model)
    if adapter is None and Path(model).is_dir() and is_adapter_dir(model):
        adapter, model = model, str(base_model or adapter_base(model) or "")
        if not model:
            raise ValueError(f"adapter {adapter!r} names no base model; pass base_model")
    elif base_model is not None and adapter is not None:
        model = str(base_model)
    if not Path(model).exists() and looks_local(model):
        raise FileNotFoundError(f"model folder {model!r} does not exist")
    if adapter is not None:
        if not is_adapter_dir(adapter):
            raise FileNotFoundError(f"{str(adapter)!r} is not a LoRA adapter folder (no adapter_config.json)")
        adapter = str(adapter)
    return model, adapter


def looks_local(name: str) -> bool:
    """Whether a model name is meant as a local folder (absolute, relative with ./ or ../, or no org/name form);
    anything else may be a Hub id that transformers resolves from its cache."""
    return name.startswith(("/", "./", "../", "~")) or name.count("/") != 1


def fingerprint(*folders: str | Path | None) -> str:
    """A cheap content fingerprint of the weight files in some folders: names, sizes, the first and last MiB."""
    h = hashlib.sha256()
    for folder in folders:
        if not folder or not Path(folder).is_dir():
            continue
        for f in sorted(Path(folder).iterdir()):
            if f.is_file() and (
                f.suffix in WEIGHT_SUFFIXES or f.name in ("config.json", "adapter_config.json")
            ):
                size = f.stat().st_size
                h.update(f"{f.name}:{size}".encode())
                with f.open("rb") as fh:
                    h.update(fh.read(1 << 20))
                    if size > 2 << 20:
                        fh.seek(-(1 << 20), 2)
                        h.update(fh.read())
    return h.hexdigest()[:16]


DEAD_AFTER = 8
"""Requests that fail one at a time in a row, after their batch failed, before the engine counts as dead."""


class BackendDead(RuntimeError):
    """The engine fails every request: the cell stops at once instead of retrying each request alone."""


def _looks_dead(e: BaseException) -> bool:
    return "EngineDead" in type(e).__name__ or "engine is dead" in str(e).lower()


def run_batches(
    items: Sequence[tuple[int, JudgeRequest, Any]],
    batch_size: int,
    generate: Callable[[list[tuple[int, JudgeRequest, Any]]], list[JudgeResult]],
    progress: Any = None,
    _failed_in_a_row: list[int] | None = None,
) -> dict[int, JudgeResult]:
    """Run ``generate`` on batches; when a batch raises, retry its requests one at a time, so one bad request
    only fails itself (its result carries the error). Returns ``{index: result}``.

    A dead engine fails every request: when :data:`DEAD_AFTER` lone requests fail in a row (or the engine says
    it is dead), :class:`BackendDead` is raised at once instead of trying each remaining request alone."""
    streak = _failed_in_a_row if _failed_in_a_row is not None else [0]
    out: dict[int, JudgeResult] = {}
    for start in range(0, len(items), batch_size):
        batch = list(items[start : start + batch_size])
        try:
            results = generate(batch)
        except Exception as e:  # isolate the failing request below
            if _looks_dead(e):
                raise BackendDead(f"the engine died: {type(e).__name__}: {e}") from e
            if len(batch) == 1:
                idx, req, _ = batch[0]
                log.warning("request %s failed: %s: %s", req.request_id, type(e).__name__, e)
                out[idx] = error_result(req, f"{type(e).__name__}: {e}")
                streak[0] += 1
                if streak[0] >= DEAD_AFTER:
                    raise BackendDead(
                        f"{streak[0]} requests failed one after another when run alone (last: "
                        f"{type(e).__name__}: {e}); the engine is probably dead"
                    ) from e
                results = None
            else:
                log.warning(
                    "a batch of %d failed (%s: %s); retrying one at a time", len(batch), type(e).__name__, e
                )
                out.update(run_batches(batch, 1, generate, _failed_in_a_row=streak))
                results = None
        if results is not None:
            streak[0] = 0
            for (idx, _, _), res in zip(batch, results):
                out[idx] = res
        if progress is not None:
            progress.update(len(batch))
    return out
