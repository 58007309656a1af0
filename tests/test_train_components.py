"""Trainer building blocks: rewards wiring, LoRA/freezing, merge-lora, run file and card, and the prompt identity.

The prompt identity test builds the real trainer (no training) and checks that the prompt GRPOTrainer tokenizes is
exactly :func:`perception_judge.core.protocol.render_generation_prompt` of the same row: training and evaluation prompts
cannot drift apart.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perception_judge.train.args import JudgeArguments

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------------------------
# rewards
# ----------------------------------------------------------------------------------------------------------


def test_rewards_are_built_from_the_registry_with_options():
    from perception_judge.train.rewards import build_rewards, reward_weight_map

    judge, fmt, digits = build_rewards(
        ["judge", "format", "digit_fraction"], ties="half", tau=7.0, think_open=True
    )
    assert (judge.__name__, fmt.__name__, digits.__name__) == ("judge", "format", "digit_fraction")
    assert judge.ties == "half" and judge.tau == 7.0 and judge.think_open and fmt.think_open
    # think_open: the prompt opened the block, so the completion only closes it
    completion = [{"role": "assistant", "content": "ok</think><answer>9</answer><answer>2</answer>"}]
    metrics = {}
    out = judge(
        completions=[completion, completion],
        protocol=["pair", "pair"],
        ground_truth=["AB", "BA"],
        log_metric=lambda k, v: metrics.__setitem__(k, v),
    )
    assert out == [1.0, 0.0] and metrics == {"judge/parse_failure_rate": 0.0}
    assert fmt(completions=[completion], protocol=["pair"], ground_truth=["AB"]) == [1.0]
    assert digits(completions=[[{"role": "assistant", "content": "a1 b2"}]]) == [0.5]
    assert reward_weight_map(["judge", "format"], None) == {"judge": 1.0, "format": 1.0}
    with pytest.raises(ValueError, match="one weight per reward"):
        reward_weight_map(["judge"], [1.0, 2.0])


def test_rewards_by_dotted_path_and_unknown_names():
    from perception_judge.train.rewards import build_rewards, check_reward_names

    (fn,) = build_rewards(["perception_judge.train.rewards:_digit_fraction"])
    assert fn("12ab") == 0.5
    with pytest.raises(ValueError, match="unknown reward 'judgee'"):
        check_reward_names(["judgee"])
    with pytest.raises(ValueError, match="twice"):
        check_reward_names(["judge", "judge"])
    with pytest.raises(ValueError, match="cannot import"):
        check_reward_names(["no_such_module_xyz:f"])


# ----------------------------------------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------------------------------------


def test_lora_excludes_the_vision_tower_and_freezing(tiny_qwen25):
    from peft import get_peft_model
    from transformers import AutoModelForImageTextToText
    from trl import ModelConfig

    from perception_judge.train.models import build_lora_config, freeze_vision_tower, vision_tower

    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen25)
    cfg = build_lora_config(ModelConfig(use_peft=True, lora_r=4, lora_alpha=8), JudgeArguments())
    assert cfg.target_modules == "all-linear" or "all-linear" in cfg.target_modules
    peft_model = get_peft_model(model, cfg)
    adapted = [n for n, _ in peft_model.named_parameters() if "lora_" in n]
    assert adapted and not any("visual" in n for n in adapted)
    assert not any("lm_head" in n for n in adapted)

    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen25)
    n = freeze_vision_tower(model)
    tower = vision_tower(model)
    assert n > 0 and not any(p.requires_grad for p in tower.parameters())
    assert any(p.requires_grad for n_, p in model.named_parameters() if "language_model" in n_)


def test_merge_lora_command_roundtrip(tiny_qwen25, tmp_path):
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from perception_judge.cli import main

    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForImageTextToText.from_pretrained(tiny_qwen25),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    adapter = tmp_path / "adapter"
    model.save_pretrained(adapter)
    out = tmp_path / "merged"
    assert (
        main(
            [
                "merge-lora",
                "--base",
                str(tiny_qwen25),
                "--adapter",
                str(adapter),
                "--out",
                str(out),
                "--dtype",
                "float32",
            ]
        )
        == 0
    )
    merged = AutoModelForImageTextToText.from_pretrained(out)
    reference = PeftModel.from_pretrained(AutoModelForImageTextToText.from_pretrained(tiny_qwen25), adapter)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.allclose(merged(input_ids=ids).logits, reference(input_ids=ids).logits, atol=1e-5)
    assert AutoProcessor.from_pretrained(out) is not None
    marker = json.loads((out / "perception_judge_merge.json").read_text())
    assert marker["adapter"].endswith("adapter") and marker["dtype"] == "float32"


def test_merge_lora_takes_config_and_set_and_checks_its_options_first(tmp_path, capsys):
    from perception_judge.cli import main

    assert main(["merge-lora", "--out", str(tmp_path / "o")]) == 2
    assert (
        capsys.readouterr().err
        == "perception-judge merge-lora: error: adapter: required, not given (flag --adapter)\n"
    )
    config = tmp_path / "merge.yaml"
    config.write_text(f"adapter: {tmp_path / 'adapter'}\nout: {tmp_path / 'o'}\n")
    assert main(["merge-lora", "--config", str(config)]) == 2  # no --base, no run file: nothing loads
    assert capsys.readouterr().err.endswith(
        "merge-lora: error: base: required, not given (no run file beside the adapter names it)\n"
    )
    assert main(["merge-lora", "--config", str(config), "--set", "dtype=float8"]) == 2
    err = capsys.readouterr().err
    assert err.endswith(
        "dtype: Input should be 'bfloat16', 'float16', 'float32' or 'auto' (got 'float8')\n"
    ), err


def test_merged_base_is_reused_and_mismatch_refused(tiny_qwen25, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    from perception_judge.train import models

    model = get_peft_model(
        AutoModelForImageTextToText.from_pretrained(tiny_qwen25), LoraConfig(r=2, target_modules=["q_proj"])
    )
    adapter = tmp_path / "a"
    model.save_pretrained(adapter)
    out = str(tmp_path / "merged")
    models.merged_base(str(tiny_qwen25), str(adapter), out, dtype="float32")
    stamp = (Path(out) / "model.safetensors").stat().st_mtime_ns
    models.merged_base(str(tiny_qwen25), str(adapter), out, dtype="float32")  # reused, not redone
    assert (Path(out) / "model.safetensors").stat().st_mtime_ns == stamp
    with pytest.raises(ValueError, match="different merge"):
        models.merged_base(str(tiny_qwen25), str(adapter), out, dtype="bfloat16")


# ----------------------------------------------------------------------------------------------------------
# run file, card, resume
# ----------------------------------------------------------------------------------------------------------


def test_run_file_card_and_checkpoint_listing(tmp_path):
    from perception_judge.core.runinfo import read_run_info, update_run_info, write_run_info
    from perception_judge.train.card import final_metrics, render_model_card

    write_run_info(
        tmp_path, {"base_model": "b", "tuning": "lora", "rewards": {"judge": 1.0}, "args": {"lora_r": 8}}
    )
    (tmp_path / "checkpoint-10").mkdir()
    (tmp_path / "checkpoint-2").mkdir()
    update_run_info(tmp_path, status="finished", final_metrics={"reward": 0.5})
    info = read_run_info(tmp_path)
    assert info["checkpoints"] == ["checkpoint-2", "checkpoint-10"] and info["status"] == "finished"
    hist = [
        {"reward": 0.1, "step": 1},
        {"reward": 0.4, "eval_reward": 0.2, "step": 2},
        {"loss": float("nan")},
    ]
    assert final_metrics(hist) == {"reward": 0.4, "eval_reward": 0.2, "step": 2}
    card = render_model_card(info)
    assert "base_model: b" in card and "`judge` × 1" in card and "| reward | 0.5 |" in card
    assert "library_name: peft" in card and "lora_r" in card


def test_resume_resolution(tmp_path):
    from perception_judge.train.recipe import RecipeError
    from perception_judge.train.run import resolve_resume

    assert resolve_resume(None, str(tmp_path)) is None
    assert resolve_resume("auto", str(tmp_path)) is None
    with pytest.raises(RecipeError, match="no checkpoint"):
        resolve_resume("latest", str(tmp_path))
    for step in (2, 4):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    assert resolve_resume("latest", str(tmp_path)).endswith("checkpoint-4")
    assert resolve_resume(str(tmp_path / "checkpoint-2"), str(tmp_path)).endswith("checkpoint-2")


# ----------------------------------------------------------------------------------------------------------
# train/eval prompt identity
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "qwen3_vl"])
def test_trainer_prompt_equals_shared_renderer(arch, tiny_qwen25, tiny_qwen3, tmp_path):
    from transformers import AutoProcessor
    from trl.data_utils import apply_chat_template, prepare_multimodal_messages

    from perception_judge.core.protocol import render_generation_prompt
    from perception_judge.core.schema import Sampling
    from perception_judge.tiny.toyset import write_toy_training_set
    from perception_judge.train.recipe import parse_recipe
    from perception_judge.train.run import build_run

    model_dir, size = (tiny_qwen25, 56) if arch == "qwen2_5_vl" else (tiny_qwen3, 64)
    data_dir = write_toy_training_set(tmp_path / "data", n_train=6, n_validation=0, image_size=50)
    recipe = parse_recipe(
        [
            str(ROOT / "recipes" / "tiny.yaml"),
            "--dataset_name", str(data_dir),
            "--model_name_or_path", str(model_dir),
            "--output_dir", str(tmp_path / "out"),
            "--pixel_policy", f"size={size}",
            "--eval_strategy", "no",
        ]
    )  # fmt: skip
    run = build_run(recipe, write_files=False)
    trainer = run.trainer
    fresh = AutoProcessor.from_pretrained(model_dir)  # what an evaluation backend loads
    for i in range(3):  # one row per protocol
        row = run.data.train[i]
        assert row["images"][0].size == (size, size)  # the pixel policy, applied on read
        messages = prepare_multimodal_messages(row["prompt"], images=row["images"])
        expected_text = render_generation_prompt(fresh, row["prompt"], "auto")
        # the text trl renders for the forward pass ...
        assert apply_chat_template({"prompt": messages}, trainer.processing_class)["prompt"] == expected_text
        # ... and the ids it generates from
        prompt_ids, _, _ = trainer._tokenize_prompts([messages])
        expected_ids = fresh(text=[expected_text], images=[row["images"]], return_tensors="pt")["input_ids"][
            0
        ]
        assert list(prompt_ids[0]) == expected_ids.tolist()
        assert expected_text.endswith("<think>\n")  # prefix installed (Qwen2.5) or native (Qwen3 thinking)
    assert run.info["reward_options"]["think_open"] is True
    # validation samples with the training sampling settings (no silent greedy decoding)
    assert trainer.generation_config.do_sample and trainer.generation_config.temperature == 1.0
    assert trainer.generation_config.top_k == 20 and trainer.generation_config.top_p == 0.95
    # the run file records them as the one decoding record (core.schema.Sampling)
    t = recipe.training
    sampling = Sampling(
        temperature=1.0, top_p=0.95, top_k=20, max_new_tokens=t.max_completion_length, seed=t.seed
    )
    assert run.info["validation"]["sampling"] == sampling.model_dump() and sampling.max_new_tokens > 1


def test_mixed_image_and_text_only_batch_trains(tiny_qwen25, tmp_path):
    """trl 1.16 passed text-only rows of a mixed batch to the processor as None and crashed; the trainer fixes it."""
    from perception_judge.tiny.toyset import write_toy_training_set
    from perception_judge.train.recipe import parse_recipe
    from perception_judge.train.run import build_run

    data_dir = write_toy_training_set(tmp_path / "data", n_train=4, n_validation=0, text_only_every=2)
    recipe = parse_recipe(
        [
            str(ROOT / "recipes" / "tiny.yaml"),
            "--dataset_name", str(data_dir),
            "--model_name_or_path", str(tiny_qwen25),
            "--output_dir", str(tmp_path / "out"),
            "--eval_strategy", "no",
        ]
    )  # fmt: skip
    trainer = build_run(recipe, write_files=False).trainer
    rows = [trainer.train_dataset[i] for i in range(4)]
    assert [len(r["images"]) for r in rows] == [1, 0, 1, 0]
    batch = [r for r in rows for _ in range(2)]  # num_generations = 2
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop
    inputs = trainer._generate_and_score_completions(batch)
    assert inputs["num_images"] == [1, 1, 0, 0, 1, 1, 0, 0]
    loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    assert any(p.grad is not None for p in trainer.model.parameters())


@pytest.mark.parametrize("fixture", ["tiny_qwen25", "tiny_qwen3"])
def test_text_only_passes_run_the_vision_tower_and_change_nothing(fixture, request):
    """A pass without images runs the tower on a placeholder whose features land at no token: the same modules
    run as with images (what keeps ZeRO-3 ranks in step), the logits and the generated tokens are those of the
    plain pass, every tower parameter gets a zero gradient, decoding steps do not run the tower, and a 0-row
    ``pixel_values`` (an image-less chunk of a mixed batch, which crashed the model) is a text-only pass."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from perception_judge.train.models import keep_vision_tower_in_step

    folder = request.getfixturevalue(fixture)
    model = AutoModelForImageTextToText.from_pretrained(folder)
    tokenizer = AutoProcessor.from_pretrained(folder).tokenizer
    tokenizer.padding_side = "left"
    x = tokenizer(["how many red discs", "two"], return_tensors="pt", padding=True)
    with torch.no_grad():
        plain = model(**x).logits
    plain_tokens = model.generate(**x, max_new_tokens=4, do_sample=False)
    patch = model.config.vision_config.patch_size
    empty = {
        "pixel_values": torch.zeros(0, 3 * 2 * patch * patch),
        "image_grid_thw": torch.zeros(0, 3).long(),
    }
    with pytest.raises((ValueError, RuntimeError)):
        model(**x, **empty)

    assert keep_vision_tower_in_step(model) == 1 and keep_vision_tower_in_step(model) == 1  # idempotent
    tower_calls = []
    model.model.visual.register_forward_hook(lambda *_: tower_calls.append(1))
    logits = model(**x).logits
    assert torch.equal(logits.detach(), plain) and len(tower_calls) == 1
    logits.sum().backward()
    grads = [p.grad for p in model.model.visual.parameters()]
    assert all(g is not None and not g.any() for g in grads)
    assert any(p.grad is not None and p.grad.any() for p in model.model.language_model.parameters())
    tower_calls.clear()
    assert torch.equal(model.generate(**x, max_new_tokens=4, do_sample=False), plain_tokens)
    assert len(tower_calls) == 1  # the prefill only
    with torch.no_grad():
        assert torch.equal(model(**x, **empty).logits, plain)


