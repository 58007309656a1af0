"""What the local-model backends (hf, vllm) share: model folders, adapters, weight fingerprints, the think
prefill, batching."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from perception_judge.core.images import PixelPolicy, pixel_policy_conflict, processor_pixel_bounds
from perception_judge.core.options import Options
from perception_judge.core.protocol import THINK_PREFIX, opens_think_block
from perception_judge.core.schema import JudgeRequest, JudgeResult
from perception_judge.evaluation.base import JudgeBackend, error_result, parse_result

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


def has_processor(path: str | Path) -> bool:
    return any((Path(path) / f).is_file() for f in PROCESSOR_FILES)


def adapter_config(adapter_dir: str | Path) -> dict[str, Any]:
    """A LoRA adapter's ``adapter_config.json`` (``base_model_name_or_path``, ``r``, ``target_modules``, ...)."""
    return json.loads((Path(adapter_dir) / "adapter_config.json").read_text())


def check_folder(path: str | Path, marker: str = "config.json", hub: bool = True) -> None:
    """Refuse what ``from_pretrained`` could not load, naming it: a file, a folder without ``marker``, a local path
    that is not there; a name shaped ``org/name`` (with ``hub``) is a Hub id that transformers and vLLM download, or
    with HF_HUB_OFFLINE set read from the Hugging Face cache (there it must be in the cache)."""
    path, what = str(path), "LoRA adapter" if marker == "adapter_config.json" else "model"
    if (p := Path(path).expanduser()).exists():
        if not (p / marker).is_file():
            raise FileNotFoundError(
                f"{path!r} is not a {what} folder ({f'no {marker}' if p.is_dir() else 'a file'})"
            )
    elif not hub or path.startswith(("/", ".", "~")) or path.count("/") != 1:
        raise FileNotFoundError(f"{what} folder {path!r} does not exist")
    else:
        from huggingface_hub import is_offline_mode, try_to_load_from_cache

        if is_offline_mode() and not isinstance(try_to_load_from_cache(path, marker), str):
            raise FileNotFoundError(
                f"{path!r}: no such folder, nor a Hub model in the cache (HF_HUB_OFFLINE is set)"
            )


def resolve_model(
    model: str | Path, adapter: str | Path | None = None, base_model: str | Path | None = None
) -> tuple[str, str | None]:
    """(base or full model folder, adapter folder or None), each checked by :func:`check_folder`. A ``model`` that is
    itself an adapter folder becomes the adapter, with the base from ``base_model`` or its ``adapter_config.json``."""
    model = str(model)
    if adapter is None and Path(model).is_dir() and is_adapter_dir(model):
        adapter, model = model, str(base_model or adapter_config(model).get("base_model_name_or_path") or "")
        if not model:
            raise ValueError(f"adapter {adapter!r} names no base model; pass base_model")
    elif base_model is not None and adapter is not None:
        model = str(base_model)
    check_folder(model)
    if adapter is not None:
        check_folder(adapter, "adapter_config.json", hub=False)
    return model, None if adapter is None else str(adapter)


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


PathText = Annotated[str | None, BeforeValidator(lambda v: str(v) if isinstance(v, Path) else v)]


class LocalOptions(Options):
    """The folders of a local judge (a sweep fills ``model``, ``adapter`` and ``processor`` per checkpoint): ``model``
    (a full model, or an adapter folder whose base comes from ``base_model`` or its config), an optional LoRA
    ``adapter``, the ``processor`` folder (default: the adapter folder when it holds processor files, else the
    model folder); requests per ``generate`` call; the judge's name in results."""

    model: PathText = None
    adapter: PathText = None
    base_model: PathText = None
    processor: PathText = None
    batch_size: int = Field(8, ge=1)
    label: str | None = None


