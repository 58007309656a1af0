"""End-to-end runs of ``train_grpo.py`` through ``accelerate launch`` on CPU with the tiny models.

* full fine-tuning, 4 steps with checkpoints at 2 and 4, then a resume from checkpoint 2 to step 4 in a second
  folder: the counter continues and the resumed weights equal the uninterrupted run's bit for bit (optimizer,
  scheduler, RNG, data position and weights all restored); parameters changed, every reward logged, validation
  logged, checkpoints reload and generate;
* LoRA on two real gloo processes (not ``--cpu --num_processes 2``, which silently runs one), with gradient
  checkpointing: both ranks trained, the logged rewards are those of both ranks' completions, checkpoints hold the
  adapter only, the adapter reloads and merges;
* plain DDP on mixed rows with gradient checkpointing and bf16 autocast over fp32 master weights;
* an invalid recipe fails through the real entry point before any model is built.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REWARDS = ("judge", "format", "digit_fraction")
# Mechanics tests keep the generated model's random weights (no format warm start) and short completions.
FAST = ["--model_provider_options", "warm_start_steps=0", "--max_completion_length", "16"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args: list[str], config: str = "cpu.yaml", extra: list[str] | None = None, timeout: int = 300,
           script: list[str] | None = None):  # fmt: skip
    """``accelerate launch`` of ``script`` (default: train_grpo.py on the tiny recipe, fast) with ``args``."""
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(ROOT / "configs" / "accelerate" / config),
        *(extra or []),
        *(script or [str(ROOT / "train_grpo.py"), str(ROOT / "recipes" / "tiny.yaml"), *FAST]), *args,
    ]  # fmt: skip
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # a session of its own, so that a hang (the launcher and every rank) is killed whole and fails the test
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        raise AssertionError(f"launch hung (killed after {timeout} s):\n{stderr[-6000:]}") from None
    if proc.returncode != 0:
        raise AssertionError(f"launch failed ({proc.returncode}):\n{stderr[-6000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def history(folder: Path) -> list[dict]:
    return json.loads((folder / "trainer_state.json").read_text())["log_history"]


def weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


@pytest.fixture(scope="module")
def toy_set(tmp_path_factory):
    from perception_judge.tiny.toyset import write_toy_training_set

    # every 4th item is text-only, as in real exports: batches mix image and text-only prompts
    return write_toy_training_set(
        tmp_path_factory.mktemp("launch_data"), n_train=16, n_validation=4, text_only_every=4
    )


def _reload_and_generate(folder: Path, data_dir: Path, size: int, base: Path | None = None):
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from perception_judge.core.protocol import render_generation_prompt
    from perception_judge.core.trainset import load_training_set

    if base is None:
        model = AutoModelForImageTextToText.from_pretrained(folder)
    else:
        from peft import PeftModel

        model = PeftModel.from_pretrained(AutoModelForImageTextToText.from_pretrained(base), folder)
    processor = AutoProcessor.from_pretrained(folder)
    row = next(r for r in load_training_set(data_dir)["validation"] if r["images"])
    text = render_generation_prompt(processor, row["prompt"], "auto")
    images = [im.resize((size, size)) for im in row["images"]]
    inputs = processor(text=[text], images=[images], return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert out.shape[1] > inputs["input_ids"].shape[1]


def _check_run_folder(run_a: Path, model_dir: Path) -> list[dict]:
    """The run folder the evaluation sweep reads; every reward and timing logged. Returns the training logs."""
    info = json.loads((run_a / "perception_judge_run.json").read_text())
    assert info["status"] == "finished" and info["tuning"] == "full" and info["model_type"] == "qwen2_5_vl"
    assert info["base_model"] == str(model_dir.resolve()) and info["think_prefix"] == "auto"
    assert info["rewards"] == {"judge": 1.0, "format": 0.2, "digit_fraction": 0.1}
    assert info["pixel_policy"]["size"] == 56 and info["checkpoints"] == ["checkpoint-2", "checkpoint-4"]
    assert info["final_metrics"]["global_step"] == 4 and "eval_reward" in info["final_metrics"]
    assert info["args"]["learning_rate"] == 1e-4 and info["recipe"].endswith("recipes/tiny.yaml")
    assert (run_a / "README.md").read_text().count("## Final metrics") == 1
    for name in (
        "model.safetensors",
        "config.json",
        "processor_config.json",
        "tokenizer.json",
        "chat_template.jinja",
    ):
        assert (run_a / name).is_file(), name
        assert (run_a / "checkpoint-2" / name).is_file(), name

    # every configured reward, the zero-std fraction, the parse-failure rate and the timings are logged each step
    train_logs = [h for h in history(run_a) if "reward" in h]
    assert [h["step"] for h in train_logs] == [1, 2, 3, 4]
    for h in train_logs:
        for name in REWARDS:
            assert f"rewards/{name}/mean" in h and f"rewards/{name}/std" in h
        for key in (
            "frac_reward_zero_std",
            "judge/parse_failure_rate",
            "timing/generate_s",
            "timing/update_s",
        ):
            assert key in h, key
    evals = [h for h in history(run_a) if "eval_reward" in h]
    assert [h["step"] for h in evals] == [2, 4] and all(f"eval_rewards/{n}/mean" in evals[0] for n in REWARDS)
    assert len((run_a / "validation_metrics.jsonl").read_text().splitlines()) == 2
    sample = json.loads((run_a / "samples" / "step-000002.jsonl").read_text().splitlines()[0])
    assert set(sample["rewards"]) == set(REWARDS) and (run_a / "samples" / sample["images"][0]).is_file()
    return train_logs


def test_full_finetune_checkpoints_reload_and_resume_is_exact(toy_set, tmp_path):
    model_dir = tmp_path / "tiny-model"  # built by the recipe's model_provider
    run_a = tmp_path / "run_a"
    common = [
        "--dataset_name", str(toy_set),
        "--model_name_or_path", str(model_dir),
        "--save_steps", "2",
        "--eval_steps", "2",
        "--max_steps", "4",
        "--sample_log_steps", "2",
    ]  # fmt: skip
    launch([*common, "--output_dir", str(run_a)])

    train_logs = _check_run_folder(run_a, model_dir)

    # parameters changed (all of them: the dense reward gives every group a non-zero advantage)
    before, after = weights(model_dir / "model.safetensors"), weights(run_a / "model.safetensors")
    changed = [k for k in before if not (before[k] == after[k]).all()]
    assert len(changed) == len(before), sorted(set(before) - set(changed))
    ck4 = weights(run_a / "checkpoint-4" / "model.safetensors")
    assert all((ck4[k] == after[k]).all() for k in after)

    # the saved processor carries the chat template training rendered with, <think> prefill included, so a
    # checkpoint served by an OpenAI-compatible server gets the training prompt (it used to ship the unpatched one)
    from transformers import AutoProcessor

    from perception_judge.core.protocol import template_opens_think

    assert not template_opens_think(AutoProcessor.from_pretrained(model_dir))
    assert template_opens_think(AutoProcessor.from_pretrained(run_a / "checkpoint-2"))
    assert template_opens_think(AutoProcessor.from_pretrained(run_a))
    _reload_and_generate(run_a / "checkpoint-2", toy_set, size=56)

    # resume: a run stopped at step 2 (its checkpoint copied to a fresh folder) continues to step 4
    run_b = tmp_path / "run_b"
    run_b.mkdir()
    shutil.copytree(run_a / "checkpoint-2", run_b / "checkpoint-2")
    launch([*common, "--output_dir", str(run_b), "--resume_from_checkpoint", "latest"])
    logs_b = [h for h in history(run_b) if "reward" in h]
    assert [h["step"] for h in logs_b] == [1, 2, 3, 4]  # 1-2 from the checkpoint, 3-4 new
    assert json.loads((run_b / "trainer_state.json").read_text())["global_step"] == 4
    info_b = json.loads((run_b / "perception_judge_run.json").read_text())
    assert info_b["resumed_from"].endswith("checkpoint-2") and info_b["checkpoints"] == [
        "checkpoint-2",
        "checkpoint-4",
    ]
    resumed = weights(run_b / "model.safetensors")
    assert all((resumed[k] == after[k]).all() for k in after), (
        "resumed run diverged from the uninterrupted one"
    )
    assert [h["reward"] for h in logs_b] == [h["reward"] for h in train_logs]


def test_lora_on_two_gloo_processes(toy_set, tmp_path):
    model_dir = tmp_path / "tiny-qwen3"
    out = tmp_path / "lora"
    start = time.time()
    launch(
        [
            "--dataset_name", str(toy_set),
            "--model_name_or_path", str(model_dir),
            "--model_provider_options", "arch=qwen3_vl,warm_start_steps=0",
            "--pixel_policy", "size=64",
            "--use_peft", "true",
            "--lora_r", "4",
            "--lora_alpha", "8",
            "--max_steps", "2",
            "--save_steps", "2",
            "--eval_strategy", "no",
            "--recipe_num_processes", "2",
            "--gradient_checkpointing", "true",
            "--sample_log_steps", "1",
            "--num_samples_to_log", "8",
            "--output_dir", str(out),
        ],
        config="cpu_2proc.yaml",
        extra=["--main_process_port", str(free_port())],
    )  # fmt: skip
    elapsed = time.time() - start

    # both ranks took part
    ranks = [json.loads((out / "ranks" / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["world_size"] == 2 and r["completions"] > 0 and r["global_step"] == 2 for r in ranks)
    assert all("MULTI_CPU" in r["distributed_type"] for r in ranks)
    info = json.loads((out / "perception_judge_run.json").read_text())
    assert info["world_size"] == 2 and info["tuning"] == "lora"
    # rewards were gathered over both ranks: the logged means are those of the 2 x 4 completions of each step
    assert_gathered_rewards(out, steps=2, per_step=8)

    # checkpoints hold the adapter (+ processor) only
    ck = out / "checkpoint-2"
    assert (ck / "adapter_config.json").is_file() and (ck / "adapter_model.safetensors").is_file()
    assert (ck / "processor_config.json").is_file() and not (ck / "model.safetensors").exists()
    assert (out / "adapter_model.safetensors").is_file() and not (out / "model.safetensors").exists()
    adapter = weights(ck / "adapter_model.safetensors")
    assert adapter and not any("visual" in k for k in adapter)
    lora_b = [v for k, v in adapter.items() if "lora_B" in k]
    assert lora_b and all(v.abs().sum() > 0 for v in lora_b)  # B starts at zero: the adapter trained

    _reload_and_generate(ck, toy_set, size=64, base=model_dir)
    from perception_judge.cli import main

    assert (
        main(["merge-lora", "--adapter", str(out), "--out", str(tmp_path / "merged"), "--dtype", "float32"])
        == 0
    )
    _reload_and_generate(tmp_path / "merged", toy_set, size=64)
    assert elapsed < 120


def assert_gathered_rewards(out: Path, steps: int, per_step: int) -> None:
    """Every step's logged rewards are the means over its ``per_step`` completions of all ranks, each recomputed from
    the completions' own rewards in ``samples/`` (trl's reward: the weighted sum, NaN-free; per reward: its nanmean)."""
    weights = json.loads((out / "perception_judge_run.json").read_text())["rewards"]
    logs = [h for h in history(out) if "reward" in h]
    assert [h["step"] for h in logs] == list(range(1, steps + 1))
    for log in logs:
        records = (out / "samples" / f"step-{log['step']:06d}.jsonl").read_text().splitlines()
        rewards = [json.loads(line)["rewards"] for line in records]
        assert len(rewards) == per_step and all(set(r) == set(weights) for r in rewards)
        total = [sum(w * (r[n] or 0.0) for n, w in weights.items()) for r in rewards]
        assert log["reward"] == pytest.approx(sum(total) / per_step, rel=1e-6, abs=1e-6)
        for name in weights:
            values = [r[name] for r in rewards if r[name] is not None]
            assert log[f"rewards/{name}/mean"] == pytest.approx(sum(values) / len(values), rel=1e-6, abs=1e-6)


def mixed_rows(folder: Path, pattern: str = "IITTTTII") -> Path:
    """A training set whose rows follow ``pattern`` (I: with its image, T: text-only). Unshuffled, with 2 prompts
    per rank per step on 2 ranks, ``IITTTTII`` gives rank 1 a text-only generation round in step 1 and rank 0 one
    in step 2, while the other rank has images."""
    from perception_judge.tiny.toyset import write_toy_training_set

    return write_toy_training_set(folder, n_train=16, n_validation=0, text_only_pattern=pattern)


def assert_text_only_rounds(out: Path, steps: int, want: tuple[int, ...]) -> None:
    """Both ranks trained ``steps`` steps, and rank k had ``want[k]`` generation rounds of text-only rows only."""
    ranks = [json.loads((out / "ranks" / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2] and all(r["global_step"] == steps for r in ranks)
    assert tuple(r["text_only_rollouts"] for r in ranks) == want


def test_ddp_with_a_text_only_rank_and_image_less_micro_batches(tmp_path):
    """Plain DDP on 2 gloo processes over mixed rows. trl gathered the logged images only on ranks that had one,
    so a rank whose whole generation batch was text-only left the other waiting forever (a hang, here a timeout).
    With gradient accumulation 2 the mixed rank's chunks also hold text-only rows only (0-row ``pixel_values``).
    As the GPU recipes would run without DeepSpeed: gradient checkpointing, a bf16 model and bf16 autocast over
    fp32 master weights."""
    out = tmp_path / "ddp"
    launch(
        [
            "--dataset_name", str(mixed_rows(tmp_path / "data", "ITTTIIII")),
            "--model_name_or_path", str(tmp_path / "tiny"),
            "--shuffle_dataset", "false",
            "--per_device_train_batch_size", "2",
            "--gradient_accumulation_steps", "2",
            "--max_steps", "2",
            "--save_strategy", "no",
            "--eval_strategy", "no",
            "--gradient_checkpointing", "true",
            "--dtype", "bfloat16",
            "--bf16", "true",
            "--output_dir", str(out),
        ],
        config="cpu_2proc.yaml",
        extra=["--main_process_port", str(free_port())],
        timeout=240,
    )  # fmt: skip
    assert_text_only_rounds(out, steps=2, want=(0, 1))
    assert all(f"rewards/{n}/mean" in h for h in history(out) if "reward" in h for n in REWARDS)
    precision = json.loads((out / "perception_judge_run.json").read_text())["precision"]
    assert precision == {
        "weights": "float32",
        "compute": "bfloat16",
        "masters": "the model",
        "zero_stage": None,
    }
    assert {str(v.dtype) for v in weights(out / "model.safetensors").values()} == {"torch.float32"}


def test_invalid_recipe_fails_fast_naming_the_key(tmp_path):
    recipe = (ROOT / "recipes" / "tiny.yaml").read_text().replace("num_generations: 2", "num_generation: 2")
    path = tmp_path / "bad.yaml"
    path.write_text(recipe)
    model_dir = tmp_path / "never-built"
    start = time.time()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train_grpo.py"), str(path), "--model_name_or_path", str(model_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "num_generation" in proc.stderr and "did you mean num_generations" in proc.stderr
    assert not model_dir.exists()  # failed before the tiny model was built, let alone loaded
    assert time.time() - start < 60
