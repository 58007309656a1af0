"""The ``hf`` backend: transformers ``generate``, requests sorted by prompt length and batched with left padding,
full checkpoints or LoRA adapters. Each batch runs under ``torch.manual_seed(request_seed(seed, batch ids))`` in a
forked RNG: reproducible for a given seed, request set and batch size (vLLM and servers seed each request).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from perception_judge.core.images import PixelPolicy
from perception_judge.core.protocol import render_generation_prompt
from perception_judge.core.schema import JudgeRequest, JudgeResult, Sampling
from perception_judge.evaluation import base
from perception_judge.evaluation.backends.common import LocalBackend, LocalOptions, run_batches

log = logging.getLogger(__name__)


# Fields of transformers' GenerationConfig a judge never uses, at their no-op values (with NEUTRAL_DECODING's).
_HF_NEUTRAL = {
    "num_beams": 1,
    "num_return_sequences": 1,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "min_new_tokens": 0,
}


def generation_config(sampling: Sampling, eos_token_id: Any, pad_token_id: Any) -> Any:
    """A ``GenerationConfig`` with every decoding field of :func:`~..base.request_sampling` set (greedy when
    temperature is 0) and the no-op values of :data:`~..base.NEUTRAL_DECODING` and :data:`_HF_NEUTRAL`: transformers
    fills an unset field from the model folder's ``generation_config.json``. A config object (not keyword arguments)
    also skips a costly legacy-config check inside ``generate`` on every call."""
    from transformers import GenerationConfig

    sent = base.request_sampling(sampling, "")
    greedy = base.is_greedy(sampling)
    return GenerationConfig(
        max_new_tokens=sent["max_tokens"],
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        do_sample=not greedy,
        temperature=1.0 if greedy else sent["temperature"],
        top_p=sent["top_p"],
        top_k=sent["top_k"],
        min_p=base.NEUTRAL_DECODING["min_p"],
        repetition_penalty=base.NEUTRAL_DECODING["repetition_penalty"],
        **_HF_NEUTRAL,
    )


class HFOptions(LocalOptions):
    """``dtype`` auto: bfloat16 on a GPU, float32 on the CPU; ``device`` auto: cuda when torch sees a GPU;
    ``merge_adapter`` merges the LoRA weights for faster generation (the same numbers up to rounding)."""

    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    device: str = "auto"
    merge_adapter: bool = True
    attn_implementation: str | None = None


class HFBackend(LocalBackend):
    """A local transformers judge (:class:`HFOptions`)."""

    name = "hf"
    Options = HFOptions
    seeding = "torch.manual_seed(request_seed(seed, batch request ids)) per batch"

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        pixel_policy: PixelPolicy | dict | None = None,
        think_prefix: str = "auto",
        progress: bool = True,
        **options: Any,
    ) -> None:
        import torch
        from transformers import AutoModelForImageTextToText

        o = HFOptions.parse({"model": model, **options}, "backend")
        super().__init__(o, pixel_policy, think_prefix)
        self.device = ("cuda" if torch.cuda.is_available() else "cpu") if o.device == "auto" else o.device
        dtype = o.dtype if o.dtype != "auto" else "bfloat16" if self.device.startswith("cuda") else "float32"
        self.torch_dtype = getattr(torch, dtype)
        self.progress = progress
        tok = getattr(self.processor, "tokenizer", self.processor)
        tok.padding_side = "left"
        extra = {"attn_implementation": o.attn_implementation} if o.attn_implementation else {}
        net = AutoModelForImageTextToText.from_pretrained(self.model_path, dtype=self.torch_dtype, **extra)
        self.merged = False
        if self.adapter_path:
            from peft import PeftModel

            net = PeftModel.from_pretrained(net, self.adapter_path)
            if o.merge_adapter:
                net, self.merged = net.merge_and_unload(), True
        self.model = net.to(self.device).eval()
        gen_cfg = getattr(self.model, "generation_config", None)
        eos = getattr(gen_cfg, "eos_token_id", None)
        self.eos_token_id = eos if eos is not None else tok.eos_token_id
        pad = getattr(gen_cfg, "pad_token_id", None)
        self.pad_token_id = next((t for t in (pad, tok.pad_token_id) if t is not None), tok.eos_token_id)
        self._torch = torch

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "adapter_merged": self.merged,
            "dtype": str(self.torch_dtype).replace("torch.", ""),
            "device": self.device,
            "batch_size": self.batch_size,
        }

    def close(self) -> None:
        self.model = None
        if self.device.startswith("cuda"):
            self._torch.cuda.empty_cache()

    def _prepare(self, request: JudgeRequest) -> tuple[str, list[Any]]:
        images = self.prepare_images(request)
        return render_generation_prompt(self.processor, request.messages, self.think_prefix), images

    def _generate(self, batch: list[tuple[int, JudgeRequest, Any]], sampling: Sampling) -> list[JudgeResult]:
        torch = self._torch
        prompts = [prep[0] for _, _, prep in batch]
        images = [img for _, _, prep in batch for img in prep[1]]
        inputs = self.processor(text=prompts, images=images or None, padding=True, return_tensors="pt")
        inputs = inputs.to(self.device)
        gen_cfg = generation_config(sampling, self.eos_token_id, self.pad_token_id)
        seed = base.request_seed(sampling.seed, "|".join(req.request_id for _, req, _ in batch))
        devices = [torch.cuda.current_device()] if self.device.startswith("cuda") else []
        with torch.random.fork_rng(devices=devices), torch.inference_mode():
            torch.manual_seed(seed)
            out = self.model.generate(**inputs, generation_config=gen_cfg)
        new = out[:, inputs["input_ids"].shape[1] :]
        texts = self.processor.batch_decode(new, skip_special_tokens=True)
        stop_ids = set(self.eos_token_id if isinstance(self.eos_token_id, list) else [self.eos_token_id])
        stop_ids.add(self.pad_token_id)
        results = []
        for row, ((_, req, prep), text) in enumerate(zip(batch, texts)):
            toks = new[row].tolist()
            n_new = next((i + 1 for i, t in enumerate(toks) if t in stop_ids), len(toks))
            results.append(self.result(req, prep[0], text, int(inputs["attention_mask"][row].sum()), n_new))
        return results

    def judge(self, requests: Sequence[JudgeRequest], sampling: Sampling) -> list[JudgeResult]:
        if self.model is None:
            raise RuntimeError("this hf backend was closed")
        results, ready = base.prepare_each(requests, self._prepare, log)
        # similar lengths together: less padding (image tokens count alike for equal-size images)
        ready.sort(key=lambda item: (len(item[2][0]), len(item[2][1])))
        bar = base.progress_bar(len(ready) if self.progress else 0, f"hf {self.label}", "req", leave=False)
        try:
            results.update(run_batches(ready, self.batch_size, lambda b: self._generate(b, sampling), bar))
        finally:
            bar.close()
        return [results[i] for i in range(len(requests))]
