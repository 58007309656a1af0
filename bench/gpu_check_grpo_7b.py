"""GPU check: GRPO steps on a random-weight model with the real Qwen2.5-VL-7B architecture (no weights needed).

Reports tokens/s per GPU (prompt + completion tokens processed per optimizer step, summed over processes, divided
by the step's wall time and the number of GPUs) and peak GPU memory, next to the published anchor of about
1,600-2,000 tokens/s per GPU (EasyR1, Qwen2.5-VL-7B GRPO on H100 with vLLM rollouts).

The model is built from the Qwen2.5-VL-7B-Instruct architecture written inline below (8.3 B parameters, random
bf16 weights made on the GPU) with a synthetic word-level tokenizer that has the real vocabulary size and the real
special-token ids, the Qwen2.5-VL image processor (patch 14, merge 2) and the project's own trainer
(:class:`perception_judge.train.trainer.JudgeGRPOTrainer`, with its step-time breakdown), judge prompts with one
448x448 image (256 image tokens) and the judge rewards. Random weights almost never emit EOS, so every completion
runs to ``--completion-length``: the work per step is fixed.

    python bench/gpu_check_grpo_7b.py                    # one GPU: 1 warm-up + 3 measured steps, HF generation
    python bench/gpu_check_grpo_7b.py --use-vllm         # vLLM colocate rollouts (vllm installed)
    python bench/gpu_check_grpo_7b.py --use-vllm --vllm-mode server   # 2+ GPUs: `trl vllm-serve` on the last one
    accelerate launch --config_file configs/accelerate/deepspeed_zero3.yaml bench/gpu_check_grpo_7b.py
    python bench/gpu_check_grpo_7b.py --tiny             # CPU dry run of the same code path (tests use it)

Rollouts through HF ``generate`` are memory-bound and much slower than vLLM: compare like with like (the anchor
uses vLLM). ``--beta`` > 0 adds the reference model (saved to ``--work-dir`` and reloaded, as trl builds it from a
path). On a machine without trl/datasets, carry their wheels (see the device notes) and put the repo on
``PYTHONPATH``. Prints one ``BENCH_RESULT {json}`` line per metric.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ANCHOR_TOKENS_PER_S_PER_GPU = 1600.0  # EasyR1 Qwen2.5-VL-7B GRPO, H100: about 1,600-2,000

# Qwen2.5-VL-7B-Instruct (config.json of the public checkpoint, in transformers 5 form).
QWEN25_VL_7B: dict[str, Any] = {
    "text_config": {
        "vocab_size": 152064,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "hidden_act": "silu",
        "max_position_embeddings": 128000,
        "rms_norm_eps": 1e-6,
        "use_sliding_window": False,
        "sliding_window": 32768,
        "max_window_layers": 28,
        "attention_dropout": 0.0,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]},
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "pad_token_id": 151643,
    },
    "vision_config": {
        "depth": 32,
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "in_channels": 3,
        "out_hidden_size": 3584,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "hidden_act": "silu",
        "tokens_per_second": 2,
    },
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "tie_word_embeddings": False,
}
SPECIAL_IDS_7B = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<|vision_start|>": 151652,
    "<|vision_end|>": 151653,
    "<|vision_pad|>": 151654,
    "<|image_pad|>": 151655,
    "<|video_pad|>": 151656,
    "<think>": 151667,
    "</think>": 151668,
    "<answer>": 151669,
    "</answer>": 151670,
}

# The same structure at toy size: --tiny runs the identical code path on a CPU in seconds.
TINY: dict[str, Any] = {
    "text_config": {
        **QWEN25_VL_7B["text_config"],
        "vocab_size": 640,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 4096,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [4, 6, 6]},
        "bos_token_id": 600,
        "eos_token_id": 602,
        "pad_token_id": 600,
    },
    "vision_config": {
        **QWEN25_VL_7B["vision_config"],
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "out_hidden_size": 64,
        "fullatt_block_indexes": [1],
    },
    "image_token_id": 606,
    "video_token_id": 607,
    "vision_start_token_id": 603,
    "vision_end_token_id": 604,
    "tie_word_embeddings": False,
}
SPECIAL_IDS_TINY = {
    "<|endoftext|>": 600,
    "<|im_start|>": 601,
    "<|im_end|>": 602,
    "<|vision_start|>": 603,
    "<|vision_end|>": 604,
    "<|vision_pad|>": 605,
    "<|image_pad|>": 606,
    "<|video_pad|>": 607,
    "<think>": 608,
    "</think>": 609,
    "<answer>": 610,
    "</answer>": 611,
}


def build_tokenizer(vocab_size: int, special_ids: dict[str, int]) -> Any:
    """A word-level tokenizer with ``vocab_size`` entries and the special tokens at the given ids."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    by_id = {i: t for t, i in special_ids.items()}
    vocab = {by_id.get(i, f"w{i}"): i for i in range(vocab_size)}
    vocab["<unk>"] = vocab.pop("w0")
    for digit in range(10):  # scores and digits stay readable
        vocab[str(digit)] = vocab.pop(f"w{digit + 1}")
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    specials = [t for t in special_ids if t.startswith("<|")]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    tok.add_tokens([AddedToken(t, normalized=False) for t in special_ids if not t.startswith("<|")])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        padding_side="left",
        model_max_length=131072,
    )
    fast.add_special_tokens({"additional_special_tokens": specials})
    return fast


