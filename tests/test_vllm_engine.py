"""Real vLLM engines on CPU (`make test-vllm`, in the .venv-vllm environment): the in-process ``vllm`` backend with
and without a LoRA adapter, an OpenAI-compatible vLLM server behind the ``openai`` backend, a PPJD build whose
teacher is a served model, sweeps over a LoRA run through the server, and a server killed in the middle of a sweep.

The judge is a tiny random-weight Qwen2.5-VL given a short supervised start on the tiny world, so that its greedy
verdicts differ from request to request (a bare random model writes the same newlines for every prompt, and
"identical outputs" would prove nothing)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[1]
POLICY_SIZE = 56
GREEDY_TOKENS = 16


OPINIONATED = {"do_sample": True, "temperature": 0.1, "top_p": 0.5, "top_k": 5, "repetition_penalty": 1.05,
               "no_repeat_ngram_size": 2, "min_new_tokens": 6}  # fmt: skip
API_KEY = "not-a-secret"  # the server checks none; it must still never reach a file


def _env() -> dict[str, str]:
    from support.vllm_server import cpu_env

    return cpu_env() | {"OPENAI_API_KEY": API_KEY}


def _cli(*args: str, cwd: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "perception_judge.cli", *args],
        cwd=cwd or REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def vllm_installed():
    from conftest import skip_or_fail

    if importlib.util.find_spec("vllm") is None:
        skip_or_fail(
            "vllm",
            "vLLM is not installed in this environment (make test-vllm installs .venv-vllm/ and runs here)",
        )


@pytest.fixture(scope="module")
def judge_dir(vllm_installed, tmp_path_factory):
    from perception_judge.tiny.models import make_tiny_model
    from perception_judge.tiny.supervised import supervised_tiny_judge

    d = make_tiny_model("qwen2_5_vl", tmp_path_factory.mktemp("judge"), seed=0)
    supervised_tiny_judge(d, 200, think_source="truth", seed=0)
    # decoding settings of its own in generation_config.json, as Qwen2.5-VL-derived checkpoints ship
    # (repetition_penalty 1.05, top_k, top_p): every backend sends its own, so none may judge with these
    path = Path(d) / "generation_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **OPINIONATED}))
    return Path(d)


@pytest.fixture(scope="module")
def adapter_dir(judge_dir, tmp_path_factory):
    """A LoRA adapter with random (non-zero) weights on the language model: it changes the verdicts."""
    from conftest import random_lora_adapter

    out = tmp_path_factory.mktemp("lora") / "checkpoint-2"
    return random_lora_adapter(judge_dir, out, r=8, alpha=32, targets=["q_proj", "v_proj", "o_proj"])


@pytest.fixture(scope="module")
def requests_(tmp_path_factory):
    """16 tiny-world pair and batch judge requests (tiny prompt style) with their images on disk."""
    from perception_judge.core.protocol import build_messages
    from perception_judge.core.schema import JudgeRequest
    from perception_judge.tiny.supervised import tiny_records

    d = tmp_path_factory.mktemp("images")
    out = []
    for i, rec in enumerate(tiny_records(16, seed=7)):
        path = d / f"{rec['key']}.png"
        rec["image"].save(path)
        kinds = ["r_c", "r_rp"] if i % 2 == 0 else ["r_c", "r_rp", "r_rp_r"]
        kinds = kinds[(i // 2) % len(kinds) :] + kinds[: (i // 2) % len(kinds)]  # r_c in every slot
        responses = [rec["responses"][k] for k in kinds]
        protocol = "pair" if len(kinds) == 2 else "batch"
        messages = build_messages(protocol, rec["question"], responses, n_images=1, style="tiny")
        out.append(JudgeRequest(f"req-{i}", messages, [str(path)], n_scores=len(kinds)))
    return out


def _greedy():
    from perception_judge.core.schema import Sampling

    return Sampling(temperature=0.0, max_new_tokens=GREEDY_TOKENS, seed=0)


def _hf(judge_dir, adapter=None):
    from perception_judge.core.images import PixelPolicy
    from perception_judge.evaluation.backends.hf import HFBackend

    return HFBackend(
        judge_dir,
        adapter=adapter,
        batch_size=8,
        dtype="float32",
        device="cpu",
        pixel_policy=PixelPolicy(size=POLICY_SIZE),
        progress=False,
    )


@pytest.fixture(scope="module")
def hf_outputs(judge_dir, adapter_dir, requests_):
    """Greedy texts of the hf backend: the base judge and the judge with the adapter."""
    out = {}
    for name, adapter in (("base", None), ("adapter", adapter_dir)):
        b = _hf(judge_dir, adapter)
        out[name] = [r.text for r in b.judge(requests_, _greedy())]
        b.close()
    assert len(set(out["base"])) >= 3, "the judge should write different verdicts per request"
    assert out["base"] != out["adapter"], "the random adapter should change some verdicts"
    return out


def test_the_judge_folders_decoding_settings_would_change_the_verdicts(judge_dir, requests_, hf_outputs):
    """The check below has teeth: a ``generate`` that leaves the decoding fields unset takes the folder's
    (repetition penalty, no-repeat n-grams) and writes other texts than the backends, which set them all."""
    import torch
    from transformers import AutoModelForImageTextToText

    from perception_judge.core.protocol import render_generation_prompt

    hf = _hf(judge_dir)
    model = AutoModelForImageTextToText.from_pretrained(judge_dir).eval()
    texts = []
    for req in requests_[:6]:
        images = hf.prepare_images(req)
        prompt = render_generation_prompt(hf.processor, req.messages, "auto")
        inputs = hf.processor(text=[prompt], images=images, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=GREEDY_TOKENS, do_sample=False)
        new = out[0, inputs["input_ids"].shape[1] :]
        texts.append("<think>\n" + hf.processor.decode(new, skip_special_tokens=True))
    assert texts != hf_outputs["base"][:6]


@pytest.fixture(scope="module")
def engine(judge_dir, hf_outputs):  # the hf references first: one model in memory at a time
    from perception_judge.core.images import PixelPolicy
    from perception_judge.evaluation.backends.vllm import VLLMBackend

    b = VLLMBackend(
        judge_dir,
        enable_lora=True,
        max_lora_rank=8,
        dtype="float32",
        max_model_len=2048,
        pixel_policy=PixelPolicy(size=POLICY_SIZE),
        engine_extra={"enable_chunked_prefill": False, "max_num_batched_tokens": 8192},
    )
    yield b
    b.close()


def test_vllm_backend_greedy_equals_hf(engine, requests_, hf_outputs):
    from perception_judge.evaluation.base import is_backend_error

    out = engine.judge(requests_, _greedy())
    assert not any(is_backend_error(r) for r in out)
    assert [r.text for r in out] == hf_outputs["base"]
    assert engine.describe()["engine"]["dtype"] == "float32"  # the CPU-safe default, not bf16


def test_vllm_backend_with_lora_adapter_equals_hf_with_adapter(engine, adapter_dir, requests_, hf_outputs):
    adapted = engine.for_adapter(adapter_dir)
    texts = [r.text for r in adapted.judge(requests_, _greedy())]
    assert texts == hf_outputs["adapter"]
    assert texts != hf_outputs["base"]
    # the base engine is untouched by the adapter's requests
    assert [r.text for r in engine.judge(requests_[:4], _greedy())] == hf_outputs["base"][:4]


def test_vllm_backend_sampling_is_seeded_per_request(engine, requests_):
    from perception_judge.core.schema import Sampling

    s = Sampling(temperature=1.0, top_p=1.0, max_new_tokens=GREEDY_TOKENS, seed=3)
    first = [r.text for r in engine.judge(requests_, s)]
    again = [r.text for r in engine.judge(list(reversed(requests_)), s)]
    assert first == list(reversed(again))  # a request's sample does not depend on its batch or its place


# ------------------------------------------------------------------------------------------------ a real server
def _server(judge_dir: Path, adapter_dir: Path, folder: Path, port: int | None = None):
    """A server for the judge and its adapter (served as ``checkpoint-2``), rendering the judge's chat template
    with the think prefill as the other backends do."""
    from support.vllm_server import VLLMServer

    from perception_judge.evaluation.chat_template import judge_chat_template

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "judge.jinja").write_text(judge_chat_template(judge_dir))
    return VLLMServer(
        judge_dir,
        folder / f"vllm-{time.monotonic_ns()}.log",
        port=port,
        max_model_len=2048,
        lora_modules={"checkpoint-2": adapter_dir},
        chat_template=folder / "judge.jinja",
    )


@pytest.fixture(scope="module")
def server(judge_dir, adapter_dir, tmp_path_factory):
    with _server(judge_dir, adapter_dir, tmp_path_factory.mktemp("server")) as srv:
        yield srv


def _openai(server, model, **kw):
    from perception_judge.core.images import PixelPolicy
    from perception_judge.evaluation.backends.openai import OpenAIBackend

    return OpenAIBackend(
        model,
        base_urls=[server.base_url],
        api_key=API_KEY,
        concurrency=8,
        max_retries=1,
        backoff_base_s=0.05,
        backoff_max_s=0.1,
        pixel_policy=PixelPolicy(size=POLICY_SIZE),
        progress=False,
        server="vllm",  # send every sampling field, or the server takes the folder's
        **kw,
    )


def _scores(results):
    return [r.scores for r in results]


def test_openai_backend_against_the_vllm_server(server, judge_dir, adapter_dir, requests_, engine):
    from perception_judge.evaluation.base import is_backend_error

    assert set(server.served_models()) == {str(judge_dir), "checkpoint-2"}
    base = _openai(server, str(judge_dir)).judge(requests_, _greedy())
    assert not any(is_backend_error(r) for r in base)
    # the server renders the same chat template from the same messages: the same verdicts as in-process
    assert _scores(base) == _scores(engine.judge(requests_, _greedy()))
    adapted = _openai(server, "checkpoint-2").judge(requests_, _greedy())
    assert not any(is_backend_error(r) for r in adapted)
    assert _scores(adapted) == _scores(engine.for_adapter(adapter_dir).judge(requests_, _greedy()))
    assert _scores(adapted) != _scores(base)


def test_openai_backend_names_a_model_the_server_does_not_serve(server, requests_):
    from perception_judge.evaluation.base import is_backend_error

    out = _openai(server, "no-such-model").judge(requests_[:2], _greedy())
    assert all(is_backend_error(r) for r in out)
    assert "no-such-model" in (out[0].error or "")


def _lora_run(root: Path, judge_dir: Path, adapter_dir: Path) -> Path:
    """A training-run folder as train_grpo.py writes it for LoRA: the run file and one adapter checkpoint."""
    from perception_judge.core.images import PixelPolicy
    from perception_judge.core.runinfo import RUN_FILE

    root.mkdir(parents=True)
    shutil.copytree(adapter_dir, root / "checkpoint-2")
    info = {
        "base_model": str(judge_dir),
        "model_type": "qwen2_5_vl",
        "tuning": "lora",
        "think_prefix": "auto",
        "pixel_policy": PixelPolicy(size=POLICY_SIZE).to_dict(),
        "rewards": {},
        "train_set": None,
    }
    (root / RUN_FILE).write_text(json.dumps(info))
    return root


SWEEP_FLAGS = ["--config", "eval/configs/tiny.yaml", "--suites", "bias", "--set", "bias.n_items=8", "-q"]


def _sweep_args(run: Path, out: Path, url: str) -> list[str]:
    return [sys.executable, "-m", "perception_judge.cli", "eval", "sweep", str(run), "--backend", "openai",
            "--base-url", url, "--out", str(out), "--max-new-tokens", str(GREEDY_TOKENS), "--temperature", "0",
            "--set", "backend.max_retries=1", *SWEEP_FLAGS]  # fmt: skip


def _sweep(run: Path, out: Path, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _sweep_args(run, out, url), cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600
    )


def _cells(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((out / "cells").glob("*.json"))}


def _raw_outputs(cell: dict) -> list[str]:
    path = Path(cell["result"]["samples_path"])
    path = path if path.is_absolute() else REPO / path
    return [
        json.loads(line).get("raw") or json.dumps(json.loads(line)) for line in path.read_text().splitlines()
    ]


def test_sweep_over_a_lora_run_with_the_server(server, judge_dir, adapter_dir, tmp_path):
    run = _lora_run(tmp_path / "run", judge_dir, adapter_dir)
    proc = _sweep(run, tmp_path / "eval", server.base_url)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = _cells(tmp_path / "eval")
    assert {c["model"] for c in cells.values()} == {"base", "checkpoint-2"}
    assert all(
        c["status"] == "done" and not c["result"]["counts"]["n_backend_errors"] for c in cells.values()
    )
    # the checkpoint was scored by its adapter, not by the base model
    assert _raw_outputs(cells["base__bias__seed0"]) != _raw_outputs(cells["checkpoint-2__bias__seed0"])
    assert not any(API_KEY in p.read_text() for p in (tmp_path / "eval").rglob("*.json*"))


def test_server_killed_mid_sweep_fails_the_cells_and_a_rerun_completes(judge_dir, adapter_dir, tmp_path):
    run = _lora_run(tmp_path / "run", judge_dir, adapter_dir)
    srv = _server(judge_dir, adapter_dir, tmp_path / "server")
    with srv:
        sweep = subprocess.Popen(
            _sweep_args(run, tmp_path / "eval", srv.base_url), cwd=REPO, env=_env(), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 300
        while not any(c["status"] == "done" for c in _cells(tmp_path / "eval").values()):
            assert sweep.poll() is None and time.monotonic() < deadline, (
                "the sweep ended before a cell was done"
            )
            time.sleep(0.2)
        srv.kill()  # the base model's cell is done; the checkpoint's is running or next
        out, _ = sweep.communicate(timeout=600)
    done_before = _cells(tmp_path / "eval")["base__bias__seed0"].get("finished")
    assert sweep.returncode != 0, out[-3000:]
    status = {name: c["status"] for name, c in _cells(tmp_path / "eval").items()}
    assert status == {"base__bias__seed0": "done", "checkpoint-2__bias__seed0": "failed"}, status
    assert "checkpoint-2" in out and "failed" in out
    with _server(judge_dir, adapter_dir, tmp_path / "server", port=srv.port):
        proc = _sweep(run, tmp_path / "eval", srv.base_url)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = _cells(tmp_path / "eval")
    assert {c["status"] for c in cells.values()} == {"done"}
    assert cells["base__bias__seed0"]["finished"] == done_before  # resumed, not redone


# ------------------------------------------------------------------------------------------------ a served teacher
def test_build_ppjd_with_a_served_teacher_loses_nothing(judge_dir, tmp_path):
    """data_gen/serve_teacher.sh starts the CPU server; build-ppjd --teacher llm runs against it. A tiny random
    teacher writes nonsense, so most items fail -- each with a stage and a reason -- and none is lost."""
    from support.vllm_server import cpu_env, free_port

    port = free_port()
    env = cpu_env() | {"MODEL": str(judge_dir), "GPUS": "cpu", "PYTHON": sys.executable, "BASE_PORT": str(port),
                       "MAX_LEN": "4096", "WAIT_S": "300", "LOGS": str(tmp_path / "logs")}  # fmt: skip
    (tmp_path / "runs").mkdir()
    serve = subprocess.run(
        ["bash", str(REPO / "data_gen" / "serve_teacher.sh")], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=400,
    )  # fmt: skip
    pids = (tmp_path / "runs" / "teachers.pids").read_text().split()
    try:
        assert serve.returncode == 0, serve.stderr[-3000:]
        url = f"http://127.0.0.1:{port}/v1"
        assert f"--base-url {url}" in serve.stdout
        synth = _cli("synth", "--n", "6", "--seed", "0", "--out", str(tmp_path / "synth"), "--no-progress")
        assert synth.returncode == 0, synth.stderr[-2000:]
        build = _cli(
            "build-ppjd", "--input", str(tmp_path / "synth"), "--out", str(tmp_path / "ppjd"), "--teacher", "llm",
            "--base-url", url, "--model", str(judge_dir), "--max-retries", "1", "--stage-attempts", "1",
            "--timeout", "120", "--no-progress",
        )  # fmt: skip
    finally:
        subprocess.run(["kill", *pids], check=False)
    assert build.returncode in (0, 1), build.stderr[-3000:]
    records = [
        json.loads(line)
        for f in sorted((tmp_path / "ppjd").glob("records-*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    failures = [json.loads(line) for line in (tmp_path / "ppjd" / "failures.jsonl").read_text().splitlines()]
    keys = {r["key"] for r in records} | {f["key"] for f in failures}
    items = [json.loads(line) for line in (tmp_path / "synth" / "items.jsonl").read_text().splitlines()]
    assert len(keys) == len(items) == 6 and not ({r["key"] for r in records} & {f["key"] for f in failures})
    assert all(f.get("stage") and f.get("reason") for f in failures)