def test_generate_fields_match_the_installed_trl():
    """The trainer reads trl's private ``_generate`` tuple by name: pin the names to the installed trl's source, so
    a trl release that reorders or renames them fails here."""
    import inspect
    import re

    from trl import GRPOTrainer

    from perception_judge.train.trainer import GENERATE_FIELDS

    source = inspect.getsource(GRPOTrainer._generate)
    returned = re.findall(r"^\s*return (.+)$", source, flags=re.M)[-1]
    assert tuple(name.strip() for name in returned.split(",")) == GENERATE_FIELDS


def test_image_less_micro_batches_train_in_one_process(tiny_qwen25, tmp_path):
    """With gradient accumulation a generation batch is scored and trained in chunks; a chunk of text-only rows
    got a 0-row ``pixel_values`` and crashed the model (``torch.cat(): expected a non-empty list``)."""
    from perception_judge.tiny.toyset import write_toy_training_set
    from perception_judge.train.recipe import parse_recipe
    from perception_judge.train.run import build_run

    data_dir = write_toy_training_set(tmp_path / "data", n_train=8, n_validation=0, text_only_pattern="ITTI")
    recipe = parse_recipe(
        [
            str(ROOT / "recipes" / "tiny.yaml"),
            "--dataset_name", str(data_dir),
            "--model_name_or_path", str(tiny_qwen25),
            "--output_dir", str(tmp_path / "out"),
            "--eval_strategy", "no",
            "--save_strategy", "no",
            "--per_device_train_batch_size", "2",
            "--gradient_accumulation_steps", "2",
            "--shuffle_dataset", "false",
            "--max_steps", "2",
            "--max_completion_length", "8",
        ]
    )  # fmt: skip
    trainer = build_run(recipe, write_files=False).trainer
    trainer.train()
    assert trainer.state.global_step == 2
    assert trainer.pj_counts["rollouts"] == 2 and trainer.pj_counts["text_only_rollouts"] == 0


