"""The async client of OpenAI-compatible chat servers (vLLM, OpenAI, Gemini), on the ``openai`` package
(docs/ppjd.md §4): several base URLs (the least busy one not cooling down after an error), tenacity retries with
full-jitter backoff that honours ``Retry-After``, one concurrency limit, whole-request timeouts, replies read up to
``max_reply_bytes``, and an API key that never appears in a repr, a dump or an error message (nor a URL's
credentials in a log line).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from PIL import Image
from pydantic import Field, PrivateAttr
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from perception_judge.core.images import load_image, to_data_url
from perception_judge.core.options import CommaList, Flag, Options
from perception_judge.core.redact import redact_logs, redact_text

RETRYABLE_REASONS = frozenset({"rate_limited", "server_error", "timeout", "connection", "bad_response"})
_STATUS_REASONS = {401: "auth", 403: "auth", 404: "not_found", 400: "bad_request", 422: "bad_request"}
_STATUS_REASONS |= {429: "rate_limited", 408: "server_error"}  # retried, like every 5xx
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "requests", "retries", "failures")

log = logging.getLogger(__name__)
# a URL's credentials never reach a log line, ours or the HTTP libraries'
redact_logs(__name__, "openai", "openai._base_client", "httpx", "httpx2")


class ReplyTooLarge(Exception):
    """A reply body over ``max_reply_bytes``: raised while it is read, so the rest is never held in memory."""


def _capped_http_client(max_bytes: int, connections: int) -> Any:
    """The SDK's HTTP client, reading at most ``max_bytes`` of a reply body."""
    import httpx2
    from openai import DefaultAsyncHttpxClient

    class Capped(httpx2.AsyncByteStream):
        def __init__(self, stream: Any) -> None:
            self.stream = stream

        async def __aiter__(self) -> Any:
            read = 0
            async for chunk in self.stream:
                if (read := read + len(chunk)) > max_bytes:
                    raise ReplyTooLarge(
                        f"the reply is over {max_bytes:,} bytes (max_reply_bytes); not read further"
                    )
                yield chunk

        async def aclose(self) -> None:
            await self.stream.aclose()

    class Transport(httpx2.AsyncHTTPTransport):
        async def handle_async_request(self, request: Any) -> Any:
            response = await super().handle_async_request(request)
            response.stream = Capped(response.stream)
            return response

    limits = httpx2.Limits(max_connections=None, max_keepalive_connections=connections)
    return DefaultAsyncHttpxClient(transport=Transport(limits=limits))


