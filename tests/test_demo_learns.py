"""GRPO teaches the tiny judge to look (slow: the whole `make demo` pipeline, about 7 minutes on 2 CPU cores).

`make demo` runs seed 0; this test draws the synthetic source (and the judge's weights) with seed 1, so the claim
holds on a second draw, not only the default one (docs/tiny-substrate.md has both). The demo's base
judge is blind (at chance with real and with mismatched images); after GRPO the last checkpoint must judge r_c over
r_rp far above chance *and* far above the same checkpoint scored with every image replaced by another record's:
it uses the image, not the text. Measured on seed 1 with the committed recipe: base 0.500 [0.44, 0.56], last
checkpoint 1.000 [0.98, 1.00], its mismatched control 0.445 (one thread per process, so re-runs on one kind of
machine repeat these).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(2700)  # the suite's 600 s limit is for single tests; this one is the whole demo
def test_grpo_lifts_heldout_accuracy_far_above_the_mismatched_image_control(tmp_path):
    out = tmp_path / "demo"
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "perception_judge.cli", "demo", "--out", str(out), "--seed", "1"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    models = {m["name"]: m for m in summary["models"]}
    base, last = models["base"], models[summary["last"]]
    assert base["step"] is None and last["step"] and last["step"] > 0

    assert abs(base["c_vs_rp"]["accuracy"] - 0.5) < 0.1, base  # the blind base judge sits at chance
    assert last["c_vs_rp"]["accuracy"] >= 0.9, last  # the target: >= 0.9 with the interval above 0.8
    assert last["c_vs_rp"]["ci95"][0] > 0.8, last
    assert last["c_vs_rpr"]["accuracy"] >= 0.9, last
    control = last["c_vs_rp_mismatched"]["accuracy"]
    assert control <= 0.6, last
    assert last["c_vs_rp"]["accuracy"] - control >= 0.2, last
    assert last["c_vs_rp"]["parse_failures"] < 0.05, last
