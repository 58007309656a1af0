"""The learnability check of the tiny substrate (``perception_judge.tiny.learnability``), as benchmark ratios.

Supervised training on the PPJD verdict target on the demo's tiny judge (2000 steps of 32 fresh tiny-world records),
then held-out r_c-vs-r_rp pair accuracy on images it never saw (target >= 0.95) and the same with every image
replaced by another record's (target <= 0.6). About 4-5 minutes on 2 CPU cores. ``--seed`` checks another draw.
"""

from __future__ import annotations

import argparse
import json

from perception_judge.tiny.learnability import CONTROL_CEILING, TARGET_ACCURACY, run_check


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    r = run_check(steps=args.steps, seed=args.seed)
    for name, value, target, higher in (
        ("learnability_heldout_c_vs_rp", r["heldout"]["pair_acc_c_vs_rp"], TARGET_ACCURACY, True),
        ("learnability_heldout_c_vs_rp_r", r["heldout"]["pair_acc_c_vs_rp_r"], TARGET_ACCURACY, True),
        ("learnability_mismatched_c_vs_rp", r["mismatched"]["pair_acc_c_vs_rp"], CONTROL_CEILING, False),
    ):
        line = {
            "name": name,
            "value": value,
            "target": target,
            "unit": "accuracy",
            "higher_is_better": higher,
        }
        print("BENCH_RESULT " + json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
