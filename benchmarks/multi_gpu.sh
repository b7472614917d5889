#!/usr/bin/env bash
# The prefill on two GPUs (examples/multi_gpu.py): the two-GPU test, then T = 4096, H = 128,
# topk 1024 split over 2 GPUs by heads (tp) and by tokens (dp), and on one GPU as the baseline.
# Logs and JSON go to $OUT (or /tmp/cake-multi-gpu).
#   bash benchmarks/multi_gpu.sh [build] [test] [baseline] [tp] [dp]     (default: test baseline tp dp)
# Needs a build with CUDA kernels: the build step is benchmarks/device_suite.sh's (logs in the same
# $OUT). Each step has a time limit (STEP_TIMEOUT_S, default 900 s); a failed step does not stop
# the others, and the exit status is non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/cake-multi-gpu}"
mkdir -p "$out"
export OUT="$out" PYTHONUNBUFFERED=1
# Plain NVLink transfers (no NVLink SHARP multicast), so that runs on different hosts compare.
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"
py="${PYTHON:-python3}"
limit="${STEP_TIMEOUT_S:-900}"
steps="${*:-test baseline tp dp}"
shape=(--tokens 4096 --heads 128 --topk 1024 --repeats "${REPEATS:-20}")

gpus=$("$py" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
echo "GPUs visible: $gpus; logs in $out"
nvidia-smi topo -m > "$out/topology.txt" 2>&1 || true

# example NPROC MODE NAME: torchrun --standalone on this host, log and JSON named NAME.
example() {
  timeout -k 30 "$limit" "$py" -m torch.distributed.run --standalone --nproc_per_node="$1" \
    examples/multi_gpu.py --device cuda --mode "$2" "${shape[@]}" --json "$out/$3.json" > "$out/$3.log" 2>&1
  local status=$?
  if [ "$status" -eq 0 ]; then sed -n '/ rank(s) on /,$p' "$out/$3.log"; else grep -m4 "Error\|FAILED" "$out/$3.log"; fi
  return $status
}

rc=0
for step in $steps; do
  start=$(date +%s)
  status=0
  case "$step" in
    build)
      bash benchmarks/device_suite.sh build || status=$?
      ;;
    test)
      if [ "$gpus" -lt 2 ]; then echo "[test] needs 2 GPUs, found $gpus"; status=1; else
        timeout -k 30 "$limit" "$py" -m pytest -q -p no:cacheprovider -rs tests/test_multi_gpu.py > "$out/multi_gpu_test.log" 2>&1 || status=$?
        tail -5 "$out/multi_gpu_test.log"
        # The two-GPU test must have run, not been skipped.
        grep -q "needs two CUDA devices" "$out/multi_gpu_test.log" && { echo "[test] the two-GPU test was skipped"; status=1; }
      fi
      ;;
    baseline)
      example 1 tp multi_gpu_1gpu || status=$?
      ;;
    tp|dp)
      if [ "$gpus" -lt 2 ]; then echo "[$step] needs 2 GPUs, found $gpus"; status=1; else
        example 2 "$step" "multi_gpu_${step}2" || status=$?
      fi
      ;;
    *)
      echo "unknown step: $step"; status=1
      ;;
  esac
  [ "$status" -eq 0 ] || rc=1
  echo "[$step] status $status, $(( $(date +%s) - start )) s"
done
exit $rc
