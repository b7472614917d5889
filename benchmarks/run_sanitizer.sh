#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, initcheck, synccheck) over a small but complete shape
# set of the CUDA prefill, decode and writers (tests/sanitizer_workload.py). Exits non-zero on any error.
#   bash benchmarks/run_sanitizer.sh [log-dir]
# memcheck, initcheck and synccheck check the installed build. racecheck does not follow one-sided
# named-barrier hand-overs (bar.arrive, which the Hopper kernel's consumers use): it flags a
# correct one (racecheck_arrive_probe.cu, run here too, its log says whether it still does). So
# racecheck runs on a build whose hand-overs wait on both sides (-DCAKE_RACECHECK_BUILD: the same
# accesses in the same order), built in place by build_extension.sh, and the default build is
# restored afterwards (two builds, about a minute on the device). RACECHECK_REBUILD=0 runs
# racecheck on the installed build instead.
set -uo pipefail
cd "$(dirname "$0")/.."
log_dir="${1:-/tmp/cake-sanitizer}"
mkdir -p "$log_dir"
status=0
run_tool() {  # tool
  local tool=$1 extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check no)
  # PyTorch's caching allocator hands out uninitialized blocks that the workload fills itself;
  # initcheck only reports reads of bytes nothing wrote.
  compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 99 --target-processes all \
    "${PYTHON:-python3}" tests/sanitizer_workload.py > "$log_dir/$tool.log" 2>&1
  local rc=$?
  local summary
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log_dir/$tool.log" | tail -1)
  echo "$tool: rc=$rc ${summary:-no summary line}"
  [ $rc -eq 0 ] || status=1
}
for tool in memcheck initcheck synccheck; do run_tool $tool; done

if [ "${RACECHECK_REBUILD:-1}" = 1 ]; then
  probe="$log_dir/racecheck_arrive_probe"
  if nvcc -arch=native -o "$probe" benchmarks/racecheck_arrive_probe.cu > "$log_dir/racecheck_probe.log" 2>&1; then
    compute-sanitizer --tool racecheck "$probe" >> "$log_dir/racecheck_probe.log" 2>&1
    echo "racecheck on a correct bar.arrive hand-over (probe): $(grep "RACECHECK SUMMARY" "$log_dir/racecheck_probe.log" | tail -1)"
  fi
  CAKE_NVCC_EXTRA="${CAKE_NVCC_EXTRA:-} -DCAKE_RACECHECK_BUILD" bash benchmarks/build_extension.sh "$log_dir/build_racecheck.log" || exit 1
  run_tool racecheck
  bash benchmarks/build_extension.sh "$log_dir/build_default.log" || exit 1
else
  run_tool racecheck
fi
exit $status
