"""The LoRA weight sync without a vLLM engine: trl's ``VLLMGeneration`` shell around a PEFT model, so that trl's
``_iter_named_params`` and the project's (``perception_judge.train.sync``) can be run and compared on CPU.

Run as a script it is one process of the ZeRO-3 test (tests/test_train_deepspeed.py)::

    accelerate launch --config_file configs/accelerate/deepspeed_zero3.yaml --num_processes 2 \\
        --mixed_precision no tests/support/weight_sync.py MODEL_DIR OUT_DIR

it shards a tiny judge with a trained LoRA by ZeRO-3, runs both syncs with every ``GatheredParameters`` recorded
(the names of all parameters materialised at that moment), and writes ``OUT_DIR/rank-K.json``.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import torch


def lora_judge(model_dir, dtype=torch.bfloat16, **lora):
    """The tiny judge in ``model_dir`` with a LoRA on every language-model linear layer whose lora_B is non-zero,
    as after training (``init_lora_weights=False``)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=dtype)
    lora = {"r": 4, "lora_alpha": 8, "target_modules": "all-linear", "exclude_modules": r".*visual.*", **lora}
    return get_peft_model(model, LoraConfig(init_lora_weights=False, **lora))


def engineless(model, accelerator=None):
    """trl's ``VLLMGeneration`` with the model and distributed backend its weight sync reads, and no engine."""
    from trl.distributed import DistributedBackend
    from trl.generation.vllm_generation import VLLMGeneration

    gen = VLLMGeneration.__new__(VLLMGeneration)
    gen.model = model
    gen._dist = DistributedBackend(
        accelerator or SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=None))
    )
    return gen


def both_syncs(gen, between=lambda: None):
    """(the project's pairs, trl's pairs), each tensor copied as it is yielded (as vLLM's ``load_weights`` does):
    the project's sync, then ``between()``, then trl's (whose in-place merge and unmerge round bf16 weights)."""
    from trl.generation.vllm_generation import VLLMGeneration

    from perception_judge.train.sync import use_layerwise_sync

    use_layerwise_sync(gen)
    ours = [(name, t.clone()) for name, t in gen._iter_named_params()]
    between()
    return ours, [(name, t.clone()) for name, t in VLLMGeneration._iter_named_params(gen)]


def _recording(model, gathers):
    """DeepSpeed's ``GatheredParameters``, recording the names of every parameter available while it is open."""
    import deepspeed
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    real = deepspeed.zero.GatheredParameters

    @contextmanager
    def gathered(params, *args, **kwargs):
        with real(params, *args, **kwargs):
            live = [n for n, p in model.named_parameters() if p.ds_status == ZeroParamStatus.AVAILABLE]
            gathers[-1].append(live)
            yield

    return gathered


def main(model_dir: str, out: str) -> None:
    import deepspeed
    from accelerate import Accelerator

    accelerator = Accelerator()
    model = lora_judge(model_dir, dtype=torch.float32)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    world = int(os.environ["WORLD_SIZE"])  # accelerate on CPU counts 1 process; DeepSpeed counts them all
    accelerator.state.deepspeed_plugin.deepspeed_config.update(
        train_micro_batch_size_per_gpu=1, train_batch_size=world
    )
    accelerator.prepare(model, optimizer)  # ZeRO-3 partitions the parameters in place
    shards = {n: p.ds_tensor.clone() for n, p in model.named_parameters()}
    gathers: list[list[list[str]]] = [[]]
    deepspeed.zero.GatheredParameters = _recording(model, gathers)
    unchanged = []

    def between():
        unchanged.append(all(torch.equal(shards[n], p.ds_tensor) for n, p in model.named_parameters()))
        gathers.append([])

    ours, theirs = both_syncs(engineless(model, accelerator), between)
    record = {
        "names": [n for n, _ in ours] == [n for n, _ in theirs],
        "equal": all(torch.equal(a, b) for (_, a), (_, b) in zip(ours, theirs, strict=True)),
        "unchanged": unchanged[0],
        "numel": {n: p.ds_numel for n, p in model.named_parameters()},
        "ours": gathers[0],
        "trl": gathers[1],
    }
    path = Path(out) / f"rank-{os.environ['RANK']}.json"
    path.write_text(json.dumps(record))


if __name__ == "__main__":
    main(*sys.argv[1:3])
