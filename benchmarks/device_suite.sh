#!/usr/bin/env bash
# One device session: build for the local GPU's arch, run the whole test suite, optionally the
# sanitizer and the benchmark. Logs go to $OUT (or /tmp/cake-device).
#   bash benchmarks/device_suite.sh [build] [test] [sanitize] [accuracy] [bench] [bench-quick] [bench-small] [planner-sweep] [bench-decode] [trace] [store-probe] [operand-probe] [register-probe] [converter-probe] [small-roles-probe] [wgmma-probe] [contention-probe] [eight-head-probe] [code-fetch-probe] [merge-launch-probe] [mode-probe] [arrive-probe] [ncu-source] [pack]
# pack (last): every file in $OUT into $OUT/device_suite.tar.gz, with $OUT/summary.txt beside it
# (each step's time and the logs' pass / fail / sanitizer summary lines): two files, where the
# device returns only a few from $OUT. A step not in this list stops the script before any runs.
# BENCH_ARGS reaches the prefill benchmark steps, e.g. BENCH_ARGS="--kernel portable" (the portable
# kernel on Hopper too), "--kernel hopper" (fail unless the GPU runs the Hopper kernels) or
# "--head-tiles 4 --variant 3,2" (one portable instance); each sets the kernel override for that run
# only. DECODE_BENCH_ARGS reaches bench-decode (e.g. "--max-splits 32"); MODE_ARGS reaches each
# mode-probe process (e.g. "--shape 4096x128x1024 --placements 6"), MODE_PROCESSES how many run.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/cake-device}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py="${PYTHON:-python3}"
steps="${*:-build test}"
known=" build test sanitize accuracy bench bench-quick bench-small planner-sweep bench-decode trace store-probe operand-probe register-probe converter-probe small-roles-probe wgmma-probe contention-probe eight-head-probe code-fetch-probe merge-launch-probe mode-probe arrive-probe ncu-source pack "
for step in $steps; do
  [[ "$known" == *" $step "* ]] || { echo "unknown step: $step (steps:$known)"; exit 2; }
