"""The learnability check of the tiny substrate (slow: about 4-5 minutes on 2 CPU cores per seed, one thread)."""

from __future__ import annotations

import pytest

from perception_judge.tiny.learnability import run_check


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_supervised_verdicts_teach_the_tiny_judge_to_look(seed, tmp_path):
    """Supervised training on the verdict target reaches >= 0.95 held-out r_c-vs-r_rp accuracy on unseen images, and
    the same model falls to chance when every image is another record's: it uses the image, not the text."""
    r = run_check(steps=2000, seed=seed, n_heldout=200, work_dir=tmp_path)
    # the thresholds are the test's own; the check's `passed` must judge by the same ones
    assert r["target"] == {"c_vs_rp": 0.95, "mismatched_c_vs_rp_max": 0.6}, r["target"]
    assert r["heldout"]["pair_acc_c_vs_rp"] >= 0.95, r
    assert r["heldout"]["pair_acc_c_vs_rp_ci95_lo"] > 0.9, r
    assert r["mismatched"]["pair_acc_c_vs_rp"] <= 0.6, r
    assert r["heldout"]["pair_acc_parse_failures"] < 0.02, r
    assert r["passed"]
