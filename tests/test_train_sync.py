"""The LoRA weight sync into vLLM (``perception_judge.train.sync``) against trl 1.16's, on CPU without an engine.

vLLM cannot run colocated on CPU, so the two iterations that feed its ``load_weights`` are compared directly
(tests/support/weight_sync.py). The ZeRO-3 run on 2 processes, with every gather recorded, is in
tests/test_train_deepspeed.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.weight_sync import both_syncs, engineless, lora_judge

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS = {
    "lora": {},
    "rslora-dropout": {"use_rslora": True, "lora_dropout": 0.1},
    "dora": {"use_dora": True},
    "modules-to-save": {"modules_to_save": ["language_model.norm"]},
    "lora-bias": {"lora_bias": True, "target_modules": ["q_proj", "v_proj"]},
}


@pytest.mark.parametrize("lora", ADAPTERS.values(), ids=ADAPTERS.keys())
def test_sync_yields_trls_merged_weights_and_leaves_the_model_as_it_was(tiny_qwen25, lora):
    from peft.tuners.lora import LoraLayer

    model = lora_judge(tiny_qwen25, **lora)  # bf16 base, fp32 adapters with lora_B non-zero: a trained LoRA
    before = {k: v.clone() for k, v in model.state_dict().items()}
    after = {}
    ours, theirs = both_syncs(
        engineless(model), lambda: after.update({k: v.clone() for k, v in model.state_dict().items()})
    )
    assert [n for n, _ in ours] == [n for n, _ in theirs]
    assert all(a.dtype == b.dtype and torch.equal(a, b) for (_, a), (_, b) in zip(ours, theirs, strict=True))
    # the model after the project's sync (trl's in-place merge and unmerge of bf16 weights comes after it)
    assert after.keys() == before.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert not any(m.merged or m._caches for m in model.modules() if isinstance(m, LoraLayer))
    # the adapter is really in the synced weights, under the names vLLM loads
    synced = dict(ours)
    base = before["base_model.model.model.language_model.layers.0.self_attn.q_proj.base_layer.weight"]
    assert not torch.equal(synced["model.language_model.layers.0.self_attn.q_proj.weight"], base)
    assert not any("lora_" in n or "base_layer" in n or n.startswith("base_model") for n in synced)


def test_sync_refuses_adapters_it_cannot_merge_and_leaves_other_models_to_trl(tiny_qwen25):
    from peft import IA3Config, get_peft_model
    from transformers import AutoModelForImageTextToText

    from perception_judge.train.sync import use_layerwise_sync

    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen25)
    gen = engineless(model)
    use_layerwise_sync(gen)  # not a PEFT model: trl's one-parameter-at-a-time path stays
    assert "_iter_named_params" not in vars(gen)
    ia3 = get_peft_model(model, IA3Config(target_modules=["q_proj"], feedforward_modules=[]))
    with pytest.raises(
        ValueError, match=r"0\.self_attn\.q_proj is Linear; the per-layer merge takes LoRA and DoRA"
    ):
        use_layerwise_sync(engineless(ia3))
    alora = lora_judge(tiny_qwen25, alora_invocation_tokens=[1, 2], target_modules=["q_proj"])
    with pytest.raises(ValueError, match=r"q_proj is \['ALoraLinearVariant'\]"):
        use_layerwise_sync(engineless(alora))


def test_trainer_routes_the_lora_sync_through_the_layerwise_merge(tiny_qwen25, tmp_path, monkeypatch):
    from perception_judge.tiny.toyset import write_toy_training_set
    from perception_judge.train.recipe import parse_recipe
    from perception_judge.train.run import build_run
    from perception_judge.train.sync import layerwise_named_params

    # vLLM (not installed, and not runnable on CPU) replaced by the shell its weight sync needs
    monkeypatch.setattr("perception_judge.train.recipe._importable", lambda module: True)
    monkeypatch.setattr(
        "trl.trainer.grpo_trainer.VLLMGeneration", lambda model, accelerator, **_: engineless(model)
    )
    data = write_toy_training_set(tmp_path / "data", n_train=4, n_validation=0)
    argv = [
        str(ROOT / "recipes" / "tiny.yaml"),
        "--dataset_name",
        str(data),
        "--output_dir",
        str(tmp_path / "run"),
    ]
    argv += ["--model_name_or_path", str(tiny_qwen25), "--eval_strategy", "no", "--use_peft", "true"]
    trainer = build_run(parse_recipe([*argv, "--use_vllm", "true"]), write_files=False).trainer
    assert trainer.vllm_generation._iter_named_params.__func__ is layerwise_named_params
