"""The shared OpenAI-compatible client against the local fake server: messages, retries, limits, secrets."""

from __future__ import annotations

import asyncio
import base64
import io
import socket
import time

import pytest
from PIL import Image
from support.fake_openai import FakeOpenAIServer, Faults

from perception_judge.llm_client import ChatClient, ClientConfig, LLMError, to_openai_messages

SECRET = "sk-test-Very-Secret-Key-0123456789"
MSG = [{"role": "user", "content": "hello"}]


@pytest.fixture
def server():
    with FakeOpenAIServer(record_requests=True) as srv:
        yield srv


def _config(srv_or_urls, **kw) -> ClientConfig:
    urls = srv_or_urls if isinstance(srv_or_urls, list) else [srv_or_urls.base_url]
    kw.setdefault("backoff_base_s", 0.01)
    kw.setdefault("backoff_max_s", 0.05)
    kw.setdefault("timeout_s", 5.0)
    return ClientConfig(base_urls=urls, model="fake-teacher", **kw)


def _run(coro):
    return asyncio.run(coro)


async def _chat(client: ChatClient, n: int = 1, **kw):
    try:
        return await asyncio.gather(*[client.chat(MSG, **kw) for _ in range(n)])
    finally:
        await client.aclose()


def _decode(url: str) -> Image.Image:
    assert url.startswith("data:image/jpeg;base64,")
    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------------------------
# Messages
# --------------------------------------------------------------------------------------------------------------


def test_to_openai_messages_fills_placeholders_in_order_and_downscales():
    red, blue = Image.new("RGB", (400, 200), (255, 0, 0)), Image.new("RGB", (50, 60), (0, 0, 255))
    messages = [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "image"},
                {"type": "text", "text": "compare"},
                {"type": "image"},
            ],
        },
    ]
    out = to_openai_messages(messages, [red, blue], image_max_side=100)
    assert out[0] == {"role": "system", "content": "be brief"}
    parts = out[1]["content"]
    assert [p["type"] for p in parts] == ["image_url", "text", "image_url"]
    first, second = _decode(parts[0]["image_url"]["url"]), _decode(parts[2]["image_url"]["url"])
    assert first.size == (100, 50)  # longest side capped, aspect kept
    assert second.size == (50, 60)  # never enlarged
    assert (
        first.convert("RGB").getpixel((10, 10))[0] > 200 and second.convert("RGB").getpixel((10, 10))[2] > 200
    )


def test_to_openai_messages_counts_must_match():
    with pytest.raises(ValueError, match="more image placeholders"):
        to_openai_messages([{"role": "user", "content": [{"type": "image"}]}], [])
    with pytest.raises(ValueError, match="2 images given"):
        to_openai_messages([{"role": "user", "content": [{"type": "image"}]}], [Image.new("RGB", (4, 4))] * 2)


def test_text_only_list_content_becomes_a_string():
    out = to_openai_messages([{"role": "user", "content": [{"type": "text", "text": "hi"}]}], [])
    assert out == [{"role": "user", "content": "hi"}]


# --------------------------------------------------------------------------------------------------------------
# Calls
# --------------------------------------------------------------------------------------------------------------


def test_chat_sends_settings_and_counts_usage():
    with FakeOpenAIServer(record_requests=True, reasoning=True, api_key=SECRET) as srv:
        client = ChatClient(_config(srv, api_key=SECRET, extra_body={"top_k": 20}))
        image = Image.new("RGB", (2000, 1000), (0, 200, 0))
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}]

        async def go():
            try:
                return await client.chat(
                    messages, [image], temperature=0.0, top_p=None, max_tokens=77, seed=5
                )
            finally:
                await client.aclose()

        resp = _run(go())
        body = srv.requests[0]
        assert body["model"] == "fake-teacher" and body["temperature"] == 0.0 and body["max_tokens"] == 77
        assert body["seed"] == 5 and body["top_k"] == 20 and "top_p" not in body
        assert max(_decode(body["messages"][0]["content"][0]["image_url"]["url"]).size) == 1024
        assert srv.headers_seen[0]["authorization"] == f"Bearer {SECRET}"
        assert resp.reasoning == "Let me look at the request carefully."
        assert resp.finish_reason == "stop" and resp.attempts == 1
        assert resp.prompt_tokens == 256 and resp.completion_tokens >= 1  # 1 image, ~0 text tokens
        assert client.usage["prompt_tokens"] == resp.prompt_tokens and client.usage["requests"] == 1


def test_api_key_never_in_repr_asdict_or_errors(monkeypatch):
    monkeypatch.setenv("MY_KEY_VAR", SECRET)
    cfg = ClientConfig(base_urls=["http://127.0.0.1:9/v1"], model="m", api_key_env="MY_KEY_VAR")
    assert cfg.resolve_api_key() == SECRET
    explicit = ClientConfig(base_urls=["http://127.0.0.1:9/v1"], model="m", api_key=SECRET)
    for c in (cfg, explicit):
        assert SECRET not in repr(c)
        assert SECRET not in str(c.model_dump())
        assert SECRET not in str(c.public_dict())
    assert explicit.api_key == SECRET
    with FakeOpenAIServer(api_key="sk-the-right-one") as srv:
        client = ChatClient(_config(srv, api_key=SECRET))
        with pytest.raises(LLMError) as e:
            _run(_chat(client))
        assert e.value.reason == "auth" and e.value.attempts == 1  # not retried
        assert SECRET not in str(e.value) and SECRET not in repr(client)
        assert client.redact(f"key={SECRET}") == "key=***"


