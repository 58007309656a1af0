"""The prepared GPU check (``bench/gpu_check_grpo_7b.py``) runs its whole code path on the CPU (``--tiny``): Qwen's
real tokenizer and chat template, the model saved and reloaded as trl's reference model, GRPO steps, one ``CHECK``
line per check. Under ZeRO-3 (2 CPU processes, ``deepspeed`` marker) the saved model holds the full weights."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK_LINE = re.compile(r"^CHECK (\S+): (PASS|FAIL|SKIP) (.*)$", re.MULTILINE)


@pytest.fixture(scope="module")
def check():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import gpu_check_grpo_7b
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return gpu_check_grpo_7b


def test_the_7b_architecture_and_the_real_tokenizer(check):
    import torch

    # the 7B architecture as written inline: 8.29 B parameters (built on the meta device, no memory)
    model = check.build_model(check.QWEN25_VL_7B, torch.bfloat16, "meta")
    assert 8.2e9 < sum(p.numel() for p in model.parameters()) < 8.4e9
    assert model.generation_config.eos_token_id == [151645, 151643]
    processor = check.build_processor()
    tok = processor.tokenizer
    assert (
        type(tok).__name__ == "Qwen2Tokenizer" and len(tok) <= check.QWEN25_VL_7B["text_config"]["vocab_size"]
    )
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<|vision_start|>", "<|vision_end|>")}
    spec = check.QWEN25_VL_7B
    assert ids == {"<|image_pad|>": spec["image_token_id"], "<|vision_start|>": spec["vision_start_token_id"],
                   "<|vision_end|>": spec["vision_end_token_id"]}  # fmt: skip
    assert tok("<|im_start|>assistant\n")["input_ids"] == [151644, 77091, 198]
    # Qwen2.5 has no <think> token: the prefill is plain text, and the template gets it appended once
    assert processor.image_processor.patch_size == 14 and processor.chat_template.endswith(
        "'<think>\\n' }}{% endif %}"
    )
    assert check.TINY["text_config"]["vocab_size"] == 152064 and check.TINY["image_token_id"] == 151655


def test_gpu_check_dry_run_on_cpu(check, tmp_path, capsys):
    """Both checks on the CPU: GRPO with HF generate passes (the model is saved and reloaded as the reference model,
    beta > 0), the vLLM check is skipped with its reason; one line per check, then the summary."""
    work = ["--work-dir", str(tmp_path), "--keep-model"]  # the model folder is read below
    out = check.main(["--tiny", "--steps", "1", "--warmup", "0", "--beta", "0.01", *work])
    printed = capsys.readouterr().out
    lines = CHECK_LINE.findall(printed)
    assert [(name, status) for name, status, _ in lines] == [
        ("grpo_hf_generate", "PASS"),
        ("grpo_vllm_colocate", "SKIP"),
    ]
    hf_line = lines[0][2]
    for part in (
        "1 process(es) on cpu",
        "HF generate",
        "optimizer sgd",
        "tokens/s per GPU",
        "peak GPU memory",
    ):
        assert part in hf_line, part
    assert "CUDA" in lines[1][2]
    assert "SUMMARY: 1 passed, 0 failed, 1 skipped" in printed
    hf = out["checks"]["grpo_hf_generate"]
    assert hf["tokens_per_s_per_gpu"] > 0 and hf["step_s"] > 0 and hf["processes"] == 1
    assert 0 < hf["rollout_share"] <= 1
    assert {"rewards/judge/mean", "rewards/format/mean"} <= set(hf["rewards_logged"])
    results = [
        json.loads(line.split(" ", 1)[1]) for line in printed.splitlines() if line.startswith("BENCH_RESULT")
    ]
    assert [r["name"] for r in results] == [
        "gpu_grpo_hf_generate_tiny_tokens_per_s_per_gpu",
        "gpu_grpo_hf_generate_tiny_peak_memory",
        "gpu_grpo_hf_generate_tiny_step_time",
    ]
    # the reference model came from this folder: the processor with the real tokenizer went with it
    saved = json.loads((tmp_path / "hf" / "model" / "config.json").read_text())
    assert saved["text_config"]["vocab_size"] == 152064
    assert (tmp_path / "hf" / "model" / "tokenizer.json").is_file()


def test_the_scratch_model_goes_under_the_work_dir_and_is_removed(check, tmp_path, monkeypatch):
    """The model copy trl and vLLM load (16.6 GB for the 7B) lives under --work-dir (runs/gpu_check/, not /tmp) and is
    removed when its check ends, passed or failed, unless --keep-model."""
    assert check.parse_args([]).work_dir == "runs/gpu_check"

    def grpo(args, work, cuda, use_vllm):
        (work / "model").mkdir(parents=True)
        raise RuntimeError("stopped after the model was written")

    monkeypatch.setattr(check, "_grpo", grpo)
    for keep in ([], ["--keep-model"]):
        work = tmp_path / str(bool(keep))
        check.run_check("hf", check.parse_args(["--work-dir", str(work), *keep]), work / "hf", cuda=False)
        assert (work / "hf" / "model").is_dir() == bool(keep)


def test_unknown_checks_are_refused(check):
    with pytest.raises(SystemExit):
        check.parse_args(["--checks", "hf,tpu"])
    assert check.parse_args(["--use-vllm"]).checks == ["vllm"]


@pytest.mark.deepspeed
def test_zero3_saves_the_full_model_for_the_reference(tmp_path):
    """Under ZeRO-3 each rank holds a shard of every parameter; the folder trl reloads the reference model from
    must hold the gathered weights (a partitioned save fails the reload with 'size mismatch ... torch.Size([0])')."""
    from conftest import skip_or_fail

    if importlib.util.find_spec("deepspeed") is None:
        skip_or_fail("deepspeed", "deepspeed is not installed (make test-deepspeed installs it)")
    from safetensors import safe_open
    from test_train_launch import free_port

    cmd = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(ROOT / "configs" / "accelerate" / "deepspeed_zero3.yaml"),
        "--num_processes", "2", "--mixed_precision", "no", "--main_process_port", str(free_port()),
        str(ROOT / "bench" / "gpu_check_grpo_7b.py"),
        "--tiny", "--checks", "hf", "--beta", "0.01", "--steps", "1", "--warmup", "0", "--work-dir", str(tmp_path),
        "--keep-model",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, PYTHONUNBUFFERED="1"), capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    lines = CHECK_LINE.findall(proc.stdout)
    assert [(n, s) for n, s, _ in lines] == [("grpo_hf_generate", "PASS")], proc.stdout[-3000:]
    assert "2 process(es)" in lines[0][2] and "optimizer adamw_torch" in lines[0][2]
    with safe_open(str(tmp_path / "hf" / "model" / "model.safetensors"), "pt") as f:
        shapes = {k: f.get_slice(k).get_shape() for k in f.keys()}  # noqa: SIM118
    embed = [s for k, s in shapes.items() if "embed_tokens" in k]
    assert embed == [[152064, 64]] and all(0 not in s for s in shapes.values()), "gathered, not partitioned"
