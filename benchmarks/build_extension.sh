#!/usr/bin/env bash
# Builds the extension in place (an editable install) for the device: sm_90a unless CAKE_CUDA_ARCHS
# says otherwise, extra nvcc flags from CAKE_NVCC_EXTRA (e.g. -DCAKE_RACECHECK_BUILD).
#   bash benchmarks/build_extension.sh [log-file]
# The device image points CC/CXX at a GCC whose libstdc++ is linked statically into the extension
# and clashes with torch's at run time (a crash formatting error messages): this builds with the
# system compilers instead (CAKE_CC / CAKE_CXX override them).
set -uo pipefail
cd "$(dirname "$0")/.."
log="${1:-/tmp/cake-build.log}"
CC="${CAKE_CC:-/usr/bin/gcc}" CXX="${CAKE_CXX:-/usr/bin/g++}" \
CAKE_CUDA_ARCHS="${CAKE_CUDA_ARCHS:-90a}" MAX_JOBS="${MAX_JOBS:-16}" \
  "${PYTHON:-python3}" -m pip install --no-build-isolation --no-deps -e . > "$log" 2>&1 \
  || { echo "build failed (${CAKE_NVCC_EXTRA:-default flags})"; tail -40 "$log"; exit 1; }
