"""Judge backends: the spec factory, scripted judges, the hf backend on a tiny model with a LoRA adapter, the
vLLM request builders (pure, CPU) and the OpenAI-compatible backend against the local fake server."""

from __future__ import annotations

import importlib.util
import types
from typing import ClassVar

import pytest
from PIL import Image

from perception_judge.core.images import PixelPolicy
from perception_judge.core.protocol import build_messages, render_generation_prompt
from perception_judge.core.schema import JudgeRequest, Sampling
from perception_judge.evaluation.backends import load_backend, parse_spec
from perception_judge.evaluation.backends.scripted import ScriptedBackend, scripted_fn
from perception_judge.evaluation.base import is_backend_error, request_sampling, request_seed


def _req(i: int, n_images: int = 1, protocol: str = "single") -> JudgeRequest:
    responses = ["There are three red circles."] if protocol == "single" else ["three", "four"]
    return JudgeRequest(
        f"req-{i}",
        build_messages(protocol, f"How many red circles? ({i})", responses, n_images),
        [Image.new("RGB", (64, 48), (20 * i % 256, 40, 90)) for _ in range(n_images)],
        n_scores=1 if protocol == "single" else 2,
    )


def test_request_seed_is_stable_and_spread():
    assert request_seed(0, "a") == request_seed(0, "a")
    assert len({request_seed(s, r) for s in range(3) for r in "abc"}) == 9
    assert 0 <= request_seed(123, "x") < 2**31


def test_parse_spec_and_scripted_factory():
    assert parse_spec("hf:/models/x") == {"kind": "hf", "model": "/models/x"}
    assert parse_spec("openai:gpt-4o") == {"kind": "openai", "model": "gpt-4o"}
    assert parse_spec({"backend": "vllm", "model": "m"}) == {"kind": "vllm", "model": "m"}
    for bad in ("x", "gpu:/m", "hf:", {"model": "m"}):
        with pytest.raises(ValueError):
            parse_spec(bad)
    b = load_backend("scripted:constant:5", pixel_policy={"mode": "fixed", "size": 56})
    assert isinstance(b, ScriptedBackend) and b.pixel_policy.size == 56
    (r,) = b.judge([_req(0)], Sampling())
    assert r.scores == [5.0]
    (r,) = load_backend("scripted:garbage").judge([_req(0)], Sampling())
    assert r.scores is None and r.error
    r1 = load_backend("scripted:random").judge([_req(0, protocol="pair")], Sampling(seed=1))[0]
    r2 = load_backend("scripted:random").judge([_req(0, protocol="pair")], Sampling(seed=1))[0]
    assert r1.scores == r2.scores and len(r1.scores) == 2
    assert scripted_fn("perception_judge.evaluation.backends.scripted:garbage_judge")(_req(0), Sampling())
    with pytest.raises(ValueError):
        scripted_fn("nope")


# ------------------------------------------------------------------------------------------------ hf backend
@pytest.fixture(scope="module")
def lora_adapter(tiny_qwen25, tmp_path_factory):
    from conftest import random_lora_adapter

    return random_lora_adapter(
        tiny_qwen25, tmp_path_factory.mktemp("lora"), r=4, alpha=16, targets=["q_proj", "v_proj"]
    )


@pytest.fixture(scope="module")
def hf_base(tiny_qwen25):
    from perception_judge.evaluation.backends.hf import HFBackend

    return HFBackend(
        tiny_qwen25,
        batch_size=4,
        device="cpu",
        dtype="float32",
        progress=False,
        pixel_policy=PixelPolicy(size=56),
    )


SAMPLED = Sampling(temperature=1.0, top_p=0.95, top_k=20, max_new_tokens=8, seed=7)