class LLMError(Exception):
    """A chat call failed for good. ``reason``: rate_limited, server_error, timeout, connection, bad_response
    (retryable kinds, after the last retry), or auth, not_found, bad_request, client_error, reply_too_large (not
    retried). ``retry_after``: the seconds the server asked to wait (``Retry-After``), if it did."""

    def __init__(
        self,
        reason: str,
        detail: str = "",
        attempts: int = 1,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail, self.attempts = reason, detail, attempts
        self.status, self.retry_after = status, retry_after

    @property
    def retryable(self) -> bool:
        return self.reason in RETRYABLE_REASONS


class ClientConfig(Options):
    """Where and how to send chat requests; a documented field is also a ``build-ppjd`` flag. The API key is no
    field: it is read from the variable ``api_key_env`` names (or given as ``ClientConfig(api_key=...)`` in code,
    kept private), so it never appears in a repr, a dump or a file."""

    base_urls: Annotated[CommaList, Flag("--base-url")] = Field(default_factory=list)
    """OpenAI-compatible base URL, repeatable (e.g. one per vllm serve instance)"""
    model: str | None = None
    """teacher model name"""
    api_key_env: str = "OPENAI_API_KEY"
    """environment variable holding the API key (vllm serve needs none unless started with --api-key)"""
    concurrency: Annotated[int, Field(ge=1)] = 16
    """items (and requests) in flight"""
    timeout_s: Annotated[float, Field(gt=0), Flag("--timeout")] = 180.0
    """seconds per request, whole request"""
    max_retries: Annotated[int, Field(ge=0)] = 6
    """retries per request on 429/5xx/timeouts"""
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    image_max_side: int = 1024
    """downscale images to this longest side before sending"""
    image_format: str = "JPEG"  # JPEG (quality 90) or PNG for the data URLs
    max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"  # OpenAI reasoning models
    extra_body: dict[str, Any] = Field(default_factory=dict)  # server-specific fields, e.g. {top_k: 20}
    cooldown_s: float = 5.0  # a failed server is avoided this long (x2 per failure in a row) if others are up
    retry_after_max_s: float = 600.0  # a server's Retry-After is honoured up to this many seconds
    max_reply_bytes: Annotated[int, Field(ge=1024)] = 8 << 20
    """a reply body larger than this is refused unread (reason reply_too_large)"""
    _api_key: str | None = PrivateAttr(default=None)

    def __init__(self, /, api_key: str | None = None, **data: Any) -> None:
        super().__init__(**data)
        self._api_key = api_key if isinstance(api_key, str) else None

    @property
    def api_key(self) -> str | None:
        return self._api_key

    def resolve_api_key(self) -> str | None:
        return self.api_key or os.environ.get(self.api_key_env) or None

    def public_dict(self) -> dict[str, Any]:
        """The client settings without the key (safe to write into a manifest)."""
        settings = self.model_dump(include=set(ClientConfig.model_fields))
        return {**settings, "api_key_set": self.resolve_api_key() is not None}


@dataclass
class ChatResponse:
    text: str
    reasoning: str | None
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None
    attempts: int


def to_openai_messages(
    messages: Sequence[dict[str, Any]],
    images: Sequence[Image.Image] = (),
    image_max_side: int | None = 1024,
    image_format: str = "JPEG",
) -> list[dict[str, Any]]:
    """trl-style messages -> OpenAI chat messages. String content passes through. In list content,
    ``{"type": "image"}`` placeholders are filled with ``images`` in order (or the part's own ``"image"``) as
    base64 data-URL ``image_url`` parts; text and ``image_url`` parts stay; a lone text part becomes string
    content. The number of placeholders must equal ``len(images)``."""
    images = list(images)
    out: list[dict[str, Any]] = []
    used = 0
    for m in messages:
        content = m.get("content")
        if content is None or isinstance(content, str):
            out.append({"role": m["role"], "content": content or ""})
            continue
        parts: list[dict[str, Any]] = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                parts.append({"type": "text", "text": part.get("text") or ""})
            elif kind == "image":
                img = part.get("image")
                if img is None:
                    if used >= len(images):
                        raise ValueError(
                            f"messages have more image placeholders than the {len(images)} images given"
                        )
                    img, used = images[used], used + 1
                if not (isinstance(img, str) and img.startswith(("data:", "http://", "https://"))):
                    img = img if isinstance(img, Image.Image) else load_image(img)
                    img = to_data_url(img, max_side=image_max_side, fmt=image_format)
                parts.append({"type": "image_url", "image_url": {"url": img}})
            elif kind == "image_url":
                parts.append(part)
            else:
                raise ValueError(f"unsupported message content part {part!r}")
        single_text = len(parts) == 1 and parts[0]["type"] == "text"
        out.append({"role": m["role"], "content": parts[0]["text"] if single_text else parts})
    if used != len(images):
        raise ValueError(f"{len(images)} images given but the messages have {used} image placeholders")
    return out


def _retry_after_seconds(headers: Any) -> float | None:
    """Seconds a response asks us to wait (``retry-after-ms``, ``retry-after`` as seconds or HTTP date)."""
    if headers is None:
        return None
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return max(0.0, float(ms) / 1000.0)
        if (value := headers.get("retry-after")) is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


@dataclass
class _Endpoint:
    url: str
    in_flight: int = 0
    cooldown_until: float = 0.0
    requests: int = 0
    errors: int = 0
    failures: int = 0  # in a row: the cooldown doubles with each (a dead server fails fast, looks idle)

    def cool_down(self, seconds: float) -> None:
        self.failures += 1
        self.cooldown_until = time.monotonic() + seconds * 2 ** min(self.failures - 1, 6)


class ChatClient:
    """Async chat completions against one or more OpenAI-compatible servers (see the module docstring). It may be
    used from successive ``asyncio.run`` calls: the HTTP clients are rebuilt for each new event loop."""

    def __init__(self, config: ClientConfig) -> None:
        if not config.base_urls or not config.model:
            raise ValueError("the chat client needs at least one base URL and a model name")
        self.config = config
        self._key = config.resolve_api_key()
        self._endpoints = [_Endpoint(u) for u in config.base_urls]
        self._rr = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clients: list[Any] = []
        self._sem: asyncio.Semaphore | None = None
        self._completion_type: Any = None
        self._rng = random.Random()
        self.usage = dict.fromkeys(USAGE_KEYS, 0)

    def __repr__(self) -> str:
        return redact_text(f"ChatClient(model={self.config.model!r}, base_urls={self.config.base_urls!r})")

    def redact(self, text: str) -> str:
        """``text`` with the API key replaced by ``***`` and the credentials of URLs redacted."""
        text = redact_text(str(text))
        return text.replace(self._key, "***") if self._key and len(self._key) >= 4 else text

    def _ensure_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if loop is self._loop and self._clients:
            return
        from openai import AsyncOpenAI
        from openai.types.chat import ChatCompletion

        self._completion_type = ChatCompletion
        self._loop = loop  # a new event loop: the old HTTP pools belong to a dead one
        self._sem = asyncio.Semaphore(self.config.concurrency)
        key, cfg = self._key or "EMPTY", self.config
        self._clients = [
            AsyncOpenAI(
                base_url=e.url,
                api_key=key,
                max_retries=0,
                timeout=cfg.timeout_s,
                http_client=_capped_http_client(cfg.max_reply_bytes, cfg.concurrency),
            )
            for e in self._endpoints
        ]

    def _pick(self) -> int:
        now = time.monotonic()
        n = len(self._endpoints)
        order = [(self._rr + k) % n for k in range(n)]
        ready = [i for i in order if self._endpoints[i].cooldown_until <= now]
        pool = ready or sorted(order, key=lambda i: self._endpoints[i].cooldown_until)[:1]
        best = min(pool, key=lambda i: self._endpoints[i].in_flight)
        self._rr = (best + 1) % n
        return best

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based): ``uniform(0, min(backoff_max_s,
        backoff_base_s * 2^(attempt-1)))`` (full jitter), raised to ``min(retry_after, retry_after_max_s)`` when
        the server sent a Retry-After."""
        cfg = self.config
        delay = self._rng.uniform(0, min(cfg.backoff_max_s, cfg.backoff_base_s * (2 ** (attempt - 1))))
        if retry_after is None:
            return delay
        honoured = min(retry_after, cfg.retry_after_max_s)
        if retry_after > cfg.backoff_max_s:
            log.warning(
                f"the server asks to retry after {retry_after:.0f} s (beyond backoff_max_s {cfg.backoff_max_s:.0f} "
                f"s); waiting {honoured:.0f} s (retry_after_max_s {cfg.retry_after_max_s:.0f} s)"
            )
        return max(delay, honoured)

    def _wait(self, state: RetryCallState) -> float:
        if state.attempt_number > self.config.max_retries:
            return 0.0  # tenacity asks before it checks ``stop``: the last attempt is not followed by a wait
        error = state.outcome.exception() if state.outcome is not None else None
        return self._backoff(state.attempt_number, getattr(error, "retry_after", None))

    def _count_retry(self, state: RetryCallState) -> None:
        self.usage["retries"] += 1

    async def check(self, timeout_s: float = 10.0) -> list[str]:
        """One unretried GET /models per URL: a ValueError naming it when none answers, or one refuses the key, has no
        such API or serves no such model (nor by GET /models/NAME); else warnings. Closes the pools (of this loop)."""
        self._ensure_loop()
        timeout_s = min(timeout_s, self.config.timeout_s)
        found = await asyncio.gather(*(self._probe(i, timeout_s) for i in range(len(self._clients))))
        await self.aclose()
        problems = sorted(p for p in found if p is not None)  # a refusal before an unreachable server
        if problems and (not problems[0][0] or len(problems) == len(found)):
            raise ValueError(problems[0][1])
        return [f"{why}; requests go to the other servers" for _, why in problems]

    async def _probe(self, i: int, timeout_s: float) -> tuple[bool, str] | None:
        """(unreachable, why) when base URL ``i`` cannot serve this client's model, else None."""
        cfg, where = self.config, f"the teacher at {self.redact(self._endpoints[i].url)}"
        models, listed = self._clients[i].with_options(timeout=timeout_s).models, None
        try:
            listed = sorted(m.id.removeprefix("models/") for m in (await models.list()).data)
            if cfg.model.removeprefix("models/") not in listed:
                await models.retrieve(cfg.model)  # a list may leave models out (pages, aliases)
            return None
        except Exception as e:
            if listed is not None:
                return False, f"{where} serves no model {cfg.model!r} (it lists {listed[:8]})"
            error = self._classify(e, 1)
        if error.reason in ("rate_limited", "server_error"):
            return None  # it answers; the run's retries deal with a busy server
        why = f"answers GET /models with {error.reason} (does the URL end in /v1? a server without that API: --set "
        why += "teacher.check_server=false)"
        if error.reason == "auth":
            why = f"refuses the API key ({'from' if self._key else 'none in'} ${cfg.api_key_env})"
        if down := error.reason in ("connection", "timeout"):
            self._endpoints[i].cool_down(cfg.cooldown_s)
        return down, f"{where} {'cannot be reached' if down else why} ({error.detail[:160]})"

    def endpoint_stats(self) -> list[dict[str, Any]]:
        return [{"url": e.url, "requests": e.requests, "errors": e.errors} for e in self._endpoints]

    async def chat(
        self,
        messages: list[dict],
        images: Sequence[Image.Image] = (),
        *,
        temperature: float = 0.2,
        top_p: float | None = 0.9,
        top_k: int | None = None,
        max_tokens: int = 4096,
        seed: int | None = None,
        response_format: dict | None = None,
    ) -> ChatResponse:
        """One chat completion, retried on transient errors. Raises :class:`LLMError` when it gives up."""
        self._ensure_loop()
        cfg = self.config
        body: dict[str, Any] = {
            "model": cfg.model,
            "messages": to_openai_messages(messages, images, cfg.image_max_side, cfg.image_format),
            "temperature": temperature,
            cfg.max_tokens_param: max_tokens,
        }
        optional = {"top_p": top_p, "top_k": top_k, "seed": seed, "response_format": response_format}
        body |= {k: v for k, v in optional.items() if v is not None} | (cfg.extra_body or {})
        retrying = AsyncRetrying(
            stop=stop_after_attempt(cfg.max_retries + 1),
            retry=retry_if_exception(lambda e: isinstance(e, LLMError) and e.retryable),
            wait=self._wait,
            before_sleep=self._count_retry,
            reraise=True,  # the last LLMError itself, not tenacity's RetryError
        )
        try:
            async for attempt in retrying:
                with attempt:
                    response = await self._attempt(body, attempt.retry_state.attempt_number)
        except LLMError:
            self.usage["failures"] += 1
            raise
        return response

    async def _attempt(self, body: dict[str, Any], attempt: int) -> ChatResponse:
        """One request to the least busy endpoint; a failure raises :class:`LLMError` after the endpoint's error
        count and cooldown are updated (the semaphore slot is released before any backoff)."""
        cfg = self.config
        assert self._sem is not None
        async with self._sem:
            idx = self._pick()
            ep = self._endpoints[idx]
            ep.in_flight += 1
            ep.requests += 1
            self.usage["requests"] += 1
            try:
                async with asyncio.timeout(cfg.timeout_s):
                    # The SDK's raw POST: the body is already a chat-completions request, so this skips the SDK's
                    # per-call transform (milliseconds over base64 images) but keeps its transport and parsing.
                    completion = await self._clients[idx].post(
                        "/chat/completions", cast_to=self._completion_type, body=body
                    )
                response = self._to_response(completion, attempt)
                ep.failures = 0
                return response
            except LLMError as e:  # unreadable completion
                error = e
            except Exception as e:
                error = self._classify(e, attempt)
            finally:
                ep.in_flight -= 1
            ep.errors += 1
            log.info(f"{ep.url} (attempt {attempt}) failed: {error.reason}: {error.detail[:200]}")
            if error.reason in ("server_error", "connection", "timeout"):
                ep.cool_down(cfg.cooldown_s)
            elif error.reason == "rate_limited":
                wait = error.retry_after if error.retry_after is not None else cfg.cooldown_s
                ep.cooldown_until = time.monotonic() + wait
        raise error

    def _classify(self, e: Exception, attempts: int) -> LLMError:
        import openai

        detail = self.redact(f"{type(e).__name__}: {e}")[:500]
        if isinstance(e, ReplyTooLarge) or isinstance(e.__cause__, ReplyTooLarge):
            return LLMError("reply_too_large", self.redact(str(e.__cause__ or e)), attempts)
        if isinstance(e, TimeoutError | openai.APITimeoutError):
            return LLMError("timeout", detail or "request timed out", attempts)
        if isinstance(e, openai.APIConnectionError):
            return LLMError("connection", detail, attempts)
        if isinstance(e, openai.APIStatusError):
            status = e.status_code
            reason = _STATUS_REASONS.get(status) or ("server_error" if status >= 500 else "client_error")
            retry_after = None
            if reason in ("rate_limited", "server_error"):
                retry_after = _retry_after_seconds(getattr(e.response, "headers", None))
            return LLMError(reason, detail, attempts, status, retry_after)
        if isinstance(e, ValueError | KeyError | openai.OpenAIError):  # JSON errors, response validation
            return LLMError("bad_response", detail, attempts)
        if isinstance(e, OSError):
            return LLMError("connection", detail, attempts)
        raise e

    def _to_response(self, completion: Any, attempts: int) -> ChatResponse:
        def bad(detail: str) -> LLMError:
            return LLMError("bad_response", detail, attempts)

        choices = getattr(completion, "choices", None)
        if not choices:
            raise bad(f"no choices in the response ({type(completion).__name__})")
        message = getattr(choices[0], "message", None)
        text = getattr(message, "content", None)
        reasoning = getattr(message, "reasoning_content", None) or getattr(message, "reasoning", None)
        if isinstance(text, list):  # content parts: keep the text ones
            parts = [p.get("text") if isinstance(p, dict) else getattr(p, "text", None) for p in text]
            parts = [t for t in parts if isinstance(t, str)]
            text = "".join(parts) if parts else None
        if text is not None and not isinstance(text, str):
            raise bad(f"the message content is {type(text).__name__}, not text: a malformed response")
        if text is None and not reasoning:
            raise bad("the response has no message content")
        usage = getattr(completion, "usage", None)
        pt = int(getattr(usage, "prompt_tokens", 0) or 0)
        ct = int(getattr(usage, "completion_tokens", 0) or 0)
        self.usage["prompt_tokens"] += pt
        self.usage["completion_tokens"] += ct
        finish = getattr(choices[0], "finish_reason", None)
        return ChatResponse(text or "", str(reasoning) if reasoning else None, pt, ct, finish, attempts)

    async def aclose(self) -> None:
        clients, self._clients = self._clients, []
        for c in clients:
            with contextlib.suppress(Exception):  # a pool of a finished loop
                await c.close()
