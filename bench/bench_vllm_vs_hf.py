"""The ``vllm`` judge backend against the ``hf`` backend on the tiny offline Qwen2.5-VL judge, on the CPU.

Same 32 requests (one image each, the ``single`` protocol, greedy, up to 128 new tokens), both backends at batch 8,
in one process, each backend's best of a few rounds after a warm-up; throughput is requests per second of
``judge()`` end to end. Target: vllm >= 3x hf. vLLM lives in its own environment (``make install-vllm``): run
from another interpreter, the script re-runs itself with ``.venv-vllm/bin/python``, and without that environment it
reports the ratio as not measured. Usage::

    .venv-vllm/bin/python bench/bench_vllm_vs_hf.py [--requests 32] [--new-tokens 128] [--rounds 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import emit

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")

TARGET_RATIO = 3.0
VLLM_PYTHON = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"
NAME = "eval_vllm_over_hf_throughput"


def run_in_vllm_env(script: str, name: str, target: float) -> int | None:
    """None where vLLM imports here; else the exit code of ``script`` re-run in ``.venv-vllm/``, or 0 after
    reporting ``name`` as not measured where that environment does not exist."""
    if importlib.util.find_spec("vllm") is not None:
        return None
    if VLLM_PYTHON.is_file() and Path(sys.prefix).resolve() != VLLM_PYTHON.parents[1].resolve():
        return subprocess.call([str(VLLM_PYTHON), script, *sys.argv[1:]])
    print("vLLM is not installed here and .venv-vllm/ does not exist: run `make install-vllm` first")
    emit(name, None, target, "x", skipped="no vLLM environment")
    return 0


def best_rate(backend, requests, sampling, rounds: int) -> float:
    from perception_judge.evaluation.base import is_backend_error

    backend.judge(requests[:8], sampling)  # warm-up
    best = 0.0
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = backend.judge(requests, sampling)
        dt = time.perf_counter() - t0
        if any(is_backend_error(r) for r in out):
            raise RuntimeError(f"backend errors: {[r.error for r in out if is_backend_error(r)][:3]}")
        best = max(best, len(requests) / dt)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    if (code := run_in_vllm_env(__file__, NAME, TARGET_RATIO)) is not None:
        return code

    from PIL import Image

    from perception_judge.core.images import PixelPolicy
    from perception_judge.core.protocol import build_messages
    from perception_judge.core.schema import JudgeRequest, Sampling
    from perception_judge.evaluation.backends.hf import HFBackend
    from perception_judge.evaluation.backends.vllm import VLLMBackend
    from perception_judge.tiny.models import make_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        images = []
        for i in range(args.requests):
            path = Path(tmp) / f"img-{i}.png"
            Image.new("RGB", (64, 48), ((37 * i) % 256, 90, 160)).save(path)
            images.append(str(path))
        requests = [
            JudgeRequest(
                f"bench-{i}",
                build_messages(
                    "single", f"How many red circles are there? (item {i})", ["There are three."], 1
                ),
                [images[i]],
            )
            for i in range(args.requests)
        ]
        sampling = Sampling(temperature=0.0, max_new_tokens=args.new_tokens, seed=0)
        model_dir = make_tiny_model("qwen2_5_vl", Path(tmp) / "judge", seed=0)
        policy = PixelPolicy(size=56)
        hf = HFBackend(model_dir, batch_size=args.batch, dtype="float32", device="cpu", pixel_policy=policy,
                       progress=False)  # fmt: skip
        hf_rate = best_rate(hf, requests, sampling, args.rounds)
        hf.close()
        vllm = VLLMBackend(
            model_dir,
            batch_size=args.batch,
            dtype="float32",
            max_model_len=2048,
            pixel_policy=policy,
            engine_extra={"enable_chunked_prefill": False, "max_num_batched_tokens": 8192},
        )
        vllm_rate = best_rate(vllm, requests, sampling, args.rounds)
        vllm.close()
    ratio = vllm_rate / hf_rate
    print(f"{args.requests} requests, batch {args.batch}, greedy, up to {args.new_tokens} new tokens, best of "
          f"{args.rounds} rounds")  # fmt: skip
    print(f"  hf   : {hf_rate:7.2f} requests/s")
    print(f"  vllm : {vllm_rate:7.2f} requests/s")
    print(
        f"  ratio: {ratio:.2f}x ({'meets' if ratio >= TARGET_RATIO else 'MISSES'} the {TARGET_RATIO:g}x target)"
    )
    emit("eval_hf_throughput_greedy_batch8", hf_rate, unit="requests/s")
    emit("eval_vllm_throughput_greedy_batch8", vllm_rate, unit="requests/s")
    emit(NAME, ratio, TARGET_RATIO, "x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
