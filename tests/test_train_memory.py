"""The memory arithmetic (perception_judge.train.memory) beyond the shipped recipes' table (tests/test_train_recipe.py):
how each term follows the settings it depends on, the model shape read from a transformers config, and the verdict
lines `recipe-memory` and the preflight print."""

from __future__ import annotations

from dataclasses import fields

import pytest
from test_train_recipe import RECIPES, _memory

from perception_judge.train.memory import (
    GIB,
    PUBLISHED,
    Shape,
    estimate,
    head_bytes,
    preflight,
    shape_of,
    verdict,
)
from perception_judge.train.recipe import parse_recipe

P7, V7, H7 = 8_291_317_760, 152_064, 3_584  # Qwen2.5-VL-7B: Shape.params(), vocabulary, hidden width


def _recipe(name: str, *overrides: str):
    return parse_recipe(
        [str(RECIPES / f"{name}.yaml"), "--bf16", "false", *overrides], check_environment=False
    )


def test_estimate_defaults_to_8_gpus_and_the_recipes_own_zero_stage():
    shape = PUBLISHED["qwen2_5_vl_7b"]
    flex7b = _recipe("flex7b")  # ZeRO-3 from its deepspeed: file
    assert (
        estimate(flex7b, shape) == estimate(flex7b, shape, 8, stage=3) != estimate(flex7b, shape, 8, stage=0)
    )
    ddp = _recipe("flex7b", "--deepspeed", "none")  # no DeepSpeed: stage 0, DDP's buckets
    assert estimate(ddp, shape) == estimate(ddp, shape, 8, stage=0) != estimate(ddp, shape, 8, stage=1)
    assert estimate(ddp, shape)["zero_buffers"] == 4 * P7 / GIB


def test_activations_follow_the_micro_batch_and_the_attention_kernel():
    """Checkpoints layers x bL x 2H, sdpa's mask bL², the validation forward b_eL(8H + 6I) + b_eL²; flash attention
    has no mask. flex7b: L = 28,672, 28 layers, I = 18,944, validation batch 4."""
    length, layers, inter = 28_672, 28, 18_944
    for b in (1, 2):
        parts = _memory("flex7b", "--per_device_train_batch_size", str(b))
        assert parts["checkpoints"] * GIB == pytest.approx(layers * b * length * H7 * 2, abs=0.5)
        assert parts["attention_mask"] * GIB == pytest.approx(b * length * length, abs=0.5)
    flash = _memory("flex7b", "--attn_implementation", "flash_attention_2")
    assert flash["attention_mask"] == 0
    assert flash["eval_forward"] * GIB == pytest.approx(4 * length * (8 * H7 + 6 * inter), abs=0.5)
    sdpa = _memory("flex7b")
    assert sdpa["eval_forward"] * GIB == pytest.approx(4 * length * (8 * H7 + 6 * inter + length), abs=0.5)


def test_without_a_prompt_limit_sequences_count_their_completion_only():
    """estimate() alone has no prompt length without max_prompt_tokens: L = C (the preflight passes the data's longest)."""
    recipe = _recipe("flex7b")
    recipe.judge.max_prompt_tokens = None
    parts = estimate(recipe, PUBLISHED["qwen2_5_vl_7b"], stage=3)
    assert parts["checkpoints"] * GIB == pytest.approx(28 * 24_576 * H7 * 2, abs=0.5)


def test_short_sequences_the_trained_lm_head_dominates_the_activations():
    """At 512 tokens (128 completion) the head's fp32 V x H gradient outweighs a recomputed layer, as in the 7B-layout
    bench's first case; off Triton (``triton=False``) the head at full length is torch's fold."""
    short = ("--max_prompt_tokens", "384", "--max_completion_length", "128", "--vllm_max_model_length", "512")
    parts = _memory("flex7b", *short)
    assert parts["lm_head"] > parts["recomputed_layer"] > 0
    assert parts["activations"] == parts["checkpoints"] + parts["attention_mask"] + parts["lm_head"]
    cpu = estimate(
        _recipe("flex7b"), PUBLISHED["qwen2_5_vl_7b"], triton=False
    )  # full length: the fold counts
    assert cpu["lm_head"] == head_bytes(PUBLISHED["qwen2_5_vl_7b"], 24576, trains=True, triton=False) / GIB
    assert cpu["lm_head"] > _memory("flex7b")["lm_head"]


