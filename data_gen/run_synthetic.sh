#!/usr/bin/env bash
# Offline PPJD end to end: synthetic source -> programmatic teacher -> training set. No model, no network.
#   data_gen/run_synthetic.sh [N] [OUT_ROOT]          (defaults: 3000 items under runs/)
# Re-running resumes: finished records are skipped.
set -euo pipefail
N="${1:-3000}"
ROOT="${2:-runs}"
SEED="${SEED:-0}"
PJ="${PJ:-perception-judge}"

if [[ ! -f "$ROOT/synth/items.jsonl" ]]; then
  "$PJ" synth --n "$N" --seed "$SEED" --out "$ROOT/synth"
fi
"$PJ" build-ppjd --input "$ROOT/synth" --out "$ROOT/ppjd-synthetic" --teacher programmatic --seed "$SEED"
"$PJ" export "$ROOT/ppjd-synthetic" --out "$ROOT/trainset-synthetic" --seed "$SEED" \
  --mix "${MIX:-batch=1}" --val-fraction "${VAL_FRACTION:-0.1}" --overwrite
echo "training set: $ROOT/trainset-synthetic (load with perception_judge.trainset.load_training_set)"
