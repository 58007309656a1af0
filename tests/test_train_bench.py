"""The prepared GPU check runs its whole code path on the CPU (``--tiny``), so it works when a GPU is lent."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run_on_cpu(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import gpu_check_grpo_7b as check
    finally:
        sys.path.remove(str(ROOT / "bench"))
    # the 7B architecture as written inline: 8.29 B parameters (built on the meta device, no memory)
    import torch

    model = check.build_model(check.QWEN25_VL_7B, torch.bfloat16, "meta")
    assert 8.2e9 < sum(p.numel() for p in model.parameters()) < 8.4e9
    tok = check.build_tokenizer(check.QWEN25_VL_7B["text_config"]["vocab_size"], check.SPECIAL_IDS_7B)
    assert (
        len(tok) == 152064
        and tok.convert_tokens_to_ids("<|image_pad|>") == check.QWEN25_VL_7B["image_token_id"]
    )

    out = check.main(["--tiny", "--steps", "2", "--warmup", "1", "--work-dir", str(tmp_path)])
    assert out["tokens_per_s_per_gpu"] > 0 and out["step_s"] > 0 and out["processes"] == 1
    assert 0 < out["rollout_share"] <= 1
    printed = capsys.readouterr().out
    assert printed.count("BENCH_RESULT ") == 3 and "gpu_grpo_tiny_tokens_per_s_per_gpu" in printed