def build_processor(tokenizer: Any) -> Any:
    from transformers import Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor

    from perception_judge.tiny_models import QWEN2_5_VL_TEMPLATE

    kw = dict(
        patch_size=14, merge_size=2, temporal_patch_size=2, min_pixels=56 * 56, max_pixels=28 * 28 * 1280
    )
    tokenizer.chat_template = QWEN2_5_VL_TEMPLATE
    return Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(**kw),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(**kw),
        chat_template=QWEN2_5_VL_TEMPLATE,
    )


def build_model(spec: dict[str, Any], dtype: Any, device: Any) -> Any:
    import torch
    from transformers import GenerationConfig, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    config = Qwen2_5_VLConfig(**json.loads(json.dumps(spec)))
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration._from_config(config, dtype=dtype)
    text = spec["text_config"]
    model.generation_config = GenerationConfig(
        eos_token_id=[text["eos_token_id"], text["bos_token_id"]], pad_token_id=text["pad_token_id"]
    )
    return model


class StepClock:
    """Wall time and tokens seen at the end of every optimizer step."""

    def __init__(self) -> None:
        from transformers import TrainerCallback

        clock = self

        class _CB(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                clock.marks.append((time.perf_counter(), state.num_input_tokens_seen, state.global_step))

            def on_train_begin(self, args, state, control, **kwargs):
                clock.marks.append((time.perf_counter(), state.num_input_tokens_seen, 0))

        self.marks: list[tuple[float, int, int]] = []
        self.callback = _CB()


def result(name: str, value: float, target: float | None, unit: str) -> None:
    print(
        "BENCH_RESULT "
        + json.dumps({"name": name, "value": round(value, 4), "target": target, "unit": unit}),
        flush=True,
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--tiny", action="store_true", help="toy-size model on the CPU (dry run of the code path)"
    )
    ap.add_argument("--steps", type=int, default=3, help="measured optimizer steps")
    ap.add_argument("--warmup", type=int, default=1, help="steps before measuring")
    ap.add_argument("--num-generations", type=int, default=5)
    ap.add_argument("--per-device-batch", type=int, default=10, help="completions per device per step")
    ap.add_argument("--completion-length", type=int, default=1024)
    ap.add_argument("--image-size", type=int, default=448)
    ap.add_argument("--beta", type=float, default=0.0, help="KL coefficient (>0 loads a reference model)")
    ap.add_argument(
        "--use-vllm", action="store_true", help="vLLM rollouts (colocate unless --vllm-mode server)"
    )
    ap.add_argument(
        "--vllm-mode",
        choices=("colocate", "server"),
        default="colocate",
        help="server: start `trl vllm-serve` on --server-gpu (default: the last visible GPU) and train on GPU 0; "
        "needs 2 GPUs (NCCL cannot put the trainer and the server on one device)",
    )
    ap.add_argument("--server-gpu", type=int, default=None, help="GPU index of the vLLM server (server mode)")
    ap.add_argument("--server-port", type=int, default=8765, help="port of the vLLM server (server mode)")
    ap.add_argument("--no-gradient-checkpointing", action="store_true")
    ap.add_argument("--work-dir", default=None, help="scratch folder (default: a temporary one)")
    args = ap.parse_args(argv)
    if args.tiny:
        args.num_generations = min(args.num_generations, 2)
        args.per_device_batch = min(args.per_device_batch, 4)
        args.completion_length = min(args.completion_length, 8)
        args.image_size = 56

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    cuda = torch.cuda.is_available() and not args.tiny
    if not cuda and not args.tiny:
        print(
            "gpu_check_grpo_7b: no CUDA device; skipped (run with --tiny for a CPU dry run of the code path)"
        )
        return {"skipped": True}
    spec, special = (TINY, SPECIAL_IDS_TINY) if args.tiny else (QWEN25_VL_7B, SPECIAL_IDS_7B)
    scratch = None if args.work_dir else tempfile.TemporaryDirectory(prefix="gpu_check_")
    work = Path(args.work_dir or scratch.name)
    work.mkdir(parents=True, exist_ok=True)
    try:
        return _check(args, work, cuda, spec, special)
    finally:
        if scratch is not None:
            scratch.cleanup()


def _start_server(args: argparse.Namespace, folder: Path) -> Any:
    """``trl vllm-serve`` on its own GPU for server-mode rollouts; trl's client waits for it to be healthy."""
    import subprocess

    import torch

    if torch.cuda.device_count() < 2:
        raise SystemExit(
            "gpu_check_grpo_7b: --vllm-mode server needs 2 GPUs (one for the trainer, one for vLLM)"
        )
    gpu = torch.cuda.device_count() - 1 if args.server_gpu is None else args.server_gpu
    log = open(folder.parent / "vllm_serve.log", "w")  # noqa: SIM115 - lives as long as the server
    cmd = [sys.executable, "-m", "trl.scripts.vllm_serve", "--model", str(folder), "--port", str(args.server_port),
           "--max_model_len", str(4096 + args.completion_length), "--gpu_memory_utilization", "0.85"]  # fmt: skip
    print(f"gpu_check_grpo_7b: starting the vLLM server on GPU {gpu} (log: {log.name})")
    return subprocess.Popen(cmd, env=dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu)), stdout=log, stderr=log)