def test_hf_backend_batches_isolates_bad_requests_and_seeds(hf_base):
    reqs = [_req(i) for i in range(5)] + [_req(5, n_images=0)]
    bad_path = JudgeRequest("bad-image", build_messages("single", "q", ["r"], 1), ["/nonexistent/x.png"])
    mismatch = JudgeRequest("mismatch", build_messages("single", "q", ["r"], 2), [Image.new("RGB", (8, 8))])
    out = hf_base.judge([*reqs[:3], bad_path, *reqs[3:], mismatch], SAMPLED)
    assert [r.request_id for r in out] == [
        "req-0",
        "req-1",
        "req-2",
        "bad-image",
        "req-3",
        "req-4",
        "req-5",
        "mismatch",
    ]
    assert is_backend_error(out[3]) and "missing" in out[3].error
    assert is_backend_error(out[7]) and "placeholder" in out[7].error
    good = [r for r in out if not is_backend_error(r)]
    assert len(good) == 6
    for r in good:
        assert r.text.startswith("<think>\n")  # the prefill is put back in front of the completion
        assert 1 <= r.completion_tokens <= 8 and r.prompt_tokens > 100
        assert (
            r.scores is None and r.error
        )  # random weights never produce a verdict: a parse failure, not a crash
    again = hf_base.judge([*reqs[:3], bad_path, *reqs[3:], mismatch], SAMPLED)
    assert [r.text for r in again] == [r.text for r in out]  # same seed, same batches: same samples
    other = hf_base.judge(
        [*reqs[:3], bad_path, *reqs[3:], mismatch], Sampling(**{**SAMPLED.__dict__, "seed": 8})
    )
    assert [r.text for r in other] != [r.text for r in out]
    d = hf_base.describe()
    assert (
        d["backend"] == "hf"
        and d["pixel_policy"]["size"] == 56
        and d["think_prefix"] == "auto"
        and d["weights_fingerprint"]
    )


def test_hf_backend_survives_a_failing_batch(hf_base, monkeypatch):
    real = hf_base._generate

    def flaky(batch, sampling):
        if any(req.request_id == "req-2" for _, req, _ in batch):
            raise RuntimeError("boom")
        return real(batch, sampling)

    monkeypatch.setattr(hf_base, "_generate", flaky)
    out = hf_base.judge([_req(i) for i in range(4)], Sampling(temperature=0, max_new_tokens=4))
    assert [is_backend_error(r) for r in out] == [False, False, True, False]
    assert "boom" in out[2].error


def test_hf_greedy_batched_equals_one_at_a_time(hf_base):
    reqs = [_req(i) for i in range(4)]
    greedy = Sampling(temperature=0, max_new_tokens=6)
    hf_base.batch_size = 4
    batched = [r.text for r in hf_base.judge(reqs, greedy)]
    hf_base.batch_size = 1
    single = [r.text for r in hf_base.judge(reqs, greedy)]
    hf_base.batch_size = 4
    assert batched == single


def test_hf_backend_with_lora_adapter(tiny_qwen25, lora_adapter, hf_base):
    from perception_judge.evaluation.backends.hf import HFBackend

    reqs = [_req(i) for i in range(4)]
    lora = HFBackend(
        tiny_qwen25,
        adapter=lora_adapter,
        device="cpu",
        dtype="float32",
        progress=False,
        pixel_policy=PixelPolicy(size=56),
    )
    d = lora.describe()
    assert d["adapter"] == str(lora_adapter) and d["adapter_merged"] is True
    assert d["weights_fingerprint"] != hf_base.describe()["weights_fingerprint"]
    with_adapter = [r.text for r in lora.judge(reqs, SAMPLED)]
    base = [r.text for r in hf_base.judge(reqs, SAMPLED)]
    assert with_adapter != base  # the adapter changes the model
    # an adapter folder given as the model resolves its base from adapter_config.json
    same = HFBackend(
        lora_adapter, device="cpu", dtype="float32", progress=False, pixel_policy=PixelPolicy(size=56)
    )
    assert same.model_path == str(tiny_qwen25) and [r.text for r in same.judge(reqs, SAMPLED)] == with_adapter
    unmerged = HFBackend(
        tiny_qwen25,
        adapter=lora_adapter,
        merge_adapter=False,
        device="cpu",
        dtype="float32",
        progress=False,
        pixel_policy=PixelPolicy(size=56),
    )
    greedy = Sampling(temperature=0, max_new_tokens=4)
    assert [r.text for r in unmerged.judge(reqs, greedy)] == [r.text for r in lora.judge(reqs, greedy)]
    with pytest.raises(FileNotFoundError, match="adapter"):
        HFBackend(tiny_qwen25, adapter=tiny_qwen25)


