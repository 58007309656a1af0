"""The ``openai`` backend: any OpenAI-compatible chat server through the PPJD teacher client
(:class:`perception_judge.llm_client.ChatClient`: the same retries, timeout and concurrency limit as teacher calls).
The server applies its own chat template; a ``reasoning_content`` it returns is kept apart from the text the parser
reads. ``send_top_k=True`` (vLLM, SGLang) sends ``top_k`` (-1: off), ``min_p`` 0 and ``repetition_penalty`` 1 in the
body: a vLLM server fills every field a request leaves unset from the model folder's ``generation_config.json``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import Field

from perception_judge.core.images import PixelPolicy
from perception_judge.core.options import CommaList, Options
from perception_judge.core.schema import JudgeRequest, JudgeResult, Sampling
from perception_judge.evaluation import base


class OpenAIOptions(Options):
    """The served model's name, the server URLs (several = round robin in the client; default
    ``$OPENAI_BASE_URL``), the client's settings (as the teacher client's), ``send_top_k`` (see the module
    docstring) and the judge's name in results. The key is read from ``api_key_env`` (never stored in results)."""

    model: str | None = None
    base_urls: CommaList | None = None
    api_key_env: str = "OPENAI_API_KEY"
    api_key: str | None = None
    concurrency: int = Field(16, ge=1)
    timeout_s: float = Field(180, gt=0)
    max_retries: int = Field(6, ge=0)
    backoff_base_s: float = Field(1.0, ge=0)
    backoff_max_s: float = Field(60.0, ge=0)
    image_max_side: int = Field(1024, ge=1)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    send_top_k: bool = False
    label: str | None = None


class OpenAIBackend(base.JudgeBackend):
    """Judge through an OpenAI-compatible server (:class:`OpenAIOptions`)."""

    name = "openai"
    Options = OpenAIOptions

    def __init__(
        self,
        model: str | None = None,
        *,
        pixel_policy: PixelPolicy | dict | None = None,
        progress: bool = True,
        client_factory: Callable[[Any], Any] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(pixel_policy)
        o = OpenAIOptions.parse({"model": model, **options}, "backend")
        if not o.model:
            raise ValueError("the openai backend needs the served model's name (option model)")
        self.model = o.model
        self.base_urls = o.base_urls or [os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"]
        settings = o.model_dump(exclude={"base_urls", "send_top_k", "label"})
        self.client_settings = {"base_urls": self.base_urls, **settings}
        self.send_top_k = o.send_top_k
        self.label = o.label or o.model
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
        if self.send_top_k:  # vLLM's fields, explicit: a server's defaults come from the model folder
            sent = base.request_sampling(sampling, "")
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
        bar = base.progress_bar(
            len(ready) if self.progress else 0, f"openai {self.label}", "req", leave=False
        )

        async def one(req: JudgeRequest, images: list[Any]) -> JudgeResult:
            sent = base.request_sampling(sampling, req.request_id)  # the OpenAI API's own fields of it:
            standard = {key: sent[key] for key in ("temperature", "top_p", "max_tokens", "seed")}
            try:
                resp = await client.chat(req.messages, images, **standard)
            except Exception as e:  # LLMError after retries, or anything else: this request only
                # LLMError's text is "reason: detail" with the server's message, already redacted
                return base.error_result(
                    req, f"{type(e).__name__}: {str(e)[:300] or getattr(e, 'reason', '')}"
                )
            finally:
                bar.update(1)
            return base.parse_result(
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
        results, ready = base.prepare_each(requests, self.prepare_images)
        if ready:
            results.update(asyncio.run(self._run(ready, sampling)))
        return [results[i] for i in range(len(requests))]
