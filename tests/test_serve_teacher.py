"""data_gen/serve_teacher.sh: it used to wait forever for a server that had died. Now a server that exits or never
answers stops it with the tail of its log, and a server that answers gives the --base-url flags."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "data_gen" / "serve_teacher.sh"

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="serve_teacher.sh needs curl")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _shim(tmp_path: Path, body: str) -> Path:
    """A stand-in for the python that would run vLLM: ``$@`` holds the api_server arguments."""
    path = tmp_path / "python-shim"
    path.write_text("#!/usr/bin/env bash\n" + body + "\n")
    path.chmod(0o755)
    return path


def _run(
    tmp_path: Path, shim: Path, port: int, wait_s: int = 60
) -> tuple[subprocess.CompletedProcess, float]:
    env = {
        **os.environ, "PYTHON": str(shim), "GPUS": "cpu", "BASE_PORT": str(port), "WAIT_S": str(wait_s),
        "LOGS": str(tmp_path / "logs"), "MODEL": "tiny", "PYTHONPATH": str(REPO),
    }  # fmt: skip
    (tmp_path / "runs").mkdir(exist_ok=True)
    started = time.monotonic()
    proc = subprocess.run(
        ["bash", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    return proc, time.monotonic() - started


def test_a_server_that_dies_stops_the_wait_with_its_log(tmp_path):
    shim = _shim(tmp_path, 'echo "ValueError: no model tiny" >&2; exit 3')
    proc, took = _run(tmp_path, shim, _free_port())
    assert proc.returncode == 1 and took < 30
    assert "exited" in proc.stderr and "ValueError: no model tiny" in proc.stderr


def test_a_server_that_never_answers_times_out(tmp_path):
    shim = _shim(tmp_path, "sleep 60")
    proc, took = _run(tmp_path, shim, _free_port(), wait_s=3)
    assert proc.returncode == 1 and took < 30 and "did not answer within 3 s" in proc.stderr
    for pid in (tmp_path / "runs" / "teachers.pids").read_text().split():
        subprocess.run(["kill", pid], capture_output=True)


def test_a_server_that_answers_gives_the_base_url(tmp_path):
    port = _free_port()
    # the api_server flags include --model and --port; serve the fake OpenAI server on that port instead
    shim = _shim(
        tmp_path,
        'while [ $# -gt 0 ]; do [ "$1" = --port ] && port=$2; shift; done\n'
        f'exec {sys.executable} {REPO}/tests/support/fake_openai.py --port "$port"',
    )
    try:
        proc, _ = _run(tmp_path, shim, port)
    finally:
        for pid in (tmp_path / "runs" / "teachers.pids").read_text().split():
            subprocess.run(["kill", pid], capture_output=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"--base-url http://127.0.0.1:{port}/v1"