def test_hf_backend_on_a_thinking_template(tiny_qwen3):
    from perception_judge.evaluation.backends.hf import HFBackend

    b = HFBackend(
        tiny_qwen3,
        device="cpu",
        dtype="float32",
        progress=False,
        pixel_policy=PixelPolicy(size=64, factor=32),
    )
    (r,) = b.judge([_req(0)], Sampling(temperature=0, max_new_tokens=4))
    assert r.text.startswith("<think>\n") and not is_backend_error(r)


# ------------------------------------------------------------------------------------------------ vLLM (pure)
def test_vllm_request_builders_on_cpu(tiny_qwen25):
    from transformers import AutoProcessor

    from perception_judge.evaluation.backends.vllm import (
        engine_kwargs,
        lora_request_args,
        prompt_inputs,
        sampling_kwargs,
    )

    proc = AutoProcessor.from_pretrained(tiny_qwen25)
    req = _req(1)
    img = PixelPolicy(size=56).apply(req.images[0])
    inp = prompt_inputs(req, proc, [img], "auto")
    assert inp["prompt"] == render_generation_prompt(proc, req.messages, "auto") and inp["prompt"].endswith(
        "<think>\n"
    )
    assert inp["multi_modal_data"]["image"][0].size == (56, 56)
    assert "multi_modal_data" not in prompt_inputs(_req(2, n_images=0), proc, [], "off")
    fresh = AutoProcessor.from_pretrained(tiny_qwen25)  # prepare_processor patches a processor in place
    assert not prompt_inputs(_req(2, n_images=0), fresh, [], "off")["prompt"].endswith("<think>\n")
    kw = sampling_kwargs(Sampling(temperature=1.0, top_p=0.95, top_k=20, max_new_tokens=64, seed=3), "req-1")
    assert kw == {
        "n": 1,
        "temperature": 1.0,
        "top_p": 0.95,
        "top_k": 20,
        "max_tokens": 64,
        "seed": request_seed(3, "req-1"),
        # explicit, so an engine never takes them from the model folder's generation_config.json
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    }
    g = sampling_kwargs(Sampling(temperature=0, top_k=None, seed=3), "req-1")
    assert g["temperature"] == 0.0 and g["top_k"] == -1 and g["top_p"] == 1.0
    assert sampling_kwargs(Sampling(seed=3), "a")["seed"] != sampling_kwargs(Sampling(seed=3), "b")["seed"]
    ek = engine_kwargs("/m", enable_lora=True, max_lora_rank=32, max_images_per_prompt=2, max_model_len=8192)
    assert ek["enable_lora"] and ek["max_lora_rank"] == 32 and ek["limit_mm_per_prompt"] == {"image": 2}
    assert ek["max_model_len"] == 8192 and "enable_lora" not in engine_kwargs("/m")
    name, lid, path = lora_request_args(tiny_qwen25)
    assert lora_request_args(str(tiny_qwen25) + "/")[1] == lid and lid >= 1 and path.endswith(name)


def test_vllm_backend_needs_vllm(tiny_qwen25):
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed")
    from perception_judge.evaluation.backends.vllm import VLLMBackend

    with pytest.raises(ImportError, match="vLLM"):
        VLLMBackend(tiny_qwen25)


@pytest.mark.gpu
def test_vllm_backend_end_to_end_with_lora(tiny_qwen25, lora_adapter):
    pytest.importorskip("vllm")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from perception_judge.evaluation.backends.vllm import VLLMBackend

    base = VLLMBackend(
        tiny_qwen25,
        enable_lora=True,
        max_lora_rank=8,
        dtype="float32",
        gpu_memory_utilization=0.2,
        max_model_len=2048,
        pixel_policy=PixelPolicy(size=56),
    )
    reqs = [_req(i) for i in range(4)]
    out = base.judge(reqs, SAMPLED)
    assert all(not is_backend_error(r) and r.text.startswith("<think>\n") for r in out)
    assert [r.text for r in base.judge(reqs, SAMPLED)] == [r.text for r in out]  # per-request seeds
    adapted = base.for_adapter(lora_adapter)
    assert [r.text for r in adapted.judge(reqs, SAMPLED)] != [r.text for r in out]
    base.close()