def _check(
    args: argparse.Namespace, work: Path, cuda: bool, spec: dict[str, Any], special: dict[str, int]
) -> dict[str, Any]:
    import torch
    from trl import GRPOConfig

    from perception_judge.core.images import PixelPolicy
    from perception_judge.core.protocol import prepare_processor, template_opens_think
    from perception_judge.core.trainset import rows_to_dataset
    from perception_judge.train.rewards import build_rewards
    from perception_judge.train.toyset import toy_rows
    from perception_judge.train.trainer import JudgeGRPOTrainer

    grpo = GRPOConfig(
        output_dir=str(work / "out"),
        use_cpu=not cuda,
        bf16=cuda,
        per_device_train_batch_size=args.per_device_batch,
        num_generations=args.num_generations,
        max_completion_length=args.completion_length,
        temperature=1.0,
        top_p=0.95,
        top_k=20,
        beta=args.beta,
        loss_type="dapo",
        learning_rate=1e-7,
        lr_scheduler_type="constant",
        max_steps=args.warmup + args.steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        gradient_checkpointing=not args.no_gradient_checkpointing and not args.tiny,
        use_vllm=args.use_vllm,
        vllm_mode=args.vllm_mode,
        vllm_server_base_url=f"http://127.0.0.1:{args.server_port}" if args.vllm_mode == "server" else None,
        vllm_server_timeout=600.0,
        vllm_gpu_memory_utilization=0.3,
        vllm_max_model_length=4096 + args.completion_length,
        disable_tqdm=True,
    )
    state = grpo.distributed_state
    device = grpo.device
    dtype = torch.bfloat16 if cuda else torch.float32

    tokenizer = build_tokenizer(spec["text_config"]["vocab_size"], special)
    processor = prepare_processor(build_processor(tokenizer), "auto")
    t0 = time.perf_counter()
    model = build_model(spec, dtype, device)
    n_params = sum(p.numel() for p in model.parameters())
    if args.beta > 0 or args.use_vllm:  # trl (reference model, vLLM) loads the weights from a folder
        folder = work / "model"
        if state.is_main_process:
            model.save_pretrained(folder)
            processor.save_pretrained(folder)
        state.wait_for_everyone()
        model.config._name_or_path = str(folder)
        model.name_or_path = str(folder)
    build_s = time.perf_counter() - t0
    serve = args.use_vllm and args.vllm_mode == "server" and state.is_main_process
    server = _start_server(args, folder) if serve else None

    policy = PixelPolicy(mode="fixed", size=args.image_size, factor=28)
    n_rows = max(8, args.per_device_batch * state.num_processes * (args.warmup + args.steps))
    rows = toy_rows(n_rows, protocols=("batch",), image_size=args.image_size)
    for r in rows:
        r["images"] = [policy.apply(im) for im in r["images"]]
    dataset = rows_to_dataset(rows)
    think_open = template_opens_think(processor)
    clock = StepClock()
    trainer = JudgeGRPOTrainer(
        model=model,
        reward_funcs=build_rewards(["judge", "format"], think_open=think_open),
        args=grpo,
        train_dataset=dataset,
        processing_class=processor,
        callbacks=[clock.callback],
    )
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    try:
        trainer.train()
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)

    marks = clock.marks
    measured = [m for m in marks if m[2] >= args.warmup]
    (t_a, tok_a, _), (t_b, tok_b, _) = measured[0], measured[-1]
    seconds = max(t_b - t_a, 1e-9)
    world = state.num_processes
    tokens_per_s_per_gpu = (tok_b - tok_a) / seconds / world
    step_s = seconds / max(1, len(measured) - 1)
    peak_gib = torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0
    logs = [h for h in trainer.state.log_history if "step_time" in h][args.warmup :]
    rollout = [h.get("timing/rollout_s", 0.0) for h in logs]
    generate = [h.get("timing/generate_s", 0.0) for h in logs]
    out = {
        "model": "tiny" if args.tiny else "Qwen2.5-VL-7B (random weights)",
        "parameters": n_params,
        "processes": world,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "rollouts": f"vLLM {args.vllm_mode}" if args.use_vllm else "HF generate",
        "tokens_per_s_per_gpu": tokens_per_s_per_gpu,
        "step_s": step_s,
        "tokens_per_step": (tok_b - tok_a) / max(1, len(measured) - 1),
        "rollout_share": (sum(rollout) / len(rollout)) / step_s if rollout else None,
        "generate_s": sum(generate) / len(generate) if generate else None,
        "peak_memory_gib": peak_gib,
        "build_s": build_s,
    }
    if state.is_main_process:
        print(
            f"{out['model']}: {n_params / 1e9:.2f} B parameters, {world} process(es) on {out['device']}, "
            f"{out['rollouts']}; {args.per_device_batch} completions/device/step of {args.completion_length} tokens"
        )
        print(
            f"tokens/s per GPU: {tokens_per_s_per_gpu:,.0f} (anchor ~{ANCHOR_TOKENS_PER_S_PER_GPU:,.0f}-2,000, EasyR1 "
            f"H100 with vLLM); step {step_s:.2f} s, of which rollout {out['rollout_share'] or 0:.0%}; "
            f"peak GPU memory {peak_gib:.1f} GiB"
        )
        name = "tiny" if args.tiny else "qwen25vl7b"
        target = None if args.tiny else ANCHOR_TOKENS_PER_S_PER_GPU
        result(f"gpu_grpo_{name}_tokens_per_s_per_gpu", tokens_per_s_per_gpu, target, "tokens/s")
        result(f"gpu_grpo_{name}_peak_memory", peak_gib, None, "GiB")
        result(f"gpu_grpo_{name}_step_time", step_s, None, "s")
    return out


if __name__ == "__main__":
    main()
    sys.exit(0)
