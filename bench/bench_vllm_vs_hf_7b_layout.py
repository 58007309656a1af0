"""The ``vllm`` judge backend against the ``hf`` backend where compute dominates: the Qwen2.5-VL-7B layout cut to
2 text layers and 2 vision blocks (hidden 3,584, intermediate 18,944, vocabulary 152,064 untied: 1.6 B parameters,
random weights, bfloat16), Qwen's real tokenizer and Instruct template, on the CPU.

Same requests (the tiny judge prompt, one 56-pixel image each, greedy, ``--new-tokens`` new tokens) through both
backends at batch 8 and at batch 32, in one process, each backend's best of ``--rounds`` after a warm-up;
throughput is requests per second of ``judge()`` end to end. Target: vllm >= 2x hf at batch 32. A decode step here
costs about 2 GFLOP per sequence (the 3,584 x 152,064 LM head alone is 1.1 GFLOP), so batching and the engine's
kernels, not Python overhead, decide the ratio (the tiny judge of ``bench_vllm_vs_hf.py`` measures the opposite
regime). Runs in ``.venv-vllm`` (re-executes itself there; reports "not measured" without it). Usage::

    .venv-vllm/bin/python bench/bench_vllm_vs_hf_7b_layout.py [--requests 32] [--new-tokens 32] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from bench_vllm_vs_hf import best_rate, run_in_vllm_env
from benchlib import emit

TARGET_RATIO = 2.0
NAME = "eval_vllm_over_hf_throughput_7b_layout_batch32"


def build_judge(folder: Path) -> Path:
    """The cut 7B-layout judge (random weights, bf16) with the real processor, saved to ``folder``."""
    import torch
    from gpu_check_grpo_7b import QWEN25_VL_7B, build_model, build_processor

    spec = json.loads(json.dumps(QWEN25_VL_7B))
    spec["text_config"].update(num_hidden_layers=2, max_window_layers=2, max_position_embeddings=4096)
    spec["vision_config"].update(depth=2, fullatt_block_indexes=[1])
    torch.manual_seed(0)
    model = build_model(spec, torch.bfloat16, "cpu")
    model.save_pretrained(folder)
    build_processor().save_pretrained(folder)
    del model
    return folder


def requests(n: int, folder: Path) -> list:
    from PIL import Image

    from perception_judge.core.protocol import build_messages
    from perception_judge.core.schema import JudgeRequest

    out = []
    for i in range(n):
        path = folder / f"img-{i}.png"
        Image.new("RGB", (56, 56), ((37 * i) % 256, 90, 160)).save(path)
        messages = build_messages("pair", "colour ?", [f"red {i}", f"blue {i}"], 1, style="tiny")
        out.append(JudgeRequest(f"bench-{i}", messages, [str(path)], n_scores=2))
    return out


def measure(model_dir: Path, reqs: list, args: argparse.Namespace) -> dict[str, float]:
    from perception_judge.core.images import PixelPolicy
    from perception_judge.core.schema import Sampling
    from perception_judge.evaluation.backends.hf import HFBackend
    from perception_judge.evaluation.backends.vllm import VLLMBackend

    sampling = Sampling(temperature=0.0, max_new_tokens=args.new_tokens, seed=0)
    policy, rates = PixelPolicy(size=56), {}
    hf = HFBackend(
        model_dir, batch_size=8, dtype="bfloat16", device="cpu", pixel_policy=policy, progress=False
    )
    for batch in (8, 32):  # one model, two batch sizes
        hf.batch_size = batch
        rates[f"hf_{batch}"] = best_rate(hf, reqs, sampling, args.rounds)
    hf.close()
    engine = {"enable_chunked_prefill": False, "max_num_batched_tokens": 8192, "max_num_seqs": 32}
    vllm = VLLMBackend(model_dir, batch_size=8, dtype="bfloat16", max_model_len=1024, pixel_policy=policy,
                       engine_extra=engine)  # fmt: skip
    for batch in (8, 32):  # one engine: the backend hands it batch_size requests at a time
        vllm.batch_size = batch
        rates[f"vllm_{batch}"] = best_rate(vllm, reqs, sampling, args.rounds)
    vllm.close()
    return rates


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    if (code := run_in_vllm_env(__file__, NAME, TARGET_RATIO)) is not None:
        return code
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_judge(Path(tmp) / "judge")
        rates = measure(model_dir, requests(args.requests, Path(tmp)), args)
    print(f"Qwen2.5-VL-7B layout, 2 text layers, bf16; {args.requests} requests, greedy, {args.new_tokens} new "
          f"tokens; {time.perf_counter() - t0:.0f} s in all")  # fmt: skip
    for batch in (8, 32):
        hf, vllm = rates[f"hf_{batch}"], rates[f"vllm_{batch}"]
        print(f"  batch {batch:2d}: hf {hf:6.2f} req/s, vllm {vllm:6.2f} req/s, ratio {vllm / hf:.2f}x")
        emit(f"eval_hf_throughput_7b_layout_batch{batch}", hf, unit="requests/s")
        emit(f"eval_vllm_throughput_7b_layout_batch{batch}", vllm, unit="requests/s")
    emit("eval_vllm_over_hf_throughput_7b_layout_batch8", rates["vllm_8"] / rates["hf_8"], unit="x")
    emit(NAME, rates["vllm_32"] / rates["hf_32"], TARGET_RATIO, "x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