# ------------------------------------------------------------------------------------------------ openai backend
def test_openai_backend_against_the_fake_server():
    from support import fake_openai as fake

    from perception_judge.evaluation.backends.openai import OpenAIBackend

    with fake.FakeOpenAIServer(
        model="judge", faults=fake.Faults(rate_500=0.3), record_requests=True, seed=1
    ) as srv:
        b = OpenAIBackend(
            "judge",
            base_urls=[srv.base_url],
            api_key="test-key",
            concurrency=4,
            max_retries=8,
            backoff_base_s=0.01,
            backoff_max_s=0.05,
            pixel_policy=PixelPolicy(size=56),
            progress=False,
        )
        reqs = [_req(i) for i in range(6)] + [_req(6, protocol="pair")]
        bad = JudgeRequest("bad", build_messages("single", "q", ["r"], 1), ["/nonexistent.png"])
        out = b.judge([*reqs, bad], Sampling(temperature=0.7, top_p=0.9, max_new_tokens=32, seed=5))
        assert [r.scores for r in out[:6]] == [[8.0]] * 6 and out[6].scores == [8.0, 5.0]
        assert is_backend_error(out[7])
        stats = srv.stats()
        assert stats.get("fault_500", 0) >= 1  # retried transparently
        bodies = [r for r in srv.requests if r.get("messages")]
        seeds = {b_["seed"] for b_ in bodies}
        assert {request_seed(5, r.request_id) for r in reqs} <= seeds
        assert all(
            b_["temperature"] == 0.7 and b_["top_p"] == 0.9 and b_["max_tokens"] == 32 for b_ in bodies
        )
        parts = [
            p
            for b_ in bodies
            for m in b_["messages"]
            for p in (m["content"] if isinstance(m["content"], list) else [])
        ]
        assert any(p.get("type") == "image_url" for p in parts)
    assert "api_key" not in b.describe()["client"] and "test-key" not in str(b.describe())


OPINIONATED = {"do_sample": True, "temperature": 0.1, "top_p": 0.5, "top_k": 5, "repetition_penalty": 1.05,
               "no_repeat_ngram_size": 2, "min_new_tokens": 6}  # fmt: skip


def opinionated_copy(model_dir, out):
    """A judge folder whose ``generation_config.json`` holds sampling settings of its own (as a Qwen2.5-VL-derived
    checkpoint ships repetition_penalty 1.05 and its own top_k / top_p), weights unchanged."""
    import json
    import shutil

    shutil.copytree(model_dir, out)
    path = out / "generation_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **OPINIONATED}))
    return out


def test_a_judge_folders_generation_config_changes_no_hf_output(tiny_qwen25, hf_base, tmp_path):
    """transformers 5 fills every decoding field a call leaves unset from the folder's generation config; the hf
    backend sets them all, so the folder's settings change nothing: greedy equals a plain ``generate`` with
    repetition penalty 1 (what vLLM and training use), and sampled equals the backend on the plain folder."""
    import torch
    from transformers import AutoModelForImageTextToText, GenerationConfig

    from perception_judge.evaluation.backends.hf import HFBackend

    folder = opinionated_copy(tiny_qwen25, tmp_path / "judge")
    hf = HFBackend(folder, batch_size=4, device="cpu", dtype="float32", progress=False,
                   pixel_policy=PixelPolicy(size=56))  # fmt: skip
    reqs = [_req(i, n_images=0) for i in range(3)]
    greedy = Sampling(temperature=0, max_new_tokens=12)
    out = hf.judge(reqs, greedy)
    assert [r.text for r in out] == [r.text for r in hf_base.judge(reqs, greedy)]
    assert [r.text for r in hf.judge(reqs, SAMPLED)] == [r.text for r in hf_base.judge(reqs, SAMPLED)]

    model = AutoModelForImageTextToText.from_pretrained(folder).eval()
    tok = hf.processor.tokenizer
    plain, folders = [], []
    for req in reqs:
        ids = tok(render_generation_prompt(hf.processor, req.messages, "auto"), return_tensors="pt")
        n = ids["input_ids"].shape[1]
        with torch.no_grad():
            one = GenerationConfig(max_new_tokens=12, do_sample=False, repetition_penalty=1.0, eos_token_id=hf.eos_token_id,
                                   pad_token_id=hf.pad_token_id, no_repeat_ngram_size=0, min_new_tokens=0)  # fmt: skip
            plain.append(
                tok.decode(model.generate(**ids, generation_config=one)[0, n:], skip_special_tokens=True)
            )
            unset = model.generate(**ids, max_new_tokens=12, do_sample=False)  # the folder's settings apply
            folders.append(tok.decode(unset[0, n:], skip_special_tokens=True))
    assert [r.text.removeprefix("<think>\n") for r in out] == plain
    assert folders != plain  # the folder's settings would have changed the verdicts


