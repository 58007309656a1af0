#!/usr/bin/env bash
# Start one `vllm serve` teacher per GPU (ports 8000, 8001, ...) for build-ppjd. Needs the `gpu` extra
# (pip install -e '.[gpu]') and the model weights available to vLLM. Stop them with: kill $(cat runs/teachers.pids)
#   MODEL=Qwen/Qwen3-VL-30B-A3B-Instruct GPUS="0 1 2 3" data_gen/serve_teacher.sh
set -euo pipefail
MODEL="${MODEL:-Qwen/Qwen3-VL-30B-A3B-Instruct}"
GPUS="${GPUS:-0}"
BASE_PORT="${BASE_PORT:-8000}"
MAX_LEN="${MAX_LEN:-16384}"
mkdir -p runs/teacher-logs
: > runs/teachers.pids
port="$BASE_PORT"
urls=()
for gpu in $GPUS; do
  CUDA_VISIBLE_DEVICES="$gpu" nohup vllm serve "$MODEL" \
    --host 127.0.0.1 --port "$port" \
    --max-model-len "$MAX_LEN" \
    --limit-mm-per-prompt '{"image": 1}' \
    --gpu-memory-utilization "${GPU_UTIL:-0.90}" \
    > "runs/teacher-logs/vllm-$port.log" 2>&1 &
  echo $! >> runs/teachers.pids
  urls+=("http://127.0.0.1:$port/v1")
  port=$((port + 1))
done
echo "waiting for ${#urls[@]} server(s) ..."
for u in "${urls[@]}"; do
  until curl -sf "$u/models" > /dev/null; do sleep 5; done
  echo "ready: $u"
done
printf -- "--base-url %s " "${urls[@]}"; echo
