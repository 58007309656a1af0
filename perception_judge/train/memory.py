"""GPU memory of a GRPO recipe, per GPU, from the model's shapes: does it fit before anything is launched?

The arithmetic (GiB per GPU under ZeRO-3, every sequence at its maximum length) is docs/training.md "Memory on 80 GB
GPUs", each term a part of :func:`estimate`; the peak must stay under the GPU's memory less ``RESERVED_GIB``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GIB = 2**30
RESERVED_GIB = 4.0
SLEEP_RESIDUAL_GIB = 1.0
FUSED_HEAD_TILE = 32768  # trl 1.16's fused LM head scores this many positions at a time


@dataclass(frozen=True)
class Shape:
    """What the arithmetic needs of a Qwen-VL model (its config.json): the language model and the vision tower."""

    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    vision_hidden: int
    vision_depth: int
    vision_intermediate: int
    vision_mlp: int  # weight matrices per vision MLP: 3 (Qwen2.5-VL, gated) or 2 (Qwen3-VL)
    patch: int
    deepstack: int = 0  # Qwen3-VL's extra mergers feeding early language-model layers
    vision_positions: int = 0  # Qwen3-VL's learned position embeddings of the tower

    def layer_linears(self) -> list[tuple[int, int]]:
        """(in, out) of every linear layer of one language-model layer (q, k, v, o, gate, up, down)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        h, i = self.hidden, self.intermediate
        return [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]

    def params(self) -> int:
        """Parameters of the whole model (norms and biases left out: under 0.1 %)."""
        lm = self.layers * sum(a * b for a, b in self.layer_linears())
        lm += self.vocab * self.hidden * (1 if self.tied else 2)
        v = self.vision_hidden
        vision = self.vision_depth * (4 * v * v + self.vision_mlp * v * self.vision_intermediate)
        vision += 3 * 2 * self.patch**2 * v + self.vision_positions * v  # patch and position embeddings
        vision += (1 + self.deepstack) * ((4 * v) ** 2 + 4 * v * self.hidden)  # the mergers
        return lm + vision

    def lora_params(self, rank: int) -> int:
        """Parameters of a rank-``rank`` LoRA on every linear layer of the language model (not the tower)."""
        return self.layers * sum(rank * (a + b) for a, b in self.layer_linears())


# The published checkpoints the recipes train (their config.json), for machines that have not downloaded them.
PUBLISHED = {
    "qwen2_5_vl_7b": Shape(3584, 28, 18944, 28, 4, 128, 152064, False, 1280, 32, 3420, 3, 14),
    "qwen2_5_vl_32b": Shape(5120, 64, 27648, 40, 8, 128, 152064, False, 1280, 32, 3456, 3, 14),
    "qwen3_vl_4b": Shape(2560, 36, 9728, 32, 8, 128, 151936, True, 1024, 24, 4096, 2, 16, 3, 2304),
    "qwen3_vl_8b": Shape(4096, 36, 12288, 32, 8, 128, 151936, False, 1152, 27, 4304, 2, 16, 3, 2304),
}
MODEL_SHAPES = {
    "jongwooko/Flex-VL-7B": "qwen2_5_vl_7b",
    "Qwen/Qwen2.5-VL-7B-Instruct": "qwen2_5_vl_7b",
    "Qwen/Qwen2.5-VL-32B-Instruct": "qwen2_5_vl_32b",
    "Qwen/Qwen3-VL-4B-Thinking": "qwen3_vl_4b",
    "Qwen/Qwen3-VL-8B-Thinking": "qwen3_vl_8b",
}


def shape_of(config: Any) -> Shape:
    """The :class:`Shape` of a transformers Qwen2.5-VL / Qwen3-VL config."""
    t, v = config.get_text_config(), config.vision_config
    qwen3 = "qwen3" in config.model_type
    return Shape(
        t.hidden_size,
        t.num_hidden_layers,
        t.intermediate_size,
        t.num_attention_heads,
        t.num_key_value_heads,
        getattr(t, "head_dim", None) or t.hidden_size // t.num_attention_heads,
        t.vocab_size,
        bool(getattr(config, "tie_word_embeddings", False) or getattr(t, "tie_word_embeddings", False)),
        v.hidden_size,
        getattr(v, "depth", None) or v.num_hidden_layers,
        v.intermediate_size,
        2 if qwen3 else 3,
        v.patch_size,
        len(getattr(v, "deepstack_visual_indexes", None) or ()),
        getattr(v, "num_position_embeddings", 0) or 0,
    )


def estimate(recipe: Any, shape: Shape, world: int = 8, gpu_gib: float = 80.0) -> dict[str, float]:
    """Per-GPU GiB of every part named in the module docstring, the two phases' totals and the peak, for a parsed
    recipe (:class:`~perception_judge.train.recipe.Recipe`) on ``world`` GPUs of ``gpu_gib`` each."""
    t, m, j = recipe.training, recipe.model, recipe.judge
    total = shape.params()
    trainable = shape.lora_params(m.lora_r) if m.use_peft else total
    frozen = total if m.use_peft else 0
    completion = t.max_completion_length
    length = (j.max_prompt_tokens or 0) + completion
    tokens = t.per_device_train_batch_size * length
    kv = shape.kv_heads * shape.head_dim
    layer_work = tokens * (4 * shape.hidden + 2 * kv + 3 * shape.intermediate) * 2 * 2
    head_tile = min(t.per_device_train_batch_size * completion, FUSED_HEAD_TILE) * shape.vocab * 6
    parts = {
        "training_state": (16 * trainable + 2 * frozen) / world,
        "reference_model": 2 * total / world if t.beta > 0 and not m.use_peft else 0.0,
        "zero3_working_set": min(3 * GIB, 2 * total),
        "activations": shape.layers * tokens * shape.hidden * 2 + layer_work + head_tile,
    }
    out = {name: value / GIB for name, value in parts.items()}
    engine = t.vllm_gpu_memory_utilization * gpu_gib if t.use_vllm and t.vllm_mode == "colocate" else 0.0
    asleep = SLEEP_RESIDUAL_GIB if engine and t.vllm_enable_sleep_mode else engine
    resident = out["training_state"] + out["reference_model"]
    out["vllm_engine"] = engine
    out["training_phase"] = resident + out["zero3_working_set"] + out["activations"] + asleep
    out["generation_phase"] = resident + out["zero3_working_set"] + engine
    out["peak"] = max(out["training_phase"], out["generation_phase"])
    out["budget"] = gpu_gib - RESERVED_GIB
    if engine:
        tp = t.vllm_tensor_parallel_size or 1
        weights = 2 * total / tp / GIB
        per_token = 2 * shape.layers * kv * 2 / tp
        out["vllm_weights"] = weights
        out["vllm_kv_cache_tokens"] = max(0.0, (engine - weights - 2.0) * GIB / per_token)
    return out