def test_openai_backend_sends_every_sampling_field_to_vllm_servers():
    """Issue 39 item 6: a vLLM server fills unset fields from the model folder (repetition_penalty 1.05 for
    Qwen2.5-VL), so by default (server: vllm) the body carries every field the hf backend sets, field by field as
    request_sampling gives them; server: openai leaves out the fields OpenAI's API does not take."""
    from support import fake_openai as fake

    from perception_judge.evaluation.backends.openai import OpenAIBackend

    sampled, greedy = (
        Sampling(temperature=0.7, top_p=0.9, top_k=20, max_new_tokens=32, seed=5),
        Sampling(temperature=0, max_new_tokens=32),
    )
    with fake.FakeOpenAIServer(model="judge", record_requests=True, seed=1) as srv:
        for server in ({}, {"server": "openai"}):
            b = OpenAIBackend("judge", base_urls=[srv.base_url], api_key="k", progress=False, **server)
            b.judge([_req(0)], sampled)
            b.judge([_req(1)], greedy)
        bodies = [r for r in srv.requests if r.get("messages")]
    for body, sampling, req in zip(bodies, (sampled, greedy), (_req(0), _req(1))):
        want = request_sampling(sampling, req.request_id)
        want["top_k"] = want["top_k"] or -1  # vLLM's "off"
        assert {k: body[k] for k in want} == want and body["model"] == "judge"
    assert (
        bodies[0]["temperature"] == 0.7 and bodies[0]["repetition_penalty"] == 1.0 and bodies[0]["min_p"] == 0
    )
    assert bodies[1]["top_k"] == -1 and bodies[1]["temperature"] == 0.0 and bodies[1]["top_p"] == 1.0
    for body, sampling, req in zip(bodies[2:], (sampled, greedy), (_req(0), _req(1))):
        sent = request_sampling(sampling, req.request_id)
        openai = {k: v for k, v in sent.items() if k not in ("top_k", "min_p", "repetition_penalty")}
        assert {k: body[k] for k in openai} == openai  # presence / frequency penalty too
        assert not {"top_k", "min_p", "repetition_penalty"} & set(body)  # OpenAI's API has none of these


