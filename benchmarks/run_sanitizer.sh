#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, initcheck, synccheck) over a small but complete shape
# set of the CUDA prefill, decode and writers (tests/sanitizer_workload.py). Exits non-zero on any error.
#   bash benchmarks/run_sanitizer.sh [log-dir]
set -uo pipefail
cd "$(dirname "$0")/.."
log_dir="${1:-/tmp/cake-sanitizer}"
mkdir -p "$log_dir"
status=0
for tool in memcheck racecheck initcheck synccheck; do
  extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check no)
  # PyTorch's caching allocator hands out uninitialized blocks that the workload fills itself;
  # initcheck only reports reads of bytes nothing wrote.
  compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 99 --target-processes all \
    "${PYTHON:-python3}" tests/sanitizer_workload.py > "$log_dir/$tool.log" 2>&1
  rc=$?
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log_dir/$tool.log" | tail -1)
  echo "$tool: rc=$rc ${summary:-no summary line}"
  [ $rc -eq 0 ] || status=1
done
exit $status
