"""A local OpenAI-compatible server for tests and benchmarks: plausible teacher replies, latency and faults.

Runs in a background thread on 127.0.0.1 with an ephemeral port (or as a process:
``python -m perception_judge.testing.fake_openai --latency 0.2``, which prints ``READY <base_url>``).

* ``POST /v1/chat/completions`` answers like a teacher for our PPJD stage prompts (recognised by
  :func:`perception_judge.ppjd.teacher.stage_of_messages`): verify -> ``{"correct": true}``; attributes ->
  facts taken from the solution's clauses with numbers; rewrite -> the solution with every number (except
  step labels) shifted by +1 (r_rp) and +2 plus one extra wrong sentence (r_rp+r). Judge prompts get one
  ``<answer>`` tag per "Answer of Assistant" heading. Replies depend only on the request, so runs are
  reproducible.
* ``GET /v1/models`` lists the model.
* Faults, each with its own rate (:class:`Faults`): 429 with ``Retry-After``, 500, a hang (no reply until
  ``hang_s``, then the connection closes), an unreadable body, malformed JSON content, truncated content
  (``finish_reason="length"``), and "sloppy LaTeX" JSON (single backslashes, as models often write it).
* Thread-safe counters (:meth:`FakeOpenAIServer.stats`): requests, per status, per stage, per fault, the peak
  number of requests in flight. Optionally every request body is kept (``record_requests=True``).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from perception_judge.core.protocol import count_image_placeholders
from perception_judge.ppjd.teacher import (
    STAGE_ATTRIBUTES,
    STAGE_REWRITE,
    STAGE_VERIFY,
    extract_block,
    stage_of_messages,
)


@dataclass
class Faults:
    """Per-request fault rates (probabilities, applied in this order) and their settings."""

    rate_429: float = 0.0
    rate_500: float = 0.0
    rate_hang: float = 0.0
    rate_bad_body: float = 0.0  # HTTP 200 whose body is not JSON
    rate_malformed_json: float = 0.0  # message content whose JSON cannot be parsed
    rate_truncated: float = 0.0  # content cut in half, finish_reason "length"
    rate_sloppy_latex: float = 0.0  # JSON strings with single (unescaped) LaTeX backslashes
    rate_verify_reject: float = 0.0  # the verify stage answers "correct": false
    retry_after_s: float = 0.05
    hang_s: float = 3.0

    def total_transport(self) -> float:
        return self.rate_429 + self.rate_500 + self.rate_hang + self.rate_bad_body


_STEP_RE = re.compile(r"(?<![\w.])(\d+)(?![\w])")


def shift_numbers(text: str, by: int) -> str:
    """Every integer in ``text`` plus ``by``, except step labels ("Step 2")."""

    def repl(m: re.Match[str]) -> str:
        start = m.start()
        if text[max(0, start - 5) : start].lower() == "step ":
            return m.group(0)
        return str(int(m.group(1)) + by)

    return _STEP_RE.sub(repl, text)


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
    for filler in ("the background is plain white", "the drawing is flat", "no other text is shown"):
        if len(facts) >= 3:
            break
        facts.append(filler)
    return facts[:6]


def _text_of(messages: list[dict[str, Any]], role: str) -> str:
    out = []
    for m in messages:
        if m.get("role") != role:
            continue
        c = m.get("content")
        if isinstance(c, str):
            out.append(c)
        elif isinstance(c, list):
            out.extend(p.get("text", "") for p in c if isinstance(p, dict) and p.get("type") == "text")
    return "\n".join(out)


def teacher_reply(body: dict[str, Any], verify_ok: bool = True) -> dict[str, Any] | str:
    """The reply object (JSON-able) a plausible teacher gives to one of our stage prompts, or judge text."""
    messages = body.get("messages") or []
    stage = stage_of_messages(messages)
    user = _text_of(messages, "user")
    solution = extract_block(user, "solution") or ""
    question = extract_block(user, "question") or ""
    if stage == STAGE_VERIFY:
        note = "The solution agrees with the evidence." if verify_ok else "The solution misreads the image."
        return {"correct": verify_ok, "note": note}
    if stage == STAGE_ATTRIBUTES:
        return {"facts": _facts_from(solution, question)}
    if stage == STAGE_REWRITE:
        r_rp = shift_numbers(solution, 1)
        r_rp_r = shift_numbers(solution, 2)
        lines = r_rp_r.split("\n")
        lines.insert(
            max(1, len(lines) - 2), "Since every count here was already doubled, no further check is needed."
        )
        return {"misread": r_rp, "misread_and_misreasoned": "\n".join(lines)}
    n = max(1, len(re.findall(r"Answer of Assistant \d+", user)))
    return "<think>Comparing the answers with the image.</think>" + "".join(
        f"<answer>{s}</answer>" for s in (8, 5, 2, 7, 4, 9, 3, 6, 1, 10)[:n]
    )


def _sloppy(json_text: str) -> str:
    """JSON with LaTeX backslashes written once (as models do): ``\\\\boxed`` -> ``\\boxed``."""
    return json_text.replace("\\\\", "\\")


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
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.latency_s = latency_s
        self.faults = faults or Faults()
        self.model = model
        self.api_key = api_key
        self.record_requests = record_requests
        self.reasoning = reasoning
        self.requests: list[dict[str, Any]] = []
        self.headers_seen: list[dict[str, str]] = []
        self._rng = random.Random(seed)
        self._forced: list[str | None] = []
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._in_flight = 0
        self._peak = 0
        self._host, self._port = host, port
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------------------

    def start(self) -> FakeOpenAIServer:
        server = self

        class Handler(_Handler):
            owner = server

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False
            request_queue_size = 256
            allow_reuse_address = True

        self._httpd = Server((self._host, self._port), Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
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
        return f"http://{self._host}:{self.port}/v1"

    # -- counters ------------------------------------------------------------------------------------------

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def stats(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = dict(self._counts)
            out["peak_in_flight"] = self._peak
            out["in_flight"] = self._in_flight
            return out

    def reset_stats(self) -> None:
        with self._lock:
            self._counts.clear()
            self._peak = 0
            self.requests.clear()
            self.headers_seen.clear()

    def set_faults(self, faults: Faults) -> None:
        with self._lock:
            self.faults = faults

    def _enter(self) -> None:
        with self._lock:
            self._in_flight += 1
            self._peak = max(self._peak, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def force(self, *faults: str | None) -> None:
        """Script the next requests: each gets one of ``429``, ``500``, ``hang``, ``bad_body``,
        ``malformed_json``, ``truncated``, ``sloppy_latex``, ``verify_reject`` or None (a normal reply), in order;
        after the script runs out, the random rates apply again."""
        allowed = {
            "429",
            "500",
            "hang",
            "bad_body",
            "malformed_json",
            "truncated",
            "sloppy_latex",
            "verify_reject",
            None,
        }
        bad = [f for f in faults if f not in allowed]
        if bad:
            raise ValueError(f"unknown forced faults {bad}")
        with self._lock:
            self._forced.extend(faults)

    def _plan(self) -> dict[str, Any]:
        """What to do with the next request: transport fault, sloppy LaTeX, content fault, verify verdict."""
        with self._lock:
            if self._forced:
                f = self._forced.pop(0)
                transport = f if f in ("429", "500", "hang", "bad_body") else None
                return {
                    "transport": transport,
                    "sloppy": f == "sloppy_latex",
                    "content": f if f in ("malformed_json", "truncated") else None,
                    "verify_ok": f != "verify_reject",
                }
            f = self.faults
            r = self._rng.random()
            transport = None
            edge = 0.0
            for name, rate in (
                ("429", f.rate_429),
                ("500", f.rate_500),
                ("hang", f.rate_hang),
                ("bad_body", f.rate_bad_body),
            ):
                edge += rate
                if r < edge:
                    transport = name
                    break
            v = self._rng.random()
            content = None
            if v < f.rate_malformed_json:
                content = "malformed_json"
            elif v < f.rate_malformed_json + f.rate_truncated:
                content = "truncated"
            return {
                "transport": transport,
                "sloppy": self._rng.random() < f.rate_sloppy_latex,
                "content": content,
                "verify_ok": self._rng.random() >= f.rate_verify_reject,
            }


class _Handler(BaseHTTPRequestHandler):
    owner: FakeOpenAIServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes: avoid the 40 ms delayed-ACK stall

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(obj).encode("utf-8"), headers)

    def do_GET(self) -> None:
        srv = self.owner
        srv.count("requests")
        if self.path.rstrip("/").endswith("/models"):
            self._json(
                200, {"object": "list", "data": [{"id": srv.model, "object": "model", "owned_by": "fake"}]}
            )
        else:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        srv = self.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        srv.count("requests")
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        if srv.record_requests:
            with srv._lock:
                srv.headers_seen.append({k.lower(): v for k, v in self.headers.items()})
        if srv.api_key is not None and self.headers.get("Authorization") != f"Bearer {srv.api_key}":
            srv.count("status_401")
            self._json(
                401, {"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error"}}
            )
            return
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            srv.count("status_400")
            self._json(
                400, {"error": {"message": "request body is not JSON", "type": "invalid_request_error"}}
            )
            return
        if srv.record_requests:
            with srv._lock:
                srv.requests.append(body)
        srv._enter()
        try:
            self._complete(srv, body)
        finally:
            srv._leave()

    def _complete(self, srv: FakeOpenAIServer, body: dict[str, Any]) -> None:
        stage = stage_of_messages(body.get("messages") or []) or "judge"
        srv.count(f"stage_{stage}")
        plan = srv._plan()
        fault = plan["transport"]
        if srv.latency_s:
            time.sleep(srv.latency_s)
        faults = srv.faults
        if fault == "429":
            srv.count("fault_429")
            self._json(
                429,
                {"error": {"message": "Rate limit reached, slow down.", "type": "rate_limit_exceeded"}},
                {"Retry-After": f"{faults.retry_after_s:g}"},
            )
            return
        if fault == "500":
            srv.count("fault_500")
            self._json(500, {"error": {"message": "internal error", "type": "server_error"}})
            return
        if fault == "hang":
            srv.count("fault_hang")
            time.sleep(faults.hang_s)
            self.close_connection = True
            return
        if fault == "bad_body":
            srv.count("fault_bad_body")
            self._send(200, b'{"id": "x", "choices": [ this is not json')
            return
        reply = teacher_reply(body, plan["verify_ok"])
        finish = "stop"
        if isinstance(reply, str):
            content = reply
        else:
            content = json.dumps(reply, ensure_ascii=False)
            if plan["sloppy"]:
                srv.count("fault_sloppy_latex")
                content = _sloppy(content)
            content = "```json\n" + content + "\n```" if len(content) % 3 == 0 else content
        if plan["content"] == "malformed_json":
            srv.count("fault_malformed_json")
            content = 'Here is the JSON you asked for: {"facts": [oops, 3]} -- hope it helps'
        elif plan["content"] == "truncated":
            srv.count("fault_truncated")
            content = content[: max(1, len(content) // 2)]
            finish = "length"
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if srv.reasoning:
            message["reasoning_content"] = "Let me look at the request carefully."
        text_chars = sum(len(_text_of(body.get("messages") or [], r)) for r in ("system", "user"))
        prompt_tokens = text_chars // 4 + 256 * count_image_placeholders(
            body.get("messages") or [], "image_url"
        )
        completion_tokens = max(1, len(content) // 4)
        srv.count("status_200")
        srv.count("prompt_tokens", prompt_tokens)
        srv.count("completion_tokens", completion_tokens)
        self._json(
            200,
            {
                "id": f"chatcmpl-fake-{int(time.time() * 1000)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", srv.model),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            },
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Run the fake OpenAI-compatible teacher server until killed.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--latency", type=float, default=0.0, help="seconds added to every chat completion")
    p.add_argument("--model", default="fake-teacher")
    p.add_argument("--seed", type=int, default=0)
    for name in Faults.__dataclass_fields__:
        if name.startswith("rate_"):
            p.add_argument(f"--{name.replace('_', '-')}", type=float, default=0.0, dest=name)
    p.add_argument("--retry-after-s", type=float, default=0.05)
    p.add_argument("--hang-s", type=float, default=3.0)
    args = p.parse_args(argv)
    faults = Faults(**{k: getattr(args, k) for k in asdict(Faults())})
    server = FakeOpenAIServer(
        args.latency, faults, args.seed, args.model, host=args.host, port=args.port
    ).start()
    print(f"READY {server.base_url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["FakeOpenAIServer", "Faults", "shift_numbers", "teacher_reply"]