def test_retries_429_500_bad_body_then_succeeds(server):
    server.force("429", "500", "bad_body", None)
    client = ChatClient(_config(server, max_retries=5))
    (resp,) = _run(_chat(client))
    assert resp.attempts == 4
    stats = server.stats()
    assert stats["fault_429"] == stats["fault_500"] == stats["fault_bad_body"] == 1
    assert client.usage["retries"] == 3 and client.usage["failures"] == 0 and client.usage["requests"] == 4


def test_retry_after_is_honoured():
    with FakeOpenAIServer(faults=Faults(retry_after_s=0.6)) as srv:
        srv.force("429")
        client = ChatClient(_config(srv, backoff_base_s=0.001, backoff_max_s=5.0))
        t0 = time.monotonic()
        (resp,) = _run(_chat(client))
        assert resp.attempts == 2
        assert time.monotonic() - t0 >= 0.6


def test_timeout_is_retried():
    with FakeOpenAIServer(faults=Faults(hang_s=3.0)) as srv:
        srv.force("hang")
        client = ChatClient(_config(srv, timeout_s=0.4, max_retries=2))
        t0 = time.monotonic()
        (resp,) = _run(_chat(client))
        assert resp.attempts == 2 and time.monotonic() - t0 < 2.5
        assert srv.stats()["fault_hang"] == 1


def test_gives_up_with_a_reason_after_max_retries(server):
    server.set_faults(Faults(rate_500=1.0))
    client = ChatClient(_config(server, max_retries=2))
    with pytest.raises(LLMError) as e:
        _run(_chat(client))
    assert e.value.reason == "server_error" and e.value.attempts == 3 and e.value.retryable
    assert server.stats()["fault_500"] == 3
    assert client.usage["failures"] == 1


def test_connection_refused_is_a_connection_error():
    client = ChatClient(_config([f"http://127.0.0.1:{_free_port()}/v1"], max_retries=1))
    with pytest.raises(LLMError) as e:
        _run(_chat(client))
    assert e.value.reason == "connection" and e.value.attempts == 2


def test_concurrency_limit_is_respected():
    with FakeOpenAIServer(latency_s=0.1) as srv:
        client = ChatClient(_config(srv, concurrency=3))
        t0 = time.monotonic()
        _run(_chat(client, n=12))
        elapsed = time.monotonic() - t0
        assert srv.stats()["peak_in_flight"] == 3
        assert elapsed >= 0.38  # 12 calls / 3 at a time x 0.1 s


def test_requests_spread_over_base_urls_and_avoid_a_dead_one():
    with FakeOpenAIServer(latency_s=0.02) as a, FakeOpenAIServer(latency_s=0.02) as b:
        client = ChatClient(_config([a.base_url, b.base_url], concurrency=4))
        _run(_chat(client, n=20))
        na, nb = a.stats()["status_200"], b.stats()["status_200"]
        assert na + nb == 20 and min(na, nb) >= 6
        dead = f"http://127.0.0.1:{_free_port()}/v1"
        client = ChatClient(_config([dead, a.base_url], concurrency=2, max_retries=3, cooldown_s=30))
        results = _run(_chat(client, n=10))
        assert len(results) == 10
        stats = {e["url"]: e for e in client.endpoint_stats()}
        assert stats[dead]["requests"] <= 2  # cooled down after failing, the live server took the rest


def test_a_dead_server_cools_down_longer_with_each_failure_in_a_row():
    """A dead server fails at once, so it always looks idle; with a short fixed cooldown the least-busy pick kept
    sending it work (an item could spend all its retries there). The cooldown doubles per failure in a row."""
    with FakeOpenAIServer(latency_s=0.05) as a:
        dead = f"http://127.0.0.1:{_free_port()}/v1"
        client = ChatClient(_config([dead, a.base_url], concurrency=4, max_retries=3, cooldown_s=0.05))
        assert len(_run(_chat(client, n=40))) == 40
        stats = {e["url"]: e for e in client.endpoint_stats()}
        assert stats[dead]["requests"] == stats[dead]["errors"] <= 8, stats  # a fixed 0.05 s: about 19
        ep = client._endpoints[0]
        assert ep.failures == stats[dead]["errors"]
        before = time.monotonic()
        ep.cool_down(1.0)
        assert ep.cooldown_until - before >= 2 ** min(ep.failures - 1, 6) * 0.99