done
rc=0
timings=""
# A standalone probe: benchmarks/SOURCE.cu built by nvcc with ARCH_FLAGS, run once, its table in
# $out/LOG.md (the build's log in $out/LOG_build.log), the binary removed.
run_probe() {
  local source="$1" log="$2"
  shift 2
  if nvcc -O3 -std=c++17 "$@" -o "$out/$source" "benchmarks/$source.cu" > "$out/${log}_build.log" 2>&1; then
    "$out/$source" | tee "$out/$log.md" || rc=1
    rm -f "$out/$source"
  else
    echo "$source build failed: $out/${log}_build.log"; rc=1
  fi
}
for step in $steps; do
  start=$(date +%s)
  case "$step" in
    build)
      bash benchmarks/build_extension.sh "$out/build.log" || exit 1
      ;;
    test)
      # --durations: the slowest tests in the log, to keep the suite inside one device call.
      "$py" -m pytest -q -x -p no:cacheprovider --durations=40 tests ${PYTEST_K:+-k "$PYTEST_K"} > "$out/pytest.log" 2>&1 || rc=1
      tail -15 "$out/pytest.log"
      ;;
    sanitize)
      bash benchmarks/run_sanitizer.sh "$out" || rc=1
      ;;
    accuracy)
      # Each output row's error against float64 (benchmarks/accuracy.py): the prefill's default
      # shapes, then the decode's at one, eight and 64 tokens (split-K plans and unsplit ones).
      "$py" benchmarks/accuracy.py --json "$out/accuracy.json" 2>&1 | tee "$out/accuracy.md" || rc=1
      "$py" benchmarks/accuracy.py --op decode --tokens 1 8 64 --heads 8 16 64 128 --topk 2048 --scales 1 4 \
        --json "$out/accuracy_decode.json" 2>&1 | tee "$out/accuracy_decode.md" || rc=1
      ;;
    bench)
      "$py" benchmarks/bench_prefill.py --json "$out/bench.json" ${BENCH_ARGS:-} 2>&1 | tee "$out/bench.md" || rc=1
      ;;
    planner-sweep)
      for ht in 1 2 4; do
        "$py" benchmarks/bench_prefill.py --tokens 64 128 256 512 1024 2048 4096 --heads 64 128 --topk 512 \
          --head-tiles $ht --baseline none --repeats 10 2>&1 | grep "^| [0-9]"
      done | tee "$out/planner_sweep.md"
      ;;
    bench-decode)
      # The decode's rows, then the T x H x candidates grid with both ops and the choice between them.
      "$py" benchmarks/bench_decode.py --json "$out/bench_decode.json" ${DECODE_BENCH_ARGS:-} 2>&1 | tee "$out/bench_decode.md" || rc=1
      "$py" benchmarks/bench_decode.py --grid --json "$out/bench_decode_grid.json" ${DECODE_BENCH_ARGS:-} 2>&1 | tee "$out/bench_decode_grid.md" || rc=1
      ;;
    bench-small)
      # The Hopper kernels (the small-heads one for every H but 128) against the portable kernel,
      # the sweep of docs/hopper_small_kernel.md ("Measured").
      for kernel in hopper_small portable; do
        "$py" benchmarks/bench_prefill.py --tokens 128 1024 4096 --heads 16 32 48 80 96 112 128 --topk 512 1024 \
          --baseline none --kernel $kernel --repeats 10 --json "$out/sweep_$kernel.json" 2>&1 \
          | tee "$out/sweep_$kernel.md" || rc=1
      done
      ;;
    trace)
      # The 64-head kernel's development trace (a CAKE_HOPPER_TRACE copy of this tree, built
      # beside the installed build): items at topk 128 and 512 (T = 4096, H = 128) and the decode
      # of one token; raw logs and benchmarks/trace_items.py's summaries.
      AB_WORK=/tmp/cake-trace OUT=/tmp/cake-trace/out AB_BUILD_ONLY=trace \
        bash benchmarks/ab_trees.sh "trace=.@-DCAKE_HOPPER_TRACE" > "$out/trace_build.log" 2>&1
      tree=/tmp/cake-trace/trees/trace
      if ls "$tree"/torch_ops/_C*.so > /dev/null 2>&1; then
        for topk in 128 512; do
          (cd "$tree" && PYTHONPATH=. "$py" benchmarks/trace_items.py --run --topk $topk > "$out/trace_topk$topk.log" 2>&1) || rc=1
          "$py" benchmarks/trace_items.py "$out/trace_topk$topk.log" | tee "$out/trace_topk${topk}_summary.md"
        done
        (cd "$tree" && PYTHONPATH=. "$py" benchmarks/trace_items.py --run-decode > "$out/trace_decode.log" 2>&1) || rc=1
        "$py" benchmarks/trace_items.py "$out/trace_decode.log" | tee "$out/trace_decode_summary.md"
      else
        echo "trace build failed: $out/trace_build.log"; rc=1
      fi
      ;;
    bench-quick)
      "$py" benchmarks/bench_prefill.py --tokens 4096 --heads 16 64 128 --topk 512 1024 --baseline none ${BENCH_ARGS:-} 2>&1 | tee "$out/bench_quick.md" || rc=1
      ;;
    operand-probe)
      # What a 16-head chunk's tensor work costs by where its operands come from.
      run_probe operand_path_probe operand_probe -gencode=arch=compute_90a,code=sm_90a
      ;;
    register-probe)
      # A whole 16-head chunk with K kept in registers (mma.sync, movmatrix), loads and conversion included.
      run_probe register_shape_probe register_probe -gencode=arch=compute_90a,code=sm_90a
      ;;
    converter-probe)
      # The fused 64-head schedule with one 184-register converter (QK^T batches in flight, ablations)
      # against two 96-register converters: cycles a block, converter and PV waits.
      run_probe converter_stream_probe converter_probe -gencode=arch=compute_90a,code=sm_90a
      ;;
    small-roles-probe)
      # A 16-head chunk with converters that only convert and store and the attend warpgroup
      # multiplying both products from shared memory: cycles a chunk by converter pairs and K tiles.
      run_probe small_roles_probe small_roles_probe -gencode=arch=compute_90a,code=sm_90a
      ;;
    wgmma-probe)
      # Cycles a wgmma by shape (N = 16 .. 128), operand source and accumulator chains; an mma.sync.
      run_probe wgmma_rate_probe wgmma_probe -gencode=arch=compute_90a,code=sm_90a
      ;;
    contention-probe)
      # How much a consumer warpgroup's QK^T or PV chain slows beside integer work, shared stores,
      # both, or shared loads on two other warpgroups (the 64-head kernel's sides running free).
      run_probe contention_probe contention_probe -gencode=arch=compute_90a,code=sm_90a
      ;;
    eight-head-probe)
      # An eight-head decode with O in registers and no K tile (mma.sync, movmatrix), checked against float64.
      run_probe eight_head_register_probe eight_head_probe -gencode=arch=compute_90a,code=sm_90a
      ;;
    code-fetch-probe)
      # What straight-line code run once costs an SM a cycle an instruction, cold and warm.
      run_probe code_fetch_probe code_fetch_probe -gencode=arch=compute_90a,code=sm_90a
      ;;
    merge-launch-probe)
      # A decode's merge as a second launch (plain, PDL) against merging in the split's own launch.
      run_probe merge_launch_probe merge_launch_probe -gencode=arch=compute_90a,code=sm_90a
      ;;
    mode-probe)
      # Whether the prefill's two timing modes follow where its tensors sit or when it runs, in
      # MODE_PROCESSES processes (default 3): whether the processes land in different modes.
      for run in $(seq 1 "${MODE_PROCESSES:-3}"); do
        "$py" benchmarks/mode_probe.py --json "$out/mode_probe_$run.json" ${MODE_ARGS:-} 2>&1 | tee -a "$out/mode_probe.md" || rc=1
      done
      ;;
    arrive-probe)
      # Whether a hand-over (mbarrier arrive, named barrier, proxy fence) waits for the handing
      # thread's global loads in flight.
      run_probe arrive_probe arrive_probe -gencode=arch=compute_90a,code=sm_90a
      ;;
    store-probe)
      # How fast one SM writes a 64 KB output tile, by store pattern and number of SMs writing.
      run_probe store_rate_probe store_probe -arch=native
      ;;
    ncu-source)
      # Nsight Compute on the installed build, T = 4096, topk 512, for each H of NCU_HEADS (default
      # "64 16": the 64-head and the small-heads kernel): the full sections as text, and the source
      # counters (warp stall samples per SASS instruction) as CSV, gzipped, for reading off the device
      # (benchmarks/ncu_roles.py summarises the 64-head kernel's by role).
      for heads in ${NCU_HEADS:-64 16}; do
        problem=(--tokens 4096 --heads "$heads" --topk 512)
        ncu --clock-control none -k regex:sparse_mla --launch-skip 1 --launch-count 1 --set full --import-source yes \
          --page details --print-details all "$py" benchmarks/profile_one.py "${problem[@]}" \
          > "$out/ncu_h${heads}_details.txt" 2> "$out/ncu_h${heads}_details.err" || rc=1
        PYTHON="$py" bash benchmarks/ncu_source.sh "$out/ncu_h${heads}_source.csv.gz" "${problem[@]}" \
          2> "$out/ncu_h${heads}_source.err" || rc=1
      done
      ;;
    pack)
      {
        echo "steps: $steps"
        nvidia-smi -L 2> /dev/null | sed 's/^/device: /' || true  # which card, by UUID
        printf "%s" "$timings"
        grep -h -E "[0-9]+ (passed|failed)|ERROR SUMMARY|RACECHECK SUMMARY|failed:" "$out"/*.log 2> /dev/null
      } > "$out/summary.txt"
      (cd "$out" && find . -type f ! -name device_suite.tar.gz ! -name summary.txt -print0 \
         | tar -czf device_suite.tar.gz --null -T - --remove-files) || rc=1
      find "$out" -mindepth 1 -type d -empty -delete
      ;;
  esac
  timings+="[$step] $(( $(date +%s) - start )) s, rc so far $rc"$'\n'
  echo "[$step] $(( $(date +%s) - start )) s"
done
exit $rc
