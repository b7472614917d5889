#!/usr/bin/env bash
# One launch of benchmarks/profile_one.py (the tree in the current directory's) under Nsight
# Compute's source counters (warp stall samples per SASS instruction), as the CSV
# benchmarks/ncu_roles.py reads, gzipped:
#
#   bash benchmarks/ncu_source.sh OUT.csv.gz [profile_one.py arguments]
#
# NCU: the ncu to run (default ncu); PYTHON: the interpreter (default python3); NCU_KERNEL: ncu's
# kernel filter (default regex:sparse_mla; profile_one.py's docstring gives the one for --decode,
# whose merge kernel would match it too). ncu's messages go to stderr; the exit status is ncu's.
set -o pipefail
[ $# -ge 1 ] || { echo "usage: $0 OUT.csv.gz [profile_one.py arguments]" >&2; exit 2; }
out=$1; shift
"${NCU:-ncu}" --clock-control none -k "${NCU_KERNEL:-regex:sparse_mla}" --launch-skip 1 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
  "${PYTHON:-python3}" benchmarks/profile_one.py "$@" | gzip > "$out"
