#!/usr/bin/env bash
# A/B of several source trees in one device call: every tree is built in place at once (sm_90a
# unless CAKE_CUDA_ARCHS says otherwise), its tests run, then the same benchmark rows are timed on
# each tree in turn, round after round, so a change of clocks during the call touches every tree;
# even rounds take the trees in reverse order (a tree's place in a round moves its times by up to
# ~1.5%), so use an even number of rounds, or three or more, which ab_summary's medians need to
# outvote one disturbed round.
#
#   bash benchmarks/ab_trees.sh LABEL=DIR[@NVCC_FLAGS] [LABEL=DIR[@NVCC_FLAGS] ...]
#
# DIR is a whole source tree (its own benchmarks/ are used, so an older tree runs its own flags);
# it is copied to /tmp/cake-ab/trees/LABEL (AB_WORK instead of /tmp/cake-ab) and built there, so one tree can run as several
# variants, each with its own nvcc flags after an @ (e.g. "a=.ab/main@-DCAKE_SOME_KNOB=2";
# quote the argument when the flags hold spaces).
# To compare branches, export them here into the git-ignored .ab/ and carry it to the device:
#   for b in main my-branch; do rm -rf .ab/$b; mkdir -p .ab/$b; git archive $b | tar -x -C .ab/$b; done
#   bash benchmarks/ab_trees.sh main=.ab/main new=.ab/my-branch        # on the device, carry [".ab"]
#
# AB_TESTS    pytest arguments run on each tree before any timing (default: none), e.g. "tests/test_hopper.py"
# AB_TEST_TIMEOUT  seconds each tree's tests may take (default: no limit but AB_DEADLINE); a tree whose
#             tests fail or time out (a kernel that hangs) is left out of the digest and the timing
# AB_PREFILL  bench_prefill.py arguments (default: none, no prefill rows), e.g. "--tokens 4096 --heads 64 128
#             --topk 128 512 1024 --baseline none --repeats 10"; add "--idle-ms 1" (trees from
#             56735b7 on) to idle the GPU after each timed call: back to back, an H100 ran the prefill
#             1-2% slower after about a second at its power cap (docs/benchmarks.md, "What moves the
#             prefill's time in a run: ...")
# AB_DECODE   bench_decode.py arguments (default: none, no decode rows), e.g. "--kernels"
# AB_ROUNDS   rounds of timing (default 1); AB_NVCC_EXTRA nvcc flags for every tree (before its own)
# AB_DEADLINE seconds from the start after which no test or benchmark step starts, and a running
#             one is stopped (timeout), so that the summary and ab.tar.gz are still written when a
#             device call's time runs out (0, the default: no deadline)
# AB_DIGEST=1 fingerprints each tree's outputs on fixed inputs (benchmarks/output_digest.py of the tree
#             running this script) and compares them with the first tree's: a change that keeps the
#             arithmetic must give the same bits
# AB_ACCURACY benchmarks/accuracy.py arguments (this script's copy; set, even empty, to run it), after
#             the tests and digest, on each tree that is not timing only: the per-row errors against
#             float64 (the prefill's, or with "--op decode" the decode's) in <label>/accuracy.{md,json},
#             its summary line printed. It runs before the timing, inside AB_DEADLINE (its float64
#             reference runs on the CPU: 0.4 s for T 64, H 128, topk 1024 on two cores), and a tree
#             that fails it is still timed (its line says FAILED)
# AB_TIMING_ONLY labels timed without their tests, digest and accuracy (development builds whose results are
#             wrong by design, e.g. "-DCAKE_HOPPER_NO_WAITS"), so that one call can test some trees and
#             time others
# AB_NCU      profile_one.py arguments (e.g. "--tokens 4096 --heads 128 --topk 1024"): after the
#             timing, one launch of each timed tree under Nsight Compute's source counters
#             (benchmarks/ncu_source.sh; NCU: the ncu to run, default ncu), gzipped CSV in <label>/ncu_source.csv.gz inside ab.tar.gz (a
#             device call brings back few files); benchmarks/ncu_roles.py reads several side by side.
#             Each profile imports its own tree (PYTHONPATH, as every step here): a plain ncu run in
#             each of several trees installed in editable mode would import the last one built.
# AB_BUILD_ONLY  labels only built, for the rest of the call to use from /tmp/cake-ab/trees/LABEL
#             (e.g. a trace build: "t=.ab/x@-DCAKE_HOPPER_TRACE", then cd there and run
#             PYTHONPATH=. python3 benchmarks/trace_items.py --run)
# Logs and JSON go to /tmp/cake-ab/ab (AB_WORK/ab): command.txt (the arguments and the AB_* /
# CAKE_* environment, the GPU by `nvidia-smi -L`), <label>/tree.txt (source, commit if any, a hash of its files, flags),
# <label>/build.log, <label>/pytest.log, <label>/{prefill,decode}_r<round>.{json,md}; $OUT (or
# /tmp/cake-ab) gets two files, summary.md (benchmarks/ab_summary.py) and ab.tar.gz with
# everything (few files, for the device's limit).
# Nothing is removed or written before every argument has been checked.
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
work="${AB_WORK:-/tmp/cake-ab}"
dest="${OUT:-$work}"
out="$work/ab"
py="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
[ $# -ge 1 ] || { echo "usage: $0 LABEL=DIR[@NVCC_FLAGS] ..."; exit 2; }

labels=(); sources=(); flags=()
for arg in "$@"; do
  label="${arg%%=*}"; spec="${arg#*=}"; dir="${spec%%@*}"; extra=""
  [ "$dir" != "$spec" ] && extra="${spec#*@}"
  [ "$label" != "$arg" ] && [ -n "$label" ] && [ -f "$dir/setup.py" ] \
    || { echo "not LABEL=DIR[@NVCC_FLAGS] with a setup.py in DIR: $arg"; exit 2; }
  for seen in "${labels[@]}"; do [ "$seen" != "$label" ] || { echo "label given twice: $label"; exit 2; }; done
  labels+=("$label"); sources+=("$dir"); flags+=("$extra")
done

rm -rf "$out"; mkdir -p "$out" "$dest"
# The GPU's name and UUID too: a result seen on one device only (a run-to-run difference, a slow
# row) can then be tied to that card when a later call lands on it again.
{ printf '%q ' "$@"; echo; env | grep -E '^(AB_|CAKE_)' | sort
  nvidia-smi -L 2> /dev/null | sed 's/^/device: /' || true; } > "$out/command.txt"
dirs=()
for i in "${!labels[@]}"; do
  copy="$work/trees/${labels[$i]}"
  rm -rf "$copy"; mkdir -p "$copy" "$out/${labels[$i]}"
  (cd "${sources[$i]}" && tar -c --exclude=./build --exclude='*.so' --exclude=./.ab --exclude=./.git .) | tar -x -C "$copy"
  # An in-place build imports from the tree itself, where the package's meta/ is not under torch_ops/.
  [ -e "$copy/torch_ops/meta" ] || ln -s ../meta "$copy/torch_ops/meta"
  dirs+=("$copy")
  # What the tree was: its source (an exported branch keeps no commit, so a hash of its files says
  # which it was), its flags and architectures.
  commit="none (not a checkout of its own)"
  if [ "$(git -C "${sources[$i]}" rev-parse --show-toplevel 2>/dev/null)" = "$(cd "${sources[$i]}" && pwd -P)" ]; then
    commit="$(git -C "${sources[$i]}" rev-parse --short HEAD)"
    [ -z "$(git -C "${sources[$i]}" status --porcelain --untracked-files=no)" ] || commit="$commit-dirty"
  fi
  { echo "label: ${labels[$i]}"; echo "source: ${sources[$i]}"; echo "commit: $commit"
    echo "tree flags: ${flags[$i]}"; echo "common flags: ${AB_NVCC_EXTRA:-}"
    echo "CAKE_CUDA_ARCHS: ${CAKE_CUDA_ARCHS:-90a}"
    echo "source hash: $(cd "$copy" && find . \( -name __pycache__ -o -name .pytest_cache -o -name '*.egg-info' \
      -o -name .whl -o -name .gl \) -prune -o -type f ! -name '*.so' ! -name '*.pyc' -print0 | LC_ALL=C sort -z \
      | xargs -0 sha256sum | sha256sum | cut -c1-16)"
  } > "$out/${labels[$i]}/tree.txt"
done
n=${#labels[@]}
jobs=$(( $(nproc) / n )); [ "$jobs" -ge 1 ] || jobs=1

start=$(date +%s)
for i in "${!labels[@]}"; do
  ( cd "${dirs[$i]}" && CC="${CAKE_CC:-/usr/bin/gcc}" CXX="${CAKE_CXX:-/usr/bin/g++}" \
      CAKE_CUDA_ARCHS="${CAKE_CUDA_ARCHS:-90a}" CAKE_NVCC_EXTRA="${AB_NVCC_EXTRA:-} ${flags[$i]}" MAX_JOBS=$jobs \
      "$py" setup.py build_ext --inplace > "$out/${labels[$i]}/build.log" 2>&1 ) &
done
wait
built=()
for i in "${!labels[@]}"; do
  if ! ls "${dirs[$i]}"/torch_ops/_C*.so > /dev/null 2>&1; then
    echo "[${labels[$i]}] build failed"; tail -20 "$out/${labels[$i]}/build.log"
  elif ! origin=$(cd "${dirs[$i]}" && PYTHONPATH="${dirs[$i]}" "$py" -c "import torch_ops; print(torch_ops.__file__)" 2>&1) \
      || [[ "$origin" != "${dirs[$i]}"/* ]]; then
    echo "[${labels[$i]}] torch_ops does not import from its tree: $origin"
  elif [[ " ${AB_BUILD_ONLY:-} " == *" ${labels[$i]} "* ]]; then
    echo "[${labels[$i]}] built in ${dirs[$i]} (build only)"
  else
    built+=("$i")
  fi
done
echo "[build] $(( $(date +%s) - start )) s, ${#built[@]} of $n trees to test and time"

in_tree() {  # in_tree INDEX COMMAND...: run with the tree's package first on the path, within AB_DEADLINE
  local i=$1; shift
  local limit=""
  if [ "${AB_DEADLINE:-0}" -gt 0 ]; then
    local left=$(( start + AB_DEADLINE - $(date +%s) ))
    [ "$left" -gt 5 ] || { echo "[${labels[$i]}] skipped (AB_DEADLINE): $*" >&2; return 124; }
    limit="timeout $left"
  fi
  ( cd "${dirs[$i]}" && PYTHONPATH="${dirs[$i]}${PYTHONPATH:+:$PYTHONPATH}" CAKE_COMMIT="${labels[$i]}" $limit "$@" )
}

timing_only() { [[ " ${AB_TIMING_ONLY:-} " == *" ${labels[$1]} "* ]]; }

if [ -n "${AB_TESTS:-}" ]; then
  passed=()
  for i in "${built[@]}"; do
    if timing_only "$i"; then passed+=("$i"); echo "[${labels[$i]}] timing only: no tests"; continue; fi
    test_limit=(); [ -n "${AB_TEST_TIMEOUT:-}" ] && test_limit=(timeout "$AB_TEST_TIMEOUT")
    if in_tree "$i" "${test_limit[@]}" "$py" -m pytest -q -p no:cacheprovider $AB_TESTS > "$out/${labels[$i]}/pytest.log" 2>&1; then
      passed+=("$i")
      echo "[${labels[$i]}] tests: $(tail -1 "$out/${labels[$i]}/pytest.log")"
    else
      echo "[${labels[$i]}] tests failed or timed out, left out: $(tail -1 "$out/${labels[$i]}/pytest.log")"
    fi
  done
  built=("${passed[@]}")
fi

if [ -n "${AB_DIGEST:-}" ]; then
  digests=(); expected=0
  for i in "${built[@]}"; do
    timing_only "$i" && continue
    expected=$((expected + 1))
    in_tree "$i" "$py" "$here/benchmarks/output_digest.py" --json "$out/${labels[$i]}/digest.json" \
      > "$out/${labels[$i]}/digest.log" 2>&1 || echo "[${labels[$i]}] digest failed: $(tail -1 "$out/${labels[$i]}/digest.log")"
    [ -f "$out/${labels[$i]}/digest.json" ] && digests+=("$out/${labels[$i]}/digest.json")
  done
  if [ ${#digests[@]} -ge 2 ]; then
    "$py" "$here/benchmarks/output_digest.py" --compare "${digests[@]}" > "$out/digest_compare.txt" 2>&1
    echo "[digest] $(grep -c 'same bits' "$out/digest_compare.txt") cases the same, $(grep -c -E 'DIFFERENT|MISSING' "$out/digest_compare.txt") different or missing (digest_compare.txt)"
  fi
  [ ${#digests[@]} -eq "$expected" ] || echo "[digest] only ${#digests[@]} of $expected tested trees gave a digest"
fi

if [ -n "${AB_ACCURACY+x}" ]; then
  for i in "${built[@]}"; do
    timing_only "$i" && continue
    # accuracy.py's last line sums its run up (passed or FAILED, the worst errors); a crash's last
    # line is its error.
    in_tree "$i" "$py" "$here/benchmarks/accuracy.py" $AB_ACCURACY --json "$out/${labels[$i]}/accuracy.json" \
      > "$out/${labels[$i]}/accuracy.md" 2>&1
    echo "[${labels[$i]}] accuracy (exit $?): $(tail -1 "$out/${labels[$i]}/accuracy.md") (${labels[$i]}/accuracy.md)"
  done
fi

for round in $(seq 1 "${AB_ROUNDS:-1}"); do
  order=("${built[@]}")
  if [ $((round % 2)) -eq 0 ]; then order=(); for ((k = ${#built[@]} - 1; k >= 0; k--)); do order+=("${built[$k]}"); done; fi
  for i in "${order[@]}"; do
    if [ -n "${AB_PREFILL:-}" ]; then
      in_tree "$i" "$py" benchmarks/bench_prefill.py $AB_PREFILL --json "$out/${labels[$i]}/prefill_r$round.json" \
        > "$out/${labels[$i]}/prefill_r$round.md" 2>&1 || echo "[${labels[$i]}] prefill round $round failed"
    fi
    if [ -n "${AB_DECODE:-}" ]; then
      in_tree "$i" "$py" benchmarks/bench_decode.py $AB_DECODE --json "$out/${labels[$i]}/decode_r$round.json" \
        > "$out/${labels[$i]}/decode_r$round.md" 2>&1 || echo "[${labels[$i]}] decode round $round failed"
    fi
  done
done

if [ -n "${AB_NCU:-}" ]; then
  for i in "${built[@]}"; do
    if in_tree "$i" env PYTHON="$py" bash "$here/benchmarks/ncu_source.sh" "$out/${labels[$i]}/ncu_source.csv.gz" \
        $AB_NCU 2> "$out/${labels[$i]}/ncu.log"; then
      echo "[${labels[$i]}] ncu: ${labels[$i]}/ncu_source.csv.gz"
    else
      echo "[${labels[$i]}] ncu failed: $(tail -1 "$out/${labels[$i]}/ncu.log")"
    fi
  done
fi

ordered=(); for i in "${built[@]}"; do ordered+=("${labels[$i]}"); done
if [ ${#ordered[@]} -gt 0 ]; then
  "$py" "$here/benchmarks/ab_summary.py" "$out" "${ordered[@]}" | tee "$out/summary.md"
else
  echo "no tree timed (build-only or failed builds)" | tee "$out/summary.md"
fi
cp "$out/summary.md" "$dest/summary.md"
tar -czf "$dest/ab.tar.gz" -C "$work" ab
echo "[ab] $(( $(date +%s) - start )) s"