def test_client_survives_successive_event_loops(server):
    client = ChatClient(_config(server))

    async def one():
        return await client.chat(MSG)

    assert asyncio.run(one()).text
    assert asyncio.run(one()).text  # a fresh loop: the HTTP pool is rebuilt
    _run(client.aclose())


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="base URL"):
        ChatClient(
            ClientConfig(base_urls=[], model="m")
        )  # the client needs one; the options may get it later
    with pytest.raises(ValueError, match="concurrency"):
        ClientConfig(base_urls=["http://x/v1"], model="m", concurrency=0)
    assert ClientConfig(base_urls="http://a/v1, http://b/v1", model="m").base_urls == [
        "http://a/v1",
        "http://b/v1",
    ]


def test_non_string_message_content_is_a_retryable_malformed_response():
    """A server answering with content 42 (or a dict) used to raise TypeError deep in the teacher, unretried."""
    from types import SimpleNamespace

    client = ChatClient(ClientConfig(model="m", base_urls=["http://127.0.0.1:9"]))

    def completion(content):
        message = SimpleNamespace(content=content, model_extra={})
        return SimpleNamespace(choices=[SimpleNamespace(message=message, finish_reason="stop")], usage=None)

    for bad in (42, {"text": "x"}, 3.5):
        with pytest.raises(LLMError) as err:
            client._to_response(completion(bad), attempts=1)
        assert err.value.reason == "bad_response" and err.value.retryable
        assert "not text" in err.value.detail
    parts = [{"type": "text", "text": '{"a": '}, {"type": "text", "text": "1}"}]
    assert client._to_response(completion(parts), attempts=1).text == '{"a": 1}'


def test_retry_after_beyond_the_backoff_cap_is_honoured_and_logged(caplog):
    client = ChatClient(ClientConfig(model="m", base_urls=["http://127.0.0.1:9"], backoff_max_s=60.0))
    with caplog.at_level("WARNING", logger="perception_judge.llm_client"):
        assert client._backoff(1, 300.0) >= 300.0  # used to be cut to 60 s
    assert "retry after 300 s" in caplog.text
    capped = ChatClient(ClientConfig(model="m", base_urls=["http://127.0.0.1:9"], retry_after_max_s=90.0))
    assert 90.0 <= capped._backoff(1, 3600.0) <= 90.0 + 1.0


def test_retry_policy_attempts_waits_and_counters(monkeypatch):
    """The tenacity wiring: retryable errors are retried max_retries times with the server's Retry-After passed
    to the backoff; a non-retryable error or an unexpected exception ends the call at once."""
    client = ChatClient(_config(["http://127.0.0.1:9/v1"], max_retries=2))
    attempts: list[int] = []
    waits: list[tuple[int, float | None]] = []
    errors: list[BaseException] = []

    async def attempt(body, n):
        attempts.append(n)
        raise errors[0] if len(errors) == 1 else errors[n - 1]

    def backoff(n, retry_after):
        waits.append((n, retry_after))
        return 0.0

    monkeypatch.setattr(client, "_attempt", attempt)
    monkeypatch.setattr(client, "_backoff", backoff)

    errors[:] = [LLMError("rate_limited", "", 1, 429, retry_after=7.0), LLMError("server_error", "", 2, 500)]
    errors.append(LLMError("timeout", "", 3))
    with pytest.raises(LLMError) as e:
        _run(_chat(client))
    assert e.value.reason == "timeout" and attempts == [1, 2, 3] and waits == [(1, 7.0), (2, None)]
    assert client.usage["retries"] == 2 and client.usage["failures"] == 1

    attempts.clear()
    errors[:] = [LLMError("auth", "", 1, 401)]
    with pytest.raises(LLMError) as e:
        _run(_chat(client))
    assert e.value.reason == "auth" and attempts == [1]
    assert client.usage["retries"] == 2 and client.usage["failures"] == 2

    attempts.clear()
    errors[:] = [RuntimeError("a bug, not a transport error")]
    with pytest.raises(RuntimeError, match="a bug"):
        _run(_chat(client))
    assert attempts == [1] and client.usage["failures"] == 2


def test_url_credentials_are_redacted_everywhere():
    from perception_judge.core.redact import redact, redact_url

    assert redact_url("http://user:pw@h:8000/v1") == "http://<redacted>@h:8000/v1"
    params = "api_key=1&x=2&key=3&token=4&access_token=5&secret=6&password=7&sig=8&signature=9&page=10"
    assert redact_url(f"https://h/v1?{params}") == (
        "https://h/v1?api_key=<redacted>&x=2&key=<redacted>&token=<redacted>&access_token=<redacted>"
        "&secret=<redacted>&password=<redacted>&sig=<redacted>&signature=<redacted>&page=10"
    )
    assert redact({"base_urls": ["http://u:p@h/v1"], "note": "see https://h/?token=t now", "n": 3}) == {
        "base_urls": ["http://<redacted>@h/v1"],
        "note": "see https://h/?token=<redacted> now",
        "n": 3,
    }
    client = ChatClient(ClientConfig(base_urls=["http://u:pw-XYZ@127.0.0.1:9/v1"], model="m"))
    assert "pw-XYZ" not in repr(client) + client.redact(
        "failed: http://u:pw-XYZ@127.0.0.1:9/v1/chat/completions"
    )
