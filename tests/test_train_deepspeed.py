"""DeepSpeed ZeRO-2 and ZeRO-3 on two CPU processes, with the repo's accelerate configs (``make test-deepspeed``).

The first run JIT-builds DeepSpeed's shared-memory communication op (about 40 s, cached afterwards).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
from conftest import skip_or_fail

if importlib.util.find_spec("deepspeed") is None:  # no import at collection time: deepspeed is slow to import
    skip_or_fail("deepspeed", "deepspeed is not installed (make test-deepspeed installs it)")

from test_train_launch import (
    REWARDS,
    ROOT,
    assert_text_only_rounds,
    free_port,
    history,
    launch,
    mixed_rows,
    weights,
)

pytestmark = pytest.mark.deepspeed


@pytest.fixture(scope="module")
def toy_set(tmp_path_factory):
    # mixed rows, each rank with one text-only generation round while the other has images: under ZeRO-3 the rank
    # without images skipped the vision tower and the parameter gathers of the two ranks no longer matched
    return mixed_rows(tmp_path_factory.mktemp("ds_data"))


@pytest.mark.parametrize(
    ("stage", "arch", "size", "peft"),
    [(2, "qwen2_5_vl", 56, False), (3, "qwen3_vl", 64, False), (3, "qwen2_5_vl", 56, True)],
    ids=["zero2-full-qwen25", "zero3-full-qwen3", "zero3-lora-qwen25-real-tokenizer"],
)
def test_deepspeed_zero(stage, arch, size, peft, toy_set, tmp_path):
    """ZeRO-2 from accelerate's DeepSpeed --config_file; ZeRO-3 from the GPU recipes' `deepspeed:` file alone (for
    LoRA with every tensor partitioned: a save that does not gather them has other shapes). Every run with gradient
    checkpointing, on in every GPU recipe."""
    model_dir = tmp_path / "tiny"
    out = tmp_path / "run"
    args = [
        "--dataset_name", str(toy_set),
        "--model_name_or_path", str(model_dir),
        "--model_provider_options", f"arch={arch},warm_start_steps=0",
        "--max_completion_length", "16",
        "--pixel_policy", f"size={size}",
        "--max_steps", "2",
        "--save_steps", "2",
        "--eval_strategy", "no",
        "--shuffle_dataset", "false",
        "--gradient_checkpointing", "true",
        "--output_dir", str(out),
    ]  # fmt: skip
    if peft:  # Qwen's tokenizer, template and ids (the provider finds the model there and builds none)
        from perception_judge.tiny.models import make_tiny_model

        make_tiny_model(arch, model_dir, seed=0, tokenizer="qwen")
        # its random weights write almost no digits: completion lengths give the groups their advantage; no
        # reference pass (Qwen's 151,936-row head over every position is most of a CPU step)
        args += ["--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8", "--beta", "0",
                 "--reward_funcs", *REWARDS, "completion_length", "--reward_weights", "1.0", "0.2", "0.1", "1.0"]  # fmt: skip
    ds = ROOT / "configs" / "deepspeed" / "zero3.json"
    if peft:  # ZeRO-3 keeps tensors under 100k elements whole by default: all of a tiny model's
        config = json.loads(ds.read_text())
        config["zero_optimization"]["stage3_param_persistence_threshold"] = 0
        (ds := tmp_path / "zero3-partition-all.json").write_text(json.dumps(config))
    args += ["--deepspeed", str(ds)] if stage == 3 else []
    launch(
        args,
        config="deepspeed_zero2.yaml" if stage == 2 else "cpu_2proc.yaml",
        extra=["--num_processes", "2", "--mixed_precision", "no", "--main_process_port", str(free_port())],
        timeout=600,
    )
    ranks = [json.loads((out / "ranks" / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert all(
        r["world_size"] == 2 and "DEEPSPEED" in r["distributed_type"] and r["completions"] > 0 for r in ranks
    )
    assert json.loads((out / "perception_judge_run.json").read_text())["precision"]["zero_stage"] == stage
    assert_text_only_rounds(out, steps=2, want=(1, 1))
    logs = [h for h in history(out) if "reward" in h]
    assert [h["step"] for h in logs] == [1, 2]
    assert all(f"rewards/{n}/mean" in h for h in logs for n in REWARDS)
    assert (out / "checkpoint-2").is_dir()
    if peft:
        adapter = weights(out / "adapter_model.safetensors")
        assert {k: list(v.shape) for k, v in adapter.items()} == _adapter_shapes(model_dir, args)
        assert any(v.abs().sum() > 0 for k, v in adapter.items() if "lora_B" in k)
        return
    # the final model holds the full (gathered) weights, changed by training, and reloads
    before, after = weights(model_dir / "model.safetensors"), weights(out / "model.safetensors")
    assert set(before) <= set(after)  # DeepSpeed's gathered state dict also lists the tied lm_head
    changed = [k for k in before if before[k].shape == after[k].shape and not (before[k] == after[k]).all()]
    assert len(changed) > 0.9 * len(before)
    from transformers import AutoModelForImageTextToText

    assert AutoModelForImageTextToText.from_pretrained(Path(out)) is not None


def test_lora_weight_sync_gathers_one_decoder_layer_at_most(tiny_qwen25, tmp_path):
    """ZeRO-3 on 2 processes, a trained LoRA: the project's weight sync (perception_judge.train.sync) never has more
    than one decoder layer's parameters gathered (the recorder lists every parameter materialised while each
    ``GatheredParameters`` is open), yields trl's tensors bit for bit and leaves every shard as it was; trl's own
    sync gathers the whole model at once (tests/support/weight_sync.py)."""
    script = [str(ROOT / "tests" / "support" / "weight_sync.py"), str(tiny_qwen25), str(tmp_path)]
    extra = ["--num_processes", "2", "--mixed_precision", "no", "--main_process_port", str(free_port())]
    launch([], config="deepspeed_zero3.yaml", extra=extra, timeout=600, script=script)
    for rank in (0, 1):
        record = json.loads((tmp_path / f"rank-{rank}.json").read_text())
        assert record["names"] and record["equal"] and record["unchanged"] and record["ours"]
        numel = record["numel"]
        layer_of = {n: m.group() for n in numel if (m := re.search(r"language_model\.layers\.\d+\.", n))}
        one_layer = max(
            sum(numel[n] for n in numel if layer_of.get(n) == layer) for layer in layer_of.values()
        )
        for live in record[
            "ours"
        ]:  # one module's parameters (a LoRA module's with its adapters), or one layer's
            assert len({layer_of.get(n, n.rpartition(".")[0]) for n in live}) == 1, live
            assert sum(numel[n] for n in live) <= one_layer, live
        assert [sorted(live) for live in record["trl"]] == [sorted(numel)]


def _adapter_shapes(model_dir: Path, args: list[str]) -> dict[str, list[int]]:
    """The adapter the run's LoRA settings give the unpartitioned model, tensor by tensor: a save that gathered only
    part of ZeRO-3's shards has other shapes (or none)."""
    from peft import get_peft_model, get_peft_model_state_dict
    from transformers import AutoModelForImageTextToText

    from perception_judge.train.models import build_lora_config
    from perception_judge.train.recipe import parse_recipe

    recipe = parse_recipe([str(ROOT / "recipes" / "tiny.yaml"), *args], check_environment=False)
    model = get_peft_model(
        AutoModelForImageTextToText.from_pretrained(model_dir), build_lora_config(recipe.model, recipe.judge)
    )
    return {k: list(v.shape) for k, v in get_peft_model_state_dict(model).items()}
