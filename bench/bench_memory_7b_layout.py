"""The memory arithmetic (``perception_judge.train.memory.estimate``) against measured CPU peaks: one training
micro-step and one validation forward through the project's trainer on the Qwen2.5-VL-7B layout cut to 2 text
layers and 2 vision blocks (hidden 3,584, intermediate 18,944, heads 28 / 4, vocabulary 152,064 untied; random bf16
weights built here, nothing downloaded), Qwen's real tokenizer.

How it measures: ``train.run.build_run`` builds ``JudgeGRPOTrainer`` from ``recipes/tiny.yaml`` pointed at that model
(bf16, gradient checkpointing, SGD); the bench turns gradient checkpointing on as ``Trainer.train`` does and calls the
trainer's ``compute_loss`` and ``backward`` on one micro-batch of b sequences of L tokens (C of them completion, the
first one padded by one token so sdpa gets the padding mask the arithmetic assumes), or ``compute_loss`` without
gradients in eval mode for the validation forward. torch's CPU allocator is recorded by ``torch.profiler``
(``profile_memory=True``): the measured peak is the largest sum of live tensor bytes above what was live when the
step began (weights, and gradients allocated beforehand as in every micro-step after an accumulation's first), so
weights and optimizer state are not in it; the embeddings and the vision tower are frozen to keep the process under
10 GiB. trl scores only the completion positions on Triton devices (every position elsewhere); the bench makes the
CPU select positions the same way, its fold of each tile stays trl's torch code, which the arithmetic models with
``triton=False``. Cases: full fine-tuning (the LM head trains: its fp32 gradient dominates), the head frozen (as
under LoRA: the recomputed layer dominates) and the validation forward. Target: every ratio within 25%.

    python bench/bench_memory_7b_layout.py [--quick] [--work-dir DIR]     # about 5 minutes on 2 cores (--quick: 3)
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from benchlib import emit  # noqa: E402

TOLERANCE = 0.25
# (name, sequences, tokens, completion tokens, mode): "full" trains the head, "frozen" freezes it, "eval" no grads
CASES = [
    ("full", 1, 512, 128, "full"),
    ("full", 1, 1024, 256, "full"),
    ("frozen_head", 1, 2048, 64, "frozen"),
    ("frozen_head", 1, 3072, 64, "frozen"),
    ("eval", 2, 1024, 256, "eval"),
    ("eval", 2, 2048, 512, "eval"),
]
QUICK = [CASES[1], CASES[2], CASES[4]]


def build_trainer(work: Path):
    """The cut 7B-layout judge and a four-row training set in ``work``, and the project's trainer on them."""
    import torch
    from bench_vllm_vs_hf_7b_layout import build_judge

    from perception_judge.core import protocol
    from perception_judge.core.trainset import rows_to_dataset, split_path
    from perception_judge.tiny.toyset import toy_rows
    from perception_judge.train.recipe import parse_recipe
    from perception_judge.train.run import build_run

    model = work / "model"
    if not (model / "config.json").is_file():
        build_judge(model)
    rows = toy_rows(4, protocols=("pair",), image_size=56)
    for row in rows:
        row["prompt"] = protocol.build_messages("pair", row["question"], row["responses"], style="tiny")
    (work / "data").mkdir(parents=True, exist_ok=True)
    rows_to_dataset(rows).to_parquet(str(split_path(work / "data", "train")))
    recipe = parse_recipe(
        [str(ROOT / "recipes" / "tiny.yaml"), "--model_name_or_path", str(model), "--dataset_name", str(work / "data"),
         "--output_dir", str(work / "out"), "--dtype", "bfloat16", "--gradient_checkpointing", "true", "--beta", "0",
         "--optim", "sgd", "--freeze_vision_tower", "true", "--eval_strategy", "no", "--save_strategy", "no",
         "--pixel_policy", "size=56", "--per_device_train_batch_size", "2", "--num_generations", "2"]
    )  # fmt: skip
    trainer = build_run(recipe, write_files=False).trainer
    trainer.model.to(
        torch.bfloat16
    )  # without DeepSpeed full fine-tuning loads fp32 masters; DeepSpeed casts to bf16
    return recipe, trainer


