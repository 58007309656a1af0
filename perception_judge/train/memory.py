"""GPU memory of a GRPO recipe, per GPU, from the model's shapes: does it fit before anything is launched?

The arithmetic (GiB per GPU, every sequence at its maximum length) is docs/training.md "Memory on 80 GB GPUs", each
term a part of :func:`estimate`, read from trl 1.16 and transformers 5.17 as installed and checked against measured
CPU peaks by bench/bench_memory_7b_layout.py; the peak phase must stay under the GPU's memory less ``RESERVED_GIB``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perception_judge.train.recipe import zero_stage

GIB = 2**30
RESERVED_GIB = 4.0
SLEEP_RESIDUAL_GIB = 1.0
TOKEN_CHUNK, VOCAB_CHUNK = 4096, 32768  # trl 1.16's fused LM head tile: positions x vocabulary rows
PHASES = ("training", "evaluation", "weight_sync", "generation")
FIXES = {"training": "lower per_device_train_batch_size", "evaluation": "lower per_device_eval_batch_size"}


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
MODEL_SHAPES = {"jongwooko/Flex-VL-7B": "qwen2_5_vl_7b", "Qwen/Qwen2.5-VL-7B-Instruct": "qwen2_5_vl_7b",
                "Qwen/Qwen2.5-VL-32B-Instruct": "qwen2_5_vl_32b", "Qwen/Qwen3-VL-4B-Thinking": "qwen3_vl_4b",
                "Qwen/Qwen3-VL-8B-Thinking": "qwen3_vl_8b"}  # fmt: skip


def shape_of(config: Any) -> Shape:
    """The :class:`Shape` of a transformers Qwen2.5-VL / Qwen3-VL config."""
    t, v = config.get_text_config(), config.vision_config
    qwen3 = "qwen3" in config.model_type
    return Shape(
        t.hidden_size, t.num_hidden_layers, t.intermediate_size, t.num_attention_heads, t.num_key_value_heads,
        getattr(t, "head_dim", None) or t.hidden_size // t.num_attention_heads, t.vocab_size,
        bool(getattr(config, "tie_word_embeddings", False) or getattr(t, "tie_word_embeddings", False)),
        v.hidden_size, getattr(v, "depth", None) or v.num_hidden_layers, v.intermediate_size, 2 if qwen3 else 3,
        v.patch_size, len(getattr(v, "deepstack_visual_indexes", None) or ()),
        getattr(v, "num_position_embeddings", 0) or 0,
    )  # fmt: skip


def layer_bytes(shape: Shape, tokens: int, sdpa: bool = True, trains: bool = True) -> int:
    """One decoder layer recomputed and back-propagated (gradient checkpointing), bf16 per token: both RMSNorms'
    fp32 input, normalised input and output (16H), q after RoPE and the attention output (4q), k and v as the kernel
    gets them (4kv; sdpa with a padding mask repeats them to q's width) and the gated MLP at its backward peak: gate,
    SiLU(gate), up and three gradients of that size (12I); with trained weights, the gradient of the largest one."""
    q, kv = shape.heads * shape.head_dim, (shape.heads if sdpa else shape.kv_heads) * shape.head_dim
    weight = 2 * max(a * b for a, b in shape.layer_linears()) if trains else 0
    return tokens * (16 * shape.hidden + 4 * q + 4 * kv + 12 * shape.intermediate) + weight


def head_bytes(shape: Shape, positions: int, trains: bool, triton: bool = True) -> int:
    """trl 1.16's fused LM head in its backward over N ``positions`` (Triton devices: the completion tokens, others:
    all): saved hidden states, their fp32 gradient and its bf16 copy (8NH), the bf16 tile (min(N, 4,096) x 32,768)
    and, when the head trains, its fp32 V x H gradient, whose bf16 copy at the end (6VH) outlives the tile's fold;
    without Triton torch folds: 35 B per tile element, or fp32 copies of the tile and a 32,768 x H weight chunk."""
    rows, grad = min(positions, TOKEN_CHUNK) * VOCAB_CHUNK, shape.vocab * shape.hidden * trains
    fold = 2 * rows if triton else max(35 * rows, 6 * rows + 4 * VOCAB_CHUNK * shape.hidden)
    return max(fold + 4 * grad, 2 * rows + 6 * grad) + 8 * positions * shape.hidden


def estimate(recipe: Any, shape: Shape, world: int = 8, gpu_gib: float = 80.0, stage: int | None = None,
             triton: bool = True, prompt: int | None = None) -> dict[str, float]:  # fmt: skip
    """Per-GPU GiB of every term and phase of a parsed recipe (:class:`~perception_judge.train.recipe.Recipe`) on
    ``world`` GPUs of ``gpu_gib`` under ZeRO ``stage`` (default the run's, ``recipe.zero_stage``). P parameters, T
    trained (LoRA's, or all); b / b_e training / validation sequences per GPU of L prompt + completion tokens, C of
    them completion (the prompt: ``prompt`` tokens, default max_prompt_tokens):

    * training_state 16 B x T (bf16 weights and gradients, fp32 masters, two Adam moments; without DeepSpeed fp32
      weights and gradients), ZeRO-1 / 2 / 3 shard 12 / 14 / 16 B of it; + LoRA's base 2 B x P; reference_model
      (beta > 0, full fine-tuning) 2 B x P; ZeRO-3 shards both, ZeRO-2 neither; zero_buffers: ZeRO-3 2 B x (1.05e9
      live and prefetched parameters + the LM head trl gathers), ZeRO-1 / 2 2 x 5e8-element buckets, DDP on several
      processes its gradient buckets (4 B x T);
    * checkpoints (layers x bL x 2H), attention_mask (sdpa: bL x L bool), recomputed_layer (:func:`layer_bytes`),
      lm_head (:func:`head_bytes`, N = bC), autocast_copies (without DeepSpeed autocast keeps a bf16 copy of every
      fp32 weight until the forward ends, 2 B x T); activations: the first two and the largest of the other three;
    * eval_forward: b_e sequences without gradients, b_eL x (8H + 6I) (the MLP's peak beside the embeddings, the
      layer input, the residual and the MLP input) and their sdpa mask;
    * sync_gather (vLLM weight sync) under ZeRO-3, 2 B x what is gathered at once: LoRA merged layer by layer one
      decoder layer or the V x H embedding, full fine-tuning one parameter (V x H); LoRA adds a merged copy of the
      largest linear layer. sync_trl_all_at_once, for comparison: trl 1.16's PEFT sync gathers all P;
    * vllm_engine (colocate): vllm_gpu_memory_utilization x gpu_gib awake, ``SLEEP_RESIDUAL_GIB`` asleep (sleep
      mode); vllm_weights (2 B x P over tensor parallelism) are awake for the sync.
    """
    t, m, j = recipe.training, recipe.model, recipe.judge
    stage = (zero_stage(t) or 0) if stage is None else stage
    total, h, v, peft = shape.params(), shape.hidden, shape.vocab, m.use_peft
    trained = shape.lora_params(m.lora_r) if peft else total
    whole, sharded = (world, 16) if stage == 3 else (1, (0, 12, 14)[stage])  # ZeRO-3 shards the base too
    b, be, completion = t.per_device_train_batch_size, t.per_device_eval_batch_size, t.max_completion_length
    prompt = j.max_prompt_tokens if prompt is None else prompt
    length, sdpa = (prompt or 0) + completion, m.attn_implementation in (None, "sdpa")
    linears = [a * c for a, c in shape.layer_linears()]
    gathered = (max(sum(linears), v * h) if peft else v * h) * (stage == 3)
    parts = {
        "training_state": (16 - sharded + sharded / world) * trained + 2 * total / whole * peft,
        "reference_model": 2 * total / whole * (t.beta > 0 and not peft),
        "zero_buffers": {3: 2 * min(total, 1.05e9 + v * h), 0: 4 * trained * (world > 1)}.get(stage, 2e9),
        "checkpoints": shape.layers * b * length * h * 2,
        "attention_mask": b * length * length * sdpa,
        "recomputed_layer": layer_bytes(shape, b * length, sdpa, not peft),
        "lm_head": head_bytes(shape, b * completion, not peft, triton),
        "autocast_copies": 2 * trained * (stage == 0),
        "eval_forward": be * length * (8 * h + 6 * shape.intermediate + length * sdpa),
        "sync_gather": 2 * gathered + 2 * max(linears) * peft,
        "sync_trl_all_at_once": 2 * (total if peft else v * h) * (stage == 3),
    }
    g = {name: value / GIB for name, value in parts.items()}
    colocate, tp = t.use_vllm and t.vllm_mode == "colocate", t.vllm_tensor_parallel_size or 1
    g["vllm_engine"] = engine = t.vllm_gpu_memory_utilization * gpu_gib * colocate
    g["vllm_weights"] = 2 * total / tp / GIB * colocate
    idle = SLEEP_RESIDUAL_GIB if engine and t.vllm_enable_sleep_mode else engine
    work = max(g["recomputed_layer"], g["lm_head"], g["autocast_copies"])  # backward, or the forward's end
    g["activations"] = g["checkpoints"] + g["attention_mask"] + work
    base = g["training_state"] + g["reference_model"] + g["zero_buffers"]
    eval_on = str(getattr(t.eval_strategy, "value", t.eval_strategy)) != "no"
    g["training"] = base + g["activations"] + idle
    g["evaluation"] = (base + g["eval_forward"] + idle) * eval_on
    g["weight_sync"] = base + g["sync_gather"] * t.use_vllm + (g["vllm_weights"] if idle < engine else engine)
    g["generation"], g["budget"] = base + engine, gpu_gib - RESERVED_GIB
    g["peak"] = max(g[p] for p in PHASES)
    per_token = 4 * shape.layers * shape.kv_heads * shape.head_dim / tp
    g["vllm_kv_cache_tokens"] = max(0, int((engine - g["vllm_weights"] - 2) * GIB / per_token)) * colocate
    return g


def verdict(parts: dict[str, float], recipe: Any, stage: int) -> str | None:
    """None when the peak phase fits and the engine's KV cache holds a sequence; else one line naming the fix."""
    t, kv = recipe.training, parts["vllm_kv_cache_tokens"]
    if parts["vllm_engine"] and kv < (t.vllm_max_model_length or 1):
        return (f"vLLM's KV cache holds {kv:,} tokens, under vllm_max_model_length {t.vllm_max_model_length}"
                ": raise vllm_gpu_memory_utilization or vllm_tensor_parallel_size")  # fmt: skip
    if parts["peak"] <= parts["budget"]:
        return None
    phase = max(PHASES, key=parts.get)
    fixes = [FIXES.get(phase, "lower vllm_gpu_memory_utilization")]
    if parts["vllm_engine"] and not t.vllm_enable_sleep_mode and phase != "generation":
        fixes.append("vllm_enable_sleep_mode: true")
    if parts["training_state"] + parts["reference_model"] > parts["budget"]:
        fixes = []  # only sharding or LoRA can help
    fixes.append("ZeRO-3 offload" if stage == 3 else "DeepSpeed ZeRO-3 or its offload")
    fixes += [] if recipe.model.use_peft else ["LoRA (use_peft: true)"]
    return f"{phase} needs {parts[phase]:.1f} GiB per GPU of {parts['budget']:.1f} (ZeRO-{stage}): {', '.join(fixes)}"


def preflight(recipe: Any, config: Any, world: int, longest_prompt: int = 0) -> str | None:
    """Why a run cannot fit its GPUs (:func:`estimate` for its model config, process count, ZeRO stage, CUDA device
    0's memory and its prompts: max_prompt_tokens, else the training set's longest); None when it fits, without CUDA,
    or with ``skip_memory_check``."""
    import torch

    if recipe.judge.skip_memory_check or not torch.cuda.is_available():
        return None
    stage, gpu = zero_stage(recipe.training) or 0, torch.cuda.get_device_properties(0).total_memory / GIB
    prompt = recipe.judge.max_prompt_tokens or longest_prompt
    return verdict(estimate(recipe, shape_of(config), world, gpu, stage, prompt=prompt), recipe, stage)
