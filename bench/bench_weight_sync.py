"""What the LoRA weight sync into vLLM gathers, trl 1.16's against the project's (``perception_judge.train.sync``).

Both iterations run with a recording stand-in for trl's ``gather_params`` (under ZeRO-3 each call is one
``GatheredParameters``): the tiny Qwen2.5-VL judge, and Qwen2.5-VL-32B built on the meta device from its published
shapes (no weights, no memory) with flex32b's LoRA (r 32 on every language-model linear layer). Every parameter in
bf16, as DeepSpeed holds them with ``bf16: true``. Per sync: the largest set gathered at once, the bytes gathered in
all, the bytes handed to vLLM, and the largest LoRA module's working set (gathered, plus the merged copy and
peft's delta, each the size of its base weight). Under a minute on CPU::

    python bench/bench_weight_sync.py
"""

from __future__ import annotations

import tempfile
from contextlib import contextmanager
from types import SimpleNamespace

import torch
from benchlib import emit

MIB = 2**20


def judge_32b():
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    from perception_judge.train.memory import PUBLISHED

    s = PUBLISHED["qwen2_5_vl_32b"]
    text = dict(hidden_size=s.hidden, num_hidden_layers=s.layers, intermediate_size=s.intermediate,
                num_attention_heads=s.heads, num_key_value_heads=s.kv_heads, vocab_size=s.vocab)  # fmt: skip
    vision = dict(hidden_size=s.vision_hidden, depth=s.vision_depth, intermediate_size=s.vision_intermediate,
                  out_hidden_size=s.hidden, patch_size=s.patch)  # fmt: skip
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=s.tied)
    with torch.device("meta"):
        return Qwen2_5_VLForConditionalGeneration(config)


def tiny_judge():
    from transformers import AutoModelForImageTextToText

    from perception_judge.tiny.models import make_tiny_model

    with tempfile.TemporaryDirectory() as folder:
        return AutoModelForImageTextToText.from_pretrained(make_tiny_model("qwen2_5_vl", folder))


def measure(model, rank: int) -> dict[str, float]:
    from peft import LoraConfig, get_peft_model
    from trl.generation.vllm_generation import VLLMGeneration

    from perception_judge.train.sync import layerwise_named_params

    lora = LoraConfig(r=rank, lora_alpha=rank, target_modules="all-linear", exclude_modules=r".*visual.*")
    model = get_peft_model(model, lora).to(torch.bfloat16)
    adapters = {id(p) for n, p in model.named_parameters() if "lora_" in n}
    out = {}
    for who, iterate in (("trl", VLLMGeneration._iter_named_params), ("ours", layerwise_named_params)):
        sets = []

        @contextmanager
        def recorded(params, sets=sets):
            sets.append(params)
            yield

        gen = VLLMGeneration.__new__(VLLMGeneration)
        gen.model, gen._dist = model, SimpleNamespace(gather_params=recorded, is_fsdp=False)
        moved = sum(_bytes(t) for _, t in iterate(gen))
        sizes = [sum(_bytes(p) for p in params) for params in sets]
        out |= {
            f"{who}_largest_gather": max(sizes),
            f"{who}_gathered": sum(sizes),
            f"{who}_gathers": len(sets),
        }
        out[f"{who}_to_vllm"] = moved
    # a LoRA module's set starts with its base weight; the merge adds a copy of it and peft's delta
    lora_sets = [ps for ps in sets if any(id(p) in adapters for p in ps)]
    out["ours_lora_working_set"] = max(sum(_bytes(p) for p in ps) + 2 * _bytes(ps[0]) for ps in lora_sets)
    layer = [p for n, p in model.named_parameters() if ".language_model.layers.0." in n]
    return out | {"one_layer": sum(_bytes(p) for p in layer)}


def _bytes(t) -> int:
    return t.numel() * t.element_size()


def main() -> None:
    for name, model, rank in (("tiny", tiny_judge(), 4), ("qwen2_5_vl_32b", judge_32b(), 32)):
        for key, value in measure(model, rank).items():
            gathers = key.endswith("_gathers")
            emit(
                f"weight_sync/{name}/{key}", value if gathers else value / MIB, unit="" if gathers else "MiB"
            )


if __name__ == "__main__":
    main()