def test_the_lm_head_without_triton_trains_in_torchs_fold():
    """Off Triton, a trained head holds torch's fold of the tile (35 B per element) and the fp32 V x H gradient: H 8,
    V 100, 5 positions."""
    toy = Shape(8, 2, 16, 2, 1, 4, 100, False, 4, 1, 8, 3, 2)
    assert head_bytes(toy, 5, trains=True, triton=False) == 35 * 5 * 32768 + 4 * 100 * 8 + 8 * 5 * 8


def test_no_validation_phase_without_evaluation_and_no_reference_model_without_beta():
    off = _memory("flex7b", "--eval_strategy", "no")
    assert off["evaluation"] == 0 and off["peak"] == max(
        off["training"], off["weight_sync"], off["generation"]
    )
    assert _memory("flex7b")["evaluation"] > 0
    assert _memory("flex7b", "--beta", "0")["reference_model"] == 0
    assert _memory("flex7b", "--beta", "0.01")["reference_model"] * GIB == pytest.approx(2 * P7 / 8)


def test_zero_buffers_to_the_byte():
    """ZeRO-3: 2 B x (1.05e9 live and prefetched parameters + the V x H head); ZeRO-1 / 2: two 5e8-element buckets;
    DDP on two processes already keeps a 4 B x T copy of the gradients, on one none."""
    assert _memory("flex7b")["zero_buffers"] * GIB == pytest.approx(2 * (1.05e9 + V7 * H7), abs=0.5)
    assert _memory("flex7b", stage=2)["zero_buffers"] * GIB == pytest.approx(2e9, abs=0.5)
    assert _memory("flex7b", stage=0, world=2)["zero_buffers"] * GIB == pytest.approx(4 * P7, abs=0.5)
    assert _memory("flex7b", stage=0, world=1)["zero_buffers"] == 0


def test_the_weight_sync_gathers_a_whole_layer_for_lora_and_one_parameter_otherwise():
    """A shape whose decoder layer (576 weights: q, o 64; k, v 32; gate, up, down 128) outweighs its 10 x 8
    embedding: LoRA gathers the layer and keeps a merged copy of its largest linear; full fine-tuning gathers one
    parameter at a time, at most V x H."""
    toy = Shape(8, 2, 16, 2, 1, 4, 10, False, 4, 1, 8, 3, 2)
    lora = estimate(_recipe("flex32b"), toy, stage=3)
    assert lora["sync_gather"] * GIB == pytest.approx(2 * 576 + 2 * 128, abs=1e-6)
    full = estimate(_recipe("flex7b"), toy, stage=3)
    assert full["sync_gather"] * GIB == pytest.approx(2 * 10 * 8, abs=1e-6)


