#!/usr/bin/env bash
# Evaluate every checkpoint of a training run and write the table, the report and the plots.
#
#   eval/sweep.sh RUN_DIR [CONFIG] [extra perception-judge eval sweep flags...]
#
# CONFIG defaults to eval/configs/tiny.yaml. Re-running skips finished cells. Output: RUN_DIR/eval/.
set -euo pipefail
cd "$(dirname "$0")/.."
run_dir=${1:?usage: eval/sweep.sh RUN_DIR [CONFIG] [flags...]}
config=${2:-eval/configs/tiny.yaml}
shift $(( $# >= 2 ? 2 : 1 ))
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} TRANSFORMERS_OFFLINE=${TRANSFORMERS_OFFLINE:-1} HF_DATASETS_OFFLINE=${HF_DATASETS_OFFLINE:-1}
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
exec "$PY" -m perception_judge.cli eval sweep "$run_dir" --config "$config" "$@"