def test_openai_backend_without_a_server_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    """Issue 39 item 6: without --base-url the backend called https://api.openai.com/v1 for 44 s and reported 18 of 18
    judge calls failed. Now no backend.base_urls and no $OPENAI_BASE_URL is an error at plan time: exit 2, one line,
    nothing written; $OPENAI_BASE_URL alone is the server."""
    from perception_judge.cli import main
    from perception_judge.evaluation.plan import resolve

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    argv = ["eval", "run", "--backend", "openai", "--model", "judge", "--suites", "bias", "-q"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "backend.base_urls: " in line and "--base-url" in line and "$OPENAI_BASE_URL" in line
    assert not (tmp_path / "o").exists()
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    plan = resolve([{"suites": ["bias"], "backend": {"kind": "openai"}}], tmp_path / "p")
    assert plan.backend.options.base_urls == ["http://127.0.0.1:9/v1"]


def test_openai_backend_reports_call_failures_per_request():
    from perception_judge.evaluation.backends.openai import OpenAIBackend

    class Failing:
        def __init__(self, settings):
            self.settings = settings

        async def chat(self, messages, images, **kw):
            if kw["seed"] % 2:
                raise RuntimeError("server said no")

            class R:
                text, reasoning, prompt_tokens, completion_tokens = "<answer>7</answer>", "thinking", 3, 4

            return R()

        async def aclose(self):
            pass

    b = OpenAIBackend("m", base_urls="http://x/v1", client_factory=Failing, progress=False)
    reqs = [_req(i) for i in range(6)]
    out = b.judge(reqs, Sampling(seed=0))
    for req, r in zip(reqs, out):
        if request_seed(0, req.request_id) % 2:
            assert is_backend_error(r) and "server said no" in r.error
        else:
            assert r.scores == [7.0] and r.reasoning == "thinking" and r.completion_tokens == 4


class _FakeEngine:
    """Stands in for vllm.LLM: records every generate call and answers with a fixed verdict."""

    instances: ClassVar[list] = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.calls = []
        _FakeEngine.instances.append(self)

    def generate(self, inputs, sampling_params=None, lora_request=None, use_tqdm=True):
        self.calls.append((inputs, sampling_params, lora_request))

        comp = types.SimpleNamespace(text="reasoning</think><answer>6</answer>", token_ids=[1, 2, 3])
        return [types.SimpleNamespace(outputs=[comp], prompt_token_ids=[0] * 10) for _ in inputs]


@pytest.fixture
def fake_vllm(monkeypatch):
    import sys

    vllm = types.ModuleType("vllm")
    vllm.LLM = _FakeEngine
    vllm.SamplingParams = lambda **kw: kw
    lora_mod = types.ModuleType("vllm.lora")
    req_mod = types.ModuleType("vllm.lora.request")
    req_mod.LoRARequest = lambda name, lid, path: (name, lid, path)
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.lora", lora_mod)
    monkeypatch.setitem(sys.modules, "vllm.lora.request", req_mod)
    _FakeEngine.instances = []
    return _FakeEngine


def test_vllm_backend_with_a_stand_in_engine_and_shared_lora_engine(
    fake_vllm, tiny_qwen25, lora_adapter, tmp_path
):
    from perception_judge.evaluation.plan import resolve
    from perception_judge.evaluation.sweep import BackendPool, ModelEntry

    backend = {"kind": "vllm", "dtype": "float32", "pixel_policy": {"size": 56}}
    plan = resolve([{"suites": ["bias"], "backend": backend}], tmp_path)
    entries = [
        ModelEntry("base", 0, "base", {"model": str(tiny_qwen25)}),
        ModelEntry(
            "checkpoint-1", 1, "checkpoint", {"model": str(tiny_qwen25), "adapter": str(lora_adapter)}
        ),
    ]
    pool = BackendPool(plan, entries)
    base = pool.get(entries[0])
    adapted = pool.get(entries[1])
    assert len(fake_vllm.instances) == 1  # one engine, LoRA enabled, shared by the base and the adapter
    engine = fake_vllm.instances[0]
    assert (
        engine.kwargs["enable_lora"]
        and engine.kwargs["max_lora_rank"] == 4
        and engine.kwargs["model"] == str(tiny_qwen25)
    )
    reqs = [
        _req(0),
        _req(1, n_images=0),
        JudgeRequest("bad", build_messages("single", "q", ["r"], 1), ["/nope.png"]),
    ]
    out = base.judge(reqs, SAMPLED)
    assert (
        [r.scores for r in out[:2]] == [[6.0], [6.0]]
        and out[0].text.startswith("<think>\n")
        and is_backend_error(out[2])
    )
    inputs, params, lora = engine.calls[-1]
    assert lora is None and len(inputs) == 2 and inputs[0]["multi_modal_data"]["image"][0].size == (56, 56)
    assert "multi_modal_data" not in inputs[1]
    assert params[0]["seed"] == request_seed(SAMPLED.seed, "req-0") and params[0]["top_k"] == 20
    adapted.judge(reqs[:1], SAMPLED)
    assert engine.calls[-1][2][2] == str(lora_adapter.resolve())
    assert adapted.describe()["adapter"] == str(lora_adapter) and base.describe()["adapter"] is None
    pool.release(adapted, entries[1])
    assert base.engine is not None and adapted.engine is None  # the shared engine serves the base still
    pool.release(base, entries[0])
    assert base.engine is None  # closed after the last model it serves
    pool.close_all()


def test_a_dead_engine_fails_fast_instead_of_one_request_at_a_time():
    """After a failed batch, run_batches used to retry every request alone, so a dead engine cost one slow failure
    per request; now DEAD_AFTER lone failures in a row (or an engine that says it is dead) stop the call."""
    from perception_judge.core.schema import JudgeRequest, JudgeResult
    from perception_judge.evaluation.backends.common import DEAD_AFTER, BackendDead, run_batches

    items = [(i, JudgeRequest(f"r{i}", []), None) for i in range(100)]
    calls = []

    def dead(batch):
        calls.append(len(batch))
        raise RuntimeError("connection reset")

    with pytest.raises(BackendDead, match="probably dead"):
        run_batches(items, 32, dead)
    assert calls == [32] + [1] * DEAD_AFTER

    def engine_dead(batch):
        raise type("EngineDeadError", (RuntimeError,), {})("EngineCore died")

    with pytest.raises(BackendDead, match="the engine died"):
        run_batches(items, 32, engine_dead)

    def some_bad(batch):  # a few bad requests among good ones stay isolated
        if any(i % 10 == 3 for i, _, _ in batch):
            raise ValueError("bad image")
        return [JudgeResult(req.request_id, "<answer>5</answer>", [5.0]) for _, req, _ in batch]

    out = run_batches(items, 8, some_bad)
    assert len(out) == 100 and sum(r.error is not None for r in out.values()) == 10


def test_vllm_engine_defaults_are_cpu_safe_without_a_gpu_and_tower_lora_is_switched_on(tmp_path):
    """The vllm backend defaulted to dtype auto (bf16) and 85% of GPU memory even on the CPU build, and a LoRA
    adapter on the vision tower silently lost its vision layers (vLLM needs enable_tower_connector_lora)."""
    import json

    from perception_judge.evaluation.backends.vllm import adapter_targets_vision, engine_kwargs

    cpu = engine_kwargs("/m", on_gpu=False)
    assert cpu["dtype"] == "float32" and cpu["enforce_eager"] and "gpu_memory_utilization" not in cpu
    assert (
        engine_kwargs("/m", on_gpu=False, dtype="bfloat16")["dtype"] == "bfloat16"
    )  # an explicit choice stays
    gpu = engine_kwargs("/m", on_gpu=True)
    assert gpu["dtype"] == "auto" and gpu["gpu_memory_utilization"] == 0.85 and "enforce_eager" not in gpu
    assert engine_kwargs("/m", on_gpu=True, gpu_memory_utilization=0.5)["gpu_memory_utilization"] == 0.5
    lora = engine_kwargs("/m", enable_lora=True, tower_lora=True, on_gpu=False)
    assert lora["enable_tower_connector_lora"] is True
    assert "enable_tower_connector_lora" not in engine_kwargs("/m", enable_lora=True, on_gpu=False)

    for targets, vision in ((["q_proj", "v_proj"], False), (["q_proj", "visual.blocks.0.attn.qkv"], True),
                            (r".*(language_model|visual).*\.(q_proj|qkv)", True), ("all-linear", False)):  # fmt: skip
        (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 8, "target_modules": targets}))
        assert adapter_targets_vision(tmp_path) is vision, targets


def test_chat_template_command_writes_the_prefilled_template_a_server_needs(tiny_qwen25, tmp_path):
    """A server renders the model folder's template, which for a base judge does not open the think block; the
    chat-template command writes the one the hf / vllm backends render with."""
    from transformers import AutoProcessor

    from perception_judge.cli import main
    from perception_judge.core.protocol import build_messages, render_generation_prompt

    messages = build_messages("pair", "colour ?", ["a", "b"], n_images=1, style="tiny")
    ours = render_generation_prompt(AutoProcessor.from_pretrained(tiny_qwen25), messages)
    served = AutoProcessor.from_pretrained(tiny_qwen25)
    assert served.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) != ours
    assert main(["chat-template", str(tiny_qwen25), "--out", str(tmp_path / "judge.jinja")]) == 0
    served.chat_template = (tmp_path / "judge.jinja").read_text()
    assert served.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) == ours
    assert (
        main(["chat-template", str(tiny_qwen25), "--think-prefix", "off", "--out", str(tmp_path / "raw")])
        == 0
    )
    assert (tmp_path / "raw").read_text() == AutoProcessor.from_pretrained(tiny_qwen25).chat_template