def test_tracker_helpers():
    from perception_judge.train.recipe import report_to_list
    from perception_judge.train.trainer import prompt_as_text

    assert report_to_list("wandb,tensorboard") == ["wandb", "tensorboard"]
    assert report_to_list([]) == ["none"] and report_to_list(["trackio"]) == ["trackio"]
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "judge"}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "q"}]},
    ]
    assert prompt_as_text(messages) == "system: judge\n\nuser: <image>q"
    assert prompt_as_text("already text") == "already text"


@pytest.mark.track
def test_tensorboard_gets_samples_with_images(tiny_qwen25, tmp_path):
    """Runs where the `track` extra (tensorboard) is installed: `make test-track` installs it, and fails it when
    tensorboard is missing (CI runs it)."""
    import importlib.util

    from conftest import skip_or_fail

    if importlib.util.find_spec("tensorboard") is None:
        skip_or_fail("tensorboard", "tensorboard is not installed (make test-track installs the track extra)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from perception_judge.tiny.toyset import write_toy_training_set
    from perception_judge.train.recipe import parse_recipe
    from perception_judge.train.run import build_run

    data_dir = write_toy_training_set(tmp_path / "data", n_train=4, n_validation=0)
    out = tmp_path / "out"
    recipe = parse_recipe(
        [
            str(ROOT / "recipes" / "tiny.yaml"),
            "--dataset_name", str(data_dir),
            "--model_name_or_path", str(tiny_qwen25),
            "--output_dir", str(out),
            "--eval_strategy", "no",
            "--save_strategy", "no",
            "--max_steps", "1",
            "--sample_log_steps", "1",
            "--report_to", "tensorboard",
            "--log_completions", "true",
        ]
    )  # fmt: skip
    trainer = build_run(recipe, write_files=False).trainer
    trainer.train()
    events = next((out / "runs").iterdir())
    acc = EventAccumulator(str(events), size_guidance={"images": 0, "tensors": 0})
    acc.Reload()
    assert "samples/0/image" in acc.Tags()["images"]
    assert any(tag.startswith("train/rewards/judge/mean") for tag in acc.Tags()["scalars"])
    assert (out / "samples" / "step-000001.jsonl").is_file()


def test_base_adapter_merge_and_frozen_vision_tower_in_a_built_run(tiny_qwen25, tmp_path):
    """A recipe with base_adapter trains on the merged base (recorded as base_model); freeze_vision_tower holds."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    from perception_judge.tiny.toyset import write_toy_training_set
    from perception_judge.train.recipe import parse_recipe
    from perception_judge.train.run import build_run

    adapter = tmp_path / "flex-adapter"
    get_peft_model(
        AutoModelForImageTextToText.from_pretrained(tiny_qwen25),
        LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False),
    ).save_pretrained(adapter)
    data_dir = write_toy_training_set(tmp_path / "data", n_train=4, n_validation=0)
    out = tmp_path / "out"
    recipe = parse_recipe(
        [
            str(ROOT / "recipes" / "tiny.yaml"),
            "--dataset_name", str(data_dir),
            "--model_name_or_path", str(tiny_qwen25),
            "--base_adapter", str(adapter),
            "--output_dir", str(out),
            "--eval_strategy", "no",
            "--freeze_vision_tower", "true",
        ]
    )  # fmt: skip
    run = build_run(recipe)
    merged = out / "merged_base"
    assert run.model_path == str(merged) and (merged / "perception_judge_merge.json").is_file()
    info = json.loads((out / "perception_judge_run.json").read_text())
    assert info["base_model"] == str(merged.resolve()) and info["base_adapter"] == str(adapter)
    model = run.trainer.model
    visual = [p for n, p in model.named_parameters() if ".visual." in n]
    assert visual and not any(p.requires_grad for p in visual)
    assert info["parameters"]["trainable"] < info["parameters"]["total"]


# ----------------------------------------------------------------------------------------------------------
# precision: fp32 master weights without DeepSpeed
# ----------------------------------------------------------------------------------------------------------


def _moved_by_one_bf16_step(model_dir: Path, tmp_path: Path) -> float:
    """One GRPO step at lr 1e-5 with bf16 on one process (no DeepSpeed) from ``model_dir`` saved in bf16 (AdamW moves
    every weight by about 1e-5, below half a bf16 step for almost all of them): the share of the language model's
    linear weights that the saved model changed."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from perception_judge.tiny.toyset import write_toy_training_set
    from perception_judge.train import run
    from perception_judge.train.recipe import parse_recipe

    base, out = tmp_path / "bf16-judge", tmp_path / "run"
    AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.bfloat16).save_pretrained(base)
    AutoProcessor.from_pretrained(model_dir).save_pretrained(base)
    data = write_toy_training_set(tmp_path / "data", n_train=4, n_validation=0)
    recipe = parse_recipe([str(ROOT / "recipes" / "tiny.yaml"), "--dataset_name", str(data), "--model_name_or_path",
                           str(base), "--output_dir", str(out), "--dtype", "bfloat16", "--bf16", "true",
                           "--learning_rate", "1e-5", "--weight_decay", "0", "--max_completion_length", "16",
                           "--max_steps", "1", "--eval_strategy", "no", "--save_strategy", "no"])  # fmt: skip
    trainer = run.build_run(recipe).trainer
    assert trainer.ref_model.dtype == torch.bfloat16  # the reference model stays in the recipe's dtype
    trainer.train()
    assert [h["grad_norm"] > 0 for h in trainer.state.log_history if "loss" in h] == [True]
    trainer.save_model(str(out))
    before, after = load_file(str(base / "model.safetensors")), load_file(str(out / "model.safetensors"))
    linear = [k for k in before if k.startswith("model.layers.") and k.endswith("proj.weight")]
    assert {after[k].dtype for k in linear} == {trainer.model.dtype}
    return sum(int((after[k] != before[k]).sum()) for k in linear) / sum(before[k].numel() for k in linear)


def test_full_finetuning_in_bf16_keeps_fp32_master_weights(tiny_qwen25, tmp_path, capsys):
    """Without DeepSpeed the model loads in float32 and bf16 is autocast: every weight moves in the saved model."""
    assert _moved_by_one_bf16_step(tiny_qwen25, tmp_path) > 0.999
    info = json.loads((tmp_path / "run" / "perception_judge_run.json").read_text())
    assert info["precision"] == {
        "weights": "float32",
        "compute": "bfloat16",
        "masters": "the model",
        "zero_stage": None,
    }
    assert (
        "weights in float32, compute in bfloat16, fp32 master weights: the model" in capsys.readouterr().err
    )


@pytest.mark.slow
def test_the_same_step_on_bf16_weights_keeps_most_of_them(tiny_qwen25, tmp_path, monkeypatch):
    """The path before (the model in the recipe's bf16, forced here): AdamW's update is rounded away for most."""
    from perception_judge.train import run

    precision = run.precision
    monkeypatch.setattr(run, "precision", lambda recipe: {**precision(recipe), "weights": "bfloat16"})
    assert _moved_by_one_bf16_step(tiny_qwen25, tmp_path) < 0.5