def peak_bytes(step) -> int:
    """The largest sum of live tensor bytes (torch's CPU allocator, above what was live at the start) during
    ``step()``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted(
        (e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
    )
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def measure(trainer, b: int, length: int, completion: int, mode: str) -> int:
    import torch

    model = trainer.model
    model.get_output_embeddings().weight.requires_grad_(mode == "full")
    for p in model.parameters():  # an accumulation's later micro-steps: the gradients exist already
        p.grad = torch.zeros_like(p) if p.requires_grad and mode != "eval" else None
    ids = torch.randint(0, 150000, (b, length), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(b, length, dtype=torch.long)
    mask[0, 0] = 0  # one padding token: sdpa gets the 4D mask
    cut = length - completion
    inputs = {"prompt_ids": ids[:, :cut], "prompt_mask": mask[:, :cut], "completion_ids": ids[:, cut:],
              "completion_mask": mask[:, cut:], "advantages": torch.ones(b), "old_per_token_logps": None,
              "ref_per_token_logps": None, "num_items_in_batch": torch.tensor(b * completion)}  # fmt: skip

    def step() -> None:
        if mode == "eval":
            with torch.no_grad():
                trainer.compute_loss(model, inputs)
        else:
            trainer.accelerator.backward(trainer.compute_loss(model, inputs))

    model.train(mode != "eval")
    return peak_bytes(step)


def predicted(recipe, shape, b: int, length: int, completion: int, mode: str) -> float:
    """``estimate``'s activations (full), its layer phase (frozen head) or eval_forward (eval) for a case, in GiB."""
    from perception_judge.train.memory import estimate

    r = copy.deepcopy(recipe)
    r.training.per_device_train_batch_size = r.training.per_device_eval_batch_size = b
    r.training.max_completion_length, r.judge.max_prompt_tokens = completion, length - completion
    # bf16 weights without autocast, as under DeepSpeed (stage 3 on one process shards nothing); trl's torch fold
    parts = estimate(r, shape, world=1, stage=3, triton=False)
    if mode == "frozen":  # the layer phase: it dominates when the head does not train
        return parts["checkpoints"] + parts["attention_mask"] + parts["recomputed_layer"]
    return parts["eval_forward" if mode == "eval" else "activations"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one case of each kind")
    ap.add_argument("--work-dir", help="keep the built model here (default: a temporary folder)")
    args = ap.parse_args()
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    import trl.trainer.utils

    from perception_judge.train.memory import GIB, shape_of

    # trl scores only the completion positions on Triton devices (every position elsewhere): the bench makes the CPU
    # select positions the same way; the fold of each tile stays trl's torch code
    trl.trainer.utils._use_triton = lambda device: True
    with tempfile.TemporaryDirectory() as tmp:
        recipe, trainer = build_trainer(Path(args.work_dir or tmp))
        trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train
        trainer.model.gradient_checkpointing_enable(recipe.training.gradient_checkpointing_kwargs)
        trainer.model.get_input_embeddings().weight.requires_grad_(False)
        shape = shape_of(trainer.model.config)
        print(
            f"{'case':12s} {'b':>2s} {'L':>5s} {'C':>5s} {'predicted':>12s} {'measured':>10s} {'ratio':>6s}"
        )
        worst = 0.0
        for name, b, length, completion, mode in QUICK if args.quick else CASES:
            measured = measure(trainer, b, length, completion, mode) / GIB
            expected = predicted(recipe, shape, b, length, completion, mode)
            worst = max(worst, abs(expected / measured - 1))
            print(f"{name:12s} {b:2d} {length:5d} {completion:5d} {expected:8.3f} GiB {measured:6.3f} GiB "
                  f"{expected / measured:6.2f}", flush=True)  # fmt: skip
            emit(f"memory_7b_layout_{name}_L{length}_predicted_over_measured", expected / measured, unit="x")
    emit("memory_7b_layout_worst_deviation", worst, TOLERANCE, "fraction", higher_is_better=False)
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