def _config(name: str):
    """The published checkpoints' config.json, the numbers written out (tied: Qwen3-VL-4B)."""
    from transformers import Qwen2_5_VLConfig, Qwen3VLConfig

    if name.startswith("qwen2_5"):
        hidden, layers, inter, heads, kv, vision_inter = {
            "qwen2_5_vl_7b": (3584, 28, 18944, 28, 4, 3420), "qwen2_5_vl_32b": (5120, 64, 27648, 40, 8, 3456)
        }[name]  # fmt: skip
        text = dict(hidden_size=hidden, num_hidden_layers=layers, intermediate_size=inter, num_attention_heads=heads,
                    num_key_value_heads=kv, vocab_size=152064)  # fmt: skip
        vision = dict(
            hidden_size=1280, depth=32, intermediate_size=vision_inter, patch_size=14, out_hidden_size=hidden
        )
        return Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False)
    hidden, inter, vision_hidden, depth, vision_inter, tied = {
        "qwen3_vl_4b": (2560, 9728, 1024, 24, 4096, True), "qwen3_vl_8b": (4096, 12288, 1152, 27, 4304, False)
    }[name]  # fmt: skip
    text = dict(hidden_size=hidden, num_hidden_layers=36, intermediate_size=inter, num_attention_heads=32,
                num_key_value_heads=8, head_dim=128, vocab_size=151936)  # fmt: skip
    vision = dict(hidden_size=vision_hidden, depth=depth, intermediate_size=vision_inter, patch_size=16,
                  deepstack_visual_indexes=[5, 11, 17], num_position_embeddings=2304, out_hidden_size=hidden)  # fmt: skip
    return Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=tied)


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_shape_of_reads_every_field_of_the_published_configs(name):
    """Qwen2.5-VL: gated vision MLP (3 matrices), no head_dim key (hidden / heads), no tower position embeddings;
    Qwen3-VL: 2-matrix vision MLP, head_dim 128 (not 2,560 / 32 = 80 for the 4B), deepstack mergers."""
    shape = shape_of(_config(name))
    assert shape == PUBLISHED[name]
    assert all(type(getattr(shape, f.name)).__name__ == f.type for f in fields(shape)), (
        shape
    )  # counts, not 128.0


def test_shape_of_reads_embeddings_tied_in_the_text_config_only():
    from transformers import Qwen3VLConfig

    config = Qwen3VLConfig(
        text_config={"tie_word_embeddings": True, "head_dim": 128}, tie_word_embeddings=False
    )
    assert shape_of(config).tied
    assert not shape_of(Qwen3VLConfig(tie_word_embeddings=False)).tied


def test_the_preflight_reads_cuda_device_0_and_the_runs_stage(monkeypatch):
    import torch

    config, recipe = _config("qwen2_5_vl_7b"), _recipe("flex7b")  # parsed before CUDA "exists"
    asked, gib = [], [80]

    def properties(index):
        asked.append(index)
        return type("Props", (), {"total_memory": gib[0] * GIB})

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    assert preflight(recipe, config, 8) is None and asked == [0]
    gib[0] = 64  # the engine's 35% of 64 GiB: 61.0 GiB of validation against a 60 GiB budget
    assert preflight(recipe, config, 8) == (
        "evaluation needs 61.0 GiB per GPU of 60.0 (ZeRO-3): lower per_device_eval_batch_size, "
        "vllm_enable_sleep_mode: true, ZeRO-3 offload, LoRA (use_peft: true)"
    )


def test_the_preflight_counts_the_longest_prompt_when_max_prompt_tokens_is_unset(monkeypatch):
    """Without max_prompt_tokens the preflight takes the training set's longest prompt (build_run passes it after the
    rows are read, before any weights load): completions alone would understate every sequence."""
    import torch

    config, recipe = _config("qwen2_5_vl_7b"), _recipe("flex7b")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda i: type("Props", (), {"total_memory": 80 * GIB})
    )
    recipe.judge.max_prompt_tokens = None
    assert preflight(recipe, config, 8, longest_prompt=0) is None  # 24,576-token sequences fit
    why = preflight(recipe, config, 8, longest_prompt=16_384)  # 40,960 tokens do not
    assert why and why.startswith("evaluation needs "), why
    recipe.judge.max_prompt_tokens = 4096  # a limit wins over the data
    assert preflight(recipe, config, 8, longest_prompt=16_384) is None