class LocalBackend(JudgeBackend):
    """A judge whose weights are local folders (:class:`LocalOptions`), rendering with the think prefix."""

    seeding = ""

    @classmethod
    def judge_keys(cls, spec: Mapping[str, Any], name: str, given: set[str]) -> dict[str, Any]:
        return dict(spec)  # its folders, whatever the job's backend block says

    @classmethod
    def check_judge(cls, spec: Mapping[str, Any], options: Options) -> None:
        resolve_model(spec.get("model") or "", spec.get("adapter"), spec.get("base_model"))

    def __init__(
        self, opts: LocalOptions, pixel_policy: PixelPolicy | dict | None, think_prefix: str
    ) -> None:
        from transformers import AutoProcessor

        super().__init__(pixel_policy)
        if not opts.model:
            raise ValueError(f"the {self.name} backend needs a model folder (option model)")
        self.model_path, self.adapter_path = resolve_model(opts.model, opts.adapter, opts.base_model)
        self.think_prefix = think_prefix
        self.batch_size = opts.batch_size
        self.label = opts.label or Path(self.adapter_path or self.model_path).name
        adapter_proc = self.adapter_path if self.adapter_path and has_processor(self.adapter_path) else None
        self.processor_path = str(opts.processor or adapter_proc or self.model_path)
        self.processor = AutoProcessor.from_pretrained(self.processor_path)
        if problem := pixel_policy_conflict(self.pixel_policy, processor_pixel_bounds(self.processor)):
            log.warning(
                "%s: pixel policy: %s (the judge sees other pixels than it says)", self.label, problem
            )
        self._fingerprint = fingerprint(self.model_path, self.adapter_path)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "label": self.label,
            "model": self.model_path,
            "adapter": self.adapter_path,
            "processor": self.processor_path,
            "think_prefix": self.think_prefix,
            "weights_fingerprint": self._fingerprint,
            "seeding": self.seeding,
        }

    @staticmethod
    def result(
        request: JudgeRequest, prompt: str, text: str, prompt_tokens: int, completion_tokens: int
    ) -> JudgeResult:
        """The parsed result of a completion, the ``<think>\\n`` prefill put back in front when the prompt opened it
        (the stored text is what the model "said"; the parser sees a complete block)."""
        text = THINK_PREFIX + text if opens_think_block(prompt) else text
        return parse_result(request, text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)


DEAD_AFTER = 8
"""Requests that fail one at a time in a row, after their batch failed, before the engine counts as dead."""


class BackendDead(RuntimeError):
    """The engine fails every request: the cell stops at once instead of retrying each request alone."""


def run_batches(
    items: Sequence[tuple[int, JudgeRequest, Any]],
    batch_size: int,
    generate: Callable[[list[tuple[int, JudgeRequest, Any]]], list[JudgeResult]],
    progress: Any = None,
    _failed_in_a_row: list[int] | None = None,
) -> dict[int, JudgeResult]:
    """``{index: result}`` of ``generate`` on batches; a batch that raises is retried one request at a time, so one
    bad request only fails itself (its result carries the error). After :data:`DEAD_AFTER` lone failures in a row
    (or when the engine says it is dead) :class:`BackendDead` is raised at once."""
    streak = _failed_in_a_row if _failed_in_a_row is not None else [0]
    out: dict[int, JudgeResult] = {}
    for start in range(0, len(items), batch_size):
        batch = list(items[start : start + batch_size])
        try:
            results = generate(batch)
        except Exception as e:  # isolate the failing request below
            if "EngineDead" in type(e).__name__ or "engine is dead" in str(e).lower():
                raise BackendDead(f"the engine died: {type(e).__name__}: {e}") from e
            if len(batch) > 1:
                log.warning(
                    "a batch of %d failed (%s: %s); retrying one at a time", len(batch), type(e).__name__, e
                )
                out.update(run_batches(batch, 1, generate, _failed_in_a_row=streak))
            else:
                idx, req, _ = batch[0]
                log.warning("request %s failed: %s: %s", req.request_id, type(e).__name__, e)
                out[idx] = error_result(req, f"{type(e).__name__}: {e}")
                streak[0] += 1
                if streak[0] >= DEAD_AFTER:
                    raise BackendDead(
                        f"{streak[0]} requests failed one after another when run alone (last: "
                        f"{type(e).__name__}: {e}); the engine is probably dead"
                    ) from e
        else:
            streak[0] = 0
            out.update((idx, res) for (idx, _, _), res in zip(batch, results))
        if progress is not None:
            progress.update(len(batch))
    return out
