"""A local OpenAI-compatible server for tests and benchmarks: plausible teacher replies, latency and faults.

In a thread (``with FakeOpenAIServer() as srv``) or a process (``python tests/support/fake_openai.py``
prints ``READY <base_url>``). It answers our PPJD stage prompts like a teacher (rewrite: every number but step
labels +1 for r_rp, +2 and a wrong sentence for r_rp+r) and judge prompts with ``<answer>`` tags, deterministically;
faults come at the rates of :class:`Faults` or scripted by :meth:`FakeOpenAIServer.force`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from perception_judge.core.protocol import count_image_placeholders
from perception_judge.ppjd.teacher import STAGE_MARKERS


def message_text(messages: list[dict[str, Any]], role: str) -> str:
    """The text of the ``role`` messages: string content and the text parts of list content, one per line."""
    out = []
    for m in messages:
        content = m.get("content") if m.get("role") == role else None
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.extend(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return "\n".join(out)


def stage_of_messages(messages: list[dict[str, Any]]) -> str | None:
    """Which teacher stage a request is (by its system prompt), or None."""
    system = message_text(messages, "system")
    return next((stage for stage, marker in STAGE_MARKERS.items() if system.startswith(marker)), None)


def extract_block(text: str, tag: str) -> str | None:
    """The body of ``<tag>...</tag>`` in a user prompt (last closing tag), or None."""
    open_, close = f"<{tag}>\n", f"\n</{tag}>"
    i, j = text.find(open_), text.rfind(close)
    return None if i == -1 or j < i else text[i + len(open_) : j]


_TRANSPORT = ("429", "500", "hang", "bad_body")
FAULTS = (
    *_TRANSPORT,
    "malformed_json",
    "truncated",
    "sloppy_latex",
    "verify_reject",
    "huge_reply",
    "deep_json",
    "prose",
)
_ERRORS = {
    "429": {"message": "Rate limit reached, slow down.", "type": "rate_limit_exceeded"},
    "500": {"message": "internal error", "type": "server_error"},
}


@dataclass
class Faults:
    """Per-request fault rates (probabilities, applied in this order) and their settings."""

    rate_429: float = 0.0
    rate_500: float = 0.0
    rate_hang: float = 0.0  # no reply until hang_s, then the connection closes
    rate_bad_body: float = 0.0  # HTTP 200 whose body is not JSON
    rate_malformed_json: float = 0.0  # message content whose JSON cannot be parsed
    rate_truncated: float = 0.0  # content cut in half, finish_reason "length"
    rate_sloppy_latex: float = 0.0  # LaTeX backslashes unescaped in JSON strings, as models write them
    rate_verify_reject: float = 0.0  # the verify stage answers "correct": false
    rate_prose: float = 0.0  # a friendly sentence instead of the JSON asked for
    retry_after_s: float = 0.05
    hang_s: float = 3.0
    huge_reply_bytes: int = 4 << 20  # the size of a "huge_reply" (forced only): one JSON string that long


def shift_numbers(text: str, by: int) -> str:
    """Every integer in ``text`` plus ``by``, except step labels ("Step 2")."""

    def repl(m: re.Match[str]) -> str:
        if text[max(0, m.start() - 5) : m.start()].lower() == "step ":
            return m.group(0)
        return str(int(m.group(1)) + by)

    return re.sub(r"(?<![\w.])(\d+)(?![\w])", repl, text)


def _facts_from(solution: str, question: str) -> list[str]:
    facts: list[str] = []
    for clause in re.split(r"[.;\n]|, (?=[A-Za-z])", solution):
        clause = re.sub(r"^\s*Step \d+:\s*", "", clause).strip()
        clause = re.sub(r"\\boxed\{[^}]*\}", "", clause).strip()
        if not clause or not re.search(r"\d", clause) or "answer" in clause.lower():
            continue
        words = clause.split()
        fact = " ".join(words[-8:]) if len(words) > 8 else clause
        if fact.lower() not in question.lower() and fact not in facts:
            facts.append(fact)
    fillers = ("the background is plain white", "the drawing is flat", "no other text is shown")
    return [*facts, *fillers[: max(0, 3 - len(facts))]][:6]


def teacher_reply(body: dict[str, Any], verify_ok: bool = True) -> dict[str, Any] | str:
    """The reply object (JSON-able) a plausible teacher gives to one of our stage prompts, or judge text."""
    messages = body.get("messages") or []
    stage = stage_of_messages(messages)
    user = message_text(messages, "user")
    solution = extract_block(user, "solution") or ""
    if stage == "verify":
        note = "The solution agrees with the evidence." if verify_ok else "The solution misreads the image."
        return {"correct": verify_ok, "note": note}
    if stage == "attributes":
        return {"facts": _facts_from(solution, extract_block(user, "question") or "")}
    if stage == "rewrite":
        lines = shift_numbers(solution, 2).split("\n")
        wrong = "Since every count here was already doubled, no further check is needed."
        lines.insert(max(1, len(lines) - 2), wrong)
        return {"misread": shift_numbers(solution, 1), "misread_and_misreasoned": "\n".join(lines)}
    n = max(1, len(re.findall(r"Answer of Assistant \d+", user)))
    scores = (8, 5, 2, 7, 4, 9, 3, 6, 1, 10)[:n]
    return "<think>Comparing the answers with the image.</think>" + "".join(
        f"<answer>{s}</answer>" for s in scores
    )


class FakeOpenAIServer:
    """See the module docstring. Use as a context manager or call start() / stop()."""

    def __init__(
        self,
        latency_s: float = 0.0,
        faults: Faults | None = None,
        seed: int = 0,
        model: str = "fake-teacher",
        api_key: str | None = None,
        record_requests: bool = False,
        reasoning: bool = False,
        listed: bool = True,
        models_api: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.latency_s = latency_s
        self.faults = faults or Faults()
        self.model = model
        self.api_key = api_key
        self.record_requests = record_requests  # keep every request body and its headers
        self.reasoning = reasoning  # replies carry a reasoning_content
        self.listed = listed  # GET /models lists the model (else only GET /models/NAME finds it)
        self.models_api = models_api  # False: GET /models... is 404, as on a proxy without the models API
        self.requests: list[dict[str, Any]] = []
        self.headers_seen: list[dict[str, str]] = []
        self._rng = random.Random(seed)
        self._forced: list[str | None] = []
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._in_flight = self._peak = 0
        self._address = (host, port)
        self._httpd: ThreadingHTTPServer | None = None

    def start(self) -> FakeOpenAIServer:
        self._httpd = _Server(self._address, type("Handler", (_Handler,), {"owner": self}))
        threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://{self._address[0]}:{self.port}/v1"

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {**self._counts, "peak_in_flight": self._peak, "in_flight": self._in_flight}

    def set_faults(self, faults: Faults) -> None:
        with self._lock:
            self.faults = faults

    def force(self, *faults: str | None) -> None:
        """Script the next requests: each gets one of :data:`FAULTS` or None (a normal reply), in order; after the
        script runs out, the random rates apply again."""
        if bad := [f for f in faults if f is not None and f not in FAULTS]:
            raise ValueError(f"unknown forced faults {bad}")
        with self._lock:
            self._forced.extend(faults)

    def _plan(self) -> set[str]:
        """The faults of the next request: the scripted one, or drawn at the rates of :attr:`faults` (at most one
        transport fault and one content fault, sloppy LaTeX and a verify rejection independently)."""
        with self._lock:
            if self._forced:
                return {self._forced.pop(0)} - {None}
            f, rng, plan = self.faults, self._rng, set()
            r, edge = rng.random(), 0.0
            for name in _TRANSPORT:
                edge += getattr(f, f"rate_{name}")
                if r < edge:
                    plan.add(name)
                    break
            v = rng.random()
            if v < f.rate_malformed_json + f.rate_truncated:
                plan.add("malformed_json" if v < f.rate_malformed_json else "truncated")
            if rng.random() < f.rate_sloppy_latex:
                plan.add("sloppy_latex")
            if rng.random() < f.rate_verify_reject:
                plan.add("verify_reject")
            if f.rate_prose and rng.random() < f.rate_prose:  # drawn only when set: other seeded plans stay
                plan.add("prose")
            return plan

    def _in_flight_delta(self, n: int) -> None:
        with self._lock:
            self._in_flight += n
            self._peak = max(self._peak, self._in_flight)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 256
    allow_reuse_address = True


class _Handler(BaseHTTPRequestHandler):
    owner: FakeOpenAIServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes: avoid the 40 ms delayed-ACK stall

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        """Send ``obj`` as JSON (bytes are sent as they are)."""
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode("utf-8")
        self.send_response(status)
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body)), **(headers or {})}
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str, kind: str) -> None:
        self.owner.count(f"status_{status}")
        self._json(status, {"error": {"message": message, "type": kind}})

    def _refused(self) -> bool:
        """A 401 sent when the server has a key and the request does not carry it."""
        srv = self.owner
        if srv.api_key is not None and self.headers.get("Authorization") != f"Bearer {srv.api_key}":
            self._error(401, "Incorrect API key provided.", "invalid_request_error")
            return True
        return False

    def do_GET(self) -> None:
        srv = self.owner
        srv.count("requests")
        srv.count("get_models")
        model = {"id": srv.model, "object": "model", "created": 0, "owned_by": "fake"}
        if self._refused():
            return
        if not srv.models_api:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
        elif self.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [model] if srv.listed else []})
        elif self.path.rstrip("/").endswith(f"/models/{srv.model}"):
            self._json(200, model)
        else:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        srv = self.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        srv.count("requests")
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        if srv.record_requests:
            with srv._lock:
                srv.headers_seen.append({k.lower(): v for k, v in self.headers.items()})
        if self._refused():
            return
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            self._error(400, "request body is not JSON", "invalid_request_error")
            return
        if srv.record_requests:
            with srv._lock:
                srv.requests.append(body)
        srv._in_flight_delta(1)
        try:
            self._complete(srv, body)
        finally:
            srv._in_flight_delta(-1)

    def _complete(self, srv: FakeOpenAIServer, body: dict[str, Any]) -> None:
        messages = body.get("messages") or []
        srv.count(f"stage_{stage_of_messages(messages) or 'judge'}")
        plan = srv._plan()
        if srv.latency_s:
            time.sleep(srv.latency_s)
        if transport := next(iter(plan & set(_TRANSPORT)), None):
            srv.count(f"fault_{transport}")
        if transport in _ERRORS:
            retry_after = {"Retry-After": f"{srv.faults.retry_after_s:g}"} if transport == "429" else None
            self._json(int(transport), {"error": _ERRORS[transport]}, retry_after)
            return
        if "hang" in plan:
            time.sleep(srv.faults.hang_s)
            self.close_connection = True
            return
        if "bad_body" in plan:
            self._json(200, b'{"id": "x", "choices": [ this is not json')
            return
        content = teacher_reply(body, "verify_reject" not in plan)
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False)
            if "sloppy_latex" in plan:
                srv.count("fault_sloppy_latex")
                content = content.replace("\\\\", "\\")  # LaTeX backslashes written once
            content = "```json\n" + content + "\n```" if len(content) % 3 == 0 else content
        finish = "stop"
        if "prose" in plan:
            srv.count("fault_prose")
            content = "I have checked the solution carefully and it looks right to me."
        elif "malformed_json" in plan:
            srv.count("fault_malformed_json")
            content = 'Here is the JSON you asked for: {"facts": [oops, 3]} -- hope it helps'
        elif "huge_reply" in plan:  # a runaway generation
            content = '{"note": "' + "x" * srv.faults.huge_reply_bytes + '"}'
        elif "deep_json" in plan:  # nested 5,000 deep
            content = "```json\n" + "[" * 5000 + "]" * 5000 + "\n```"
        elif "truncated" in plan:
            srv.count("fault_truncated")
            content, finish = content[: max(1, len(content) // 2)], "length"
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if srv.reasoning:
            message["reasoning_content"] = "Let me look at the request carefully."
        text_chars = sum(len(message_text(messages, r)) for r in ("system", "user"))
        prompt_tokens = text_chars // 4 + 256 * count_image_placeholders(messages, "image_url")
        completion_tokens = max(1, len(content) // 4)
        srv.count("status_200")
        srv.count("prompt_tokens", prompt_tokens)
        srv.count("completion_tokens", completion_tokens)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
        reply = {
            "id": f"chatcmpl-fake-{int(time.time() * 1000)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", srv.model),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {**usage, "total_tokens": prompt_tokens + completion_tokens},
        }
        self._json(200, reply)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Run the fake OpenAI-compatible teacher server until killed.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--latency", type=float, default=0.0, help="seconds added to every chat completion")
    p.add_argument("--model", default="fake-teacher")
    p.add_argument("--seed", type=int, default=0)
    for f in fields(Faults):
        p.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    args = p.parse_args(argv)
    faults = Faults(**{k: getattr(args, k) for k in asdict(Faults())})
    server = FakeOpenAIServer(args.latency, faults, args.seed, args.model, host=args.host, port=args.port)
    with server, contextlib.suppress(KeyboardInterrupt):
        print(f"READY {server.base_url}", flush=True)
        threading.Event().wait()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
