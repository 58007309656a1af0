"""The ``openai`` backend: any OpenAI-compatible chat server (vLLM / SGLang / transformers serve / OpenAI) through
the PPJD teacher client (:class:`perception_judge.llm_client.ChatClient`: the same retries, timeout and concurrency
limit as teacher calls). The server applies its own chat template; a ``reasoning_content`` it returns is kept apart
from the text the parser reads. Each request sends ``seed = request_seed(seed, request_id)``; ``send_top_k=True``
(for vLLM and SGLang servers) adds the sampling fields the OpenAI API lacks to the request body, explicitly:
``top_k`` (-1: off), ``min_p`` 0 and ``repetition_penalty`` 1 — a vLLM server fills every field a request leaves
unset from the model folder's ``generation_config.json``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from typing import Any

from perception_judge.core.images import PixelPolicy
from perception_judge.core.schema import JudgeRequest, JudgeResult, Sampling
from perception_judge.evaluation.base import (
    JudgeBackend,
    error_result,
    parse_result,
    prepare_each,
    progress_bar,
    request_sampling,
)


def _standard(sampling: Sampling, request_id: str) -> dict[str, Any]:
    """The OpenAI API's own sampling fields of a request (``temperature``, ``top_p``, ``max_tokens``, ``seed``)."""
    sent = request_sampling(sampling, request_id)
    return {key: sent[key] for key in ("temperature", "top_p", "max_tokens", "seed")}


class OpenAIBackend(JudgeBackend):
    """Judge through an OpenAI-compatible server. ``base_urls`` (several = round robin in the client) default
    to ``$OPENAI_BASE_URL``; the key is read from ``api_key_env`` (never stored in results)."""

    name = "openai"

    def __init__(
        self,
        model: str,
        base_urls: list[str] | str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        api_key: str | None = None,
        concurrency: int = 16,
        timeout_s: float = 180,
        max_retries: int = 6,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
        image_max_side: int = 1024,
        extra_body: dict[str, Any] | None = None,
        send_top_k: bool = False,
        pixel_policy: PixelPolicy | dict | None = None,
        label: str | None = None,
        progress: bool = True,
        client_factory: Callable[[Any], Any] | None = None,
    ) -> None:
        super().__init__(pixel_policy)
        if isinstance(base_urls, str):
            base_urls = [u.strip() for u in base_urls.split(",") if u.strip()]
        if not base_urls:
            base_urls = [os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"]
        self.model = model
        self.base_urls = list(base_urls)
        self.client_settings = {
            "base_urls": self.base_urls,
            "model": model,
            "api_key_env": api_key_env,
            "api_key": api_key,
            "concurrency": int(concurrency),
            "timeout_s": timeout_s,
            "max_retries": int(max_retries),
            "backoff_base_s": backoff_base_s,
            "backoff_max_s": backoff_max_s,
            "image_max_side": int(image_max_side),
            "extra_body": dict(extra_body or {}),
        }
        self.send_top_k = send_top_k
        self.label = label or model
        self.progress = progress
        self.client_factory = client_factory

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "label": self.label,
            "model": self.model,
            "client": {k: v for k, v in self.client_settings.items() if k != "api_key"},
            "send_top_k": self.send_top_k,
            "think_prefix": "server chat template",
            "seeding": "seed = request_seed(seed, request_id) per request",
        }

    def _make_client(self, sampling: Sampling) -> Any:
        settings = dict(self.client_settings)
        if (
            self.send_top_k
        ):  # vLLM's sampling fields, explicit: the server's defaults come from the model folder
            sent = request_sampling(sampling, "")
            extras = {"top_k": sent["top_k"] or -1, "min_p": sent["min_p"]}
            extras["repetition_penalty"] = sent["repetition_penalty"]
            settings["extra_body"] = {**settings["extra_body"], **extras}
        if self.client_factory is not None:
            return self.client_factory(settings)
        from perception_judge.llm_client import ChatClient, ClientConfig

        return ChatClient(ClientConfig(**settings))

    async def _run(
        self, ready: list[tuple[int, JudgeRequest, list[Any]]], sampling: Sampling
    ) -> dict[int, JudgeResult]:
        client = self._make_client(sampling)
        bar = progress_bar(len(ready) if self.progress else 0, f"openai {self.label}", "req", leave=False)

        async def one(req: JudgeRequest, images: list[Any]) -> JudgeResult:
            try:
                resp = await client.chat(req.messages, images, **_standard(sampling, req.request_id))
            except Exception as e:  # LLMError after retries, or anything else: this request only
                # LLMError's text is "reason: detail" with the server's message, already redacted
                return error_result(req, f"{type(e).__name__}: {str(e)[:300] or getattr(e, 'reason', '')}")
            finally:
                bar.update(1)
            return parse_result(
                req,
                resp.text or "",
                resp.reasoning,
                prompt_tokens=int(resp.prompt_tokens or 0),
                completion_tokens=int(resp.completion_tokens or 0),
            )

        try:
            out = await asyncio.gather(*(one(req, imgs) for _, req, imgs in ready))
        finally:
            bar.close()
            if hasattr(client, "aclose"):
                await client.aclose()
        return {i: res for (i, _, _), res in zip(ready, out)}

    def judge(self, requests: Sequence[JudgeRequest], sampling: Sampling) -> list[JudgeResult]:
        results, ready = prepare_each(requests, self.prepare_images)
        if ready:
            results.update(asyncio.run(self._run(ready, sampling)))
        return [results[i] for i in range(len(requests))]