def _verdict(name: str, *overrides: str, stage: int = 3, gpu_gib: float = 80.0) -> str | None:
    recipe = _recipe(name, *overrides)
    shape = PUBLISHED[{"flex7b": "qwen2_5_vl_7b", "flex32b": "qwen2_5_vl_32b"}[name]]
    return verdict(estimate(recipe, shape, 8, gpu_gib, stage), recipe, stage)


def test_verdict_lines_name_the_settings_that_can_help():
    """As recipe-memory prints them: an awake engine offers sleep, a LoRA recipe is not offered LoRA, an engine too
    large for the generation phase offers its own share, weights alone over the budget offer sharding only, and an
    engine that cannot hold one sequence's KV cache is refused though the phases fit (vLLM would refuse to start)."""
    assert _verdict("flex32b", "--vllm_enable_sleep_mode", "false") == (
        "evaluation needs 106.0 GiB per GPU of 76.0 (ZeRO-3): lower per_device_eval_batch_size, "
        "vllm_enable_sleep_mode: true, ZeRO-3 offload"
    )
    assert _verdict("flex7b", "--vllm_enable_sleep_mode", "true", "--vllm_gpu_memory_utilization", "0.9") == (
        "generation needs 92.3 GiB per GPU of 76.0 (ZeRO-3): lower vllm_gpu_memory_utilization, ZeRO-3 offload, "
        "LoRA (use_peft: true)"
    )
    assert _verdict("flex7b", stage=2, gpu_gib=40) == (
        "evaluation needs 78.5 GiB per GPU of 36.0 (ZeRO-2): DeepSpeed ZeRO-3 or its offload, LoRA (use_peft: true)"
    )
    small = _memory("flex32b", "--vllm_gpu_memory_utilization", "0.4")  # 32 GiB for 31.2 GiB of weights
    assert small["vllm_kv_cache_tokens"] == 0 and small["peak"] < small["budget"]
    assert _verdict("flex32b", "--vllm_gpu_memory_utilization", "0.4") == (
        "vLLM's KV cache holds 0 tokens, under vllm_max_model_length 28672: raise vllm_gpu_memory_utilization or "
        "vllm_tensor_parallel_size"
    )
    assert _verdict("flex32b") is None


def test_verdict_at_its_limits():
    """A peak equal to the budget fits; weights and reference equal to it are not yet "over" (batch fixes stay); a KV
    cache of exactly one sequence fits. Without vllm_max_model_length vLLM sizes the cache for the model's own
    maximum, which the arithmetic does not know: only an engine without any KV cache is refused then."""
    lora = _recipe("flex32b")
    parts = estimate(lora, PUBLISHED["qwen2_5_vl_32b"], stage=3)
    assert verdict({**parts, "vllm_kv_cache_tokens": 28672}, lora, 3) is None
    assert verdict({**parts, "vllm_kv_cache_tokens": 28671}, lora, 3).startswith(
        "vLLM's KV cache holds 28,671 tokens, under vllm_max_model_length 28672: raise"
    )
    lora.training.vllm_max_model_length = None
    assert verdict({**parts, "vllm_kv_cache_tokens": 1}, lora, 3) is None
    assert verdict({**parts, "vllm_kv_cache_tokens": 0}, lora, 3).startswith("vLLM's KV cache holds 0 tokens")
    recipe = _recipe("flex7b", "--per_device_eval_batch_size", "8")
    parts = estimate(recipe, PUBLISHED["qwen2_5_vl_7b"], stage=3)
    assert verdict({**parts, "peak": parts["budget"]}, recipe, 3) is None
    full = {**parts, "training_state": parts["budget"], "reference_model": 0.0}
    assert verdict(full, recipe, 3).endswith(
        ": lower per_device_eval_batch_size, vllm_enable_sleep_mode: true, ZeRO-3 offload, LoRA (use_peft: true)"
    )
    over = {**full, "training_state": parts["budget"] + 0.1}
    assert verdict(over, recipe, 3).endswith("(ZeRO-3): ZeRO-3 offload, LoRA (use_peft: true)")
