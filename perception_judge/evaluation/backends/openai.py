"""The ``openai`` backend: any OpenAI-compatible chat server through the PPJD teacher client
(:class:`perception_judge.llm_client.ChatClient`: the same retries, timeout and concurrency limit as teacher calls).
The server applies its own chat template; a ``reasoning_content`` it returns is kept apart from the text the parser
reads. Every request carries every field of :func:`~perception_judge.evaluation.base.request_sampling`, as the hf
backend sends them: a vLLM server fills an unset field from the model folder's ``generation_config.json``
(``repetition_penalty`` 1.05 for Qwen2.5-VL). ``server: openai`` (OpenAI's own API) leaves out the fields it does not
take (:data:`VLLM_ONLY`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import Field, field_validator

from perception_judge.core.images import PixelPolicy
from perception_judge.core.options import CommaList, Options
from perception_judge.core.schema import JudgeRequest, JudgeResult, Sampling
from perception_judge.evaluation import base

STANDARD = ("temperature", "top_p", "max_tokens", "seed")
"""The sampling fields the client sends as its own arguments; the others go in the body (``extra_body``)."""
VLLM_ONLY = ("top_k", "min_p", "repetition_penalty")
"""Sampling fields of vLLM (and SGLang) servers that the OpenAI API does not take."""


class OpenAIOptions(Options):
    """The served model's name, the server URLs (several = round robin in the client; default ``$OPENAI_BASE_URL``,
    none is an error), what kind of ``server`` it is (the module docstring), the client's settings (as the teacher
    client's) and the judge's name in results. The key is read from ``api_key_env`` (never stored in results)."""

    model: str | None = None
    base_urls: CommaList | None = Field(None, validate_default=True)
    server: Literal["vllm", "openai"] = "vllm"
    api_key_env: str = "OPENAI_API_KEY"
    api_key: str | None = None
    concurrency: int = Field(16, ge=1)
    timeout_s: float = Field(180, gt=0)
    max_retries: int = Field(6, ge=0)
    backoff_base_s: float = Field(1.0, ge=0)
    backoff_max_s: float = Field(60.0, ge=0)
    image_max_side: int = Field(1024, ge=1)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    label: str | None = None

    @field_validator("base_urls")
    @classmethod
    def _a_server(cls, urls: list[str] | None) -> list[str]:
        urls = urls or [u.strip() for u in os.environ.get("OPENAI_BASE_URL", "").split(",") if u.strip()]
        if not urls:
            raise ValueError(
                "the openai backend needs its server: --base-url URL (backend.base_urls) or $OPENAI_BASE_URL (for "
                "OpenAI's own API: https://api.openai.com/v1 with backend.server=openai)"
            )
        return urls


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
        self.model, self.server, self.label = o.model, o.server, o.label or o.model
        self.client_settings = o.model_dump(exclude={"server", "label"})
        self.progress = progress
        self.client_factory = client_factory

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "label": self.label,
            "model": self.model,
            "client": {k: v for k, v in self.client_settings.items() if k != "api_key"},
            "server": self.server,
            "think_prefix": "server chat template",
            "seeding": "seed = request_seed(seed, request_id) per request",
        }

    def _make_client(self, sampling: Sampling) -> Any:
        sent = base.request_sampling(sampling, "")
        dropped = (*STANDARD, *(VLLM_ONLY if self.server == "openai" else ()))
        extras = {k: -1 if k == "top_k" and not v else v for k, v in sent.items() if k not in dropped}
        settings = {**self.client_settings, "extra_body": {**self.client_settings["extra_body"], **extras}}
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
            sent = base.request_sampling(sampling, req.request_id)
            standard = {key: sent[key] for key in STANDARD}
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
