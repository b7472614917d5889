// Which CUDA prefill kernel serves a call. Plain C++ (no CUDA headers): the op and the Python
// module (torch_ops._C.prefill_kernel_for, used by tests and benchmarks) ask the same function.
#pragma once

#include <cstdlib>
#include <cstring>

#include "hopper/prefill_hopper_layout.h"

namespace cake::cuda {

enum class PrefillKernel { kPortable, kHopper };

// True when this build contains sm_90a code (setup.py defines CAKE_WITH_SM90A then).
constexpr bool hopper_prefill_compiled() {
#if defined(CAKE_WITH_SM90A)
  return true;
#else
  return false;
#endif
}

// Test and benchmark knobs, read on every call: CAKE_PREFILL_KERNEL=portable keeps Hopper GPUs on
// the portable kernel; CAKE_PREFILL_VARIANT="stages,k_tiles" picks a portable instance (and so
// implies the portable kernel).
inline bool portable_prefill_forced() {
  const char* kernel = std::getenv("CAKE_PREFILL_KERNEL");
  return std::getenv("CAKE_PREFILL_VARIANT") != nullptr || (kernel != nullptr && std::strcmp(kernel, "portable") == 0);
}

// The Hopper kernel serves compute capability 9.x with 64 heads per CTA (head_tiles 4); every
// other call runs the portable kernel.
inline PrefillKernel select_prefill_kernel(int cc_major, long long smem_per_block, long long num_heads,
                                           long long head_tiles) {
  const bool hopper = hopper_prefill_compiled() && cc_major == 9 && head_tiles == 4 &&
                      num_heads % HopperPrefillLayout::kHeads == 0 &&
                      smem_per_block >= HopperPrefillLayout::kSmemBytes && !portable_prefill_forced();
  return hopper ? PrefillKernel::kHopper : PrefillKernel::kPortable;
}

// Whether 4-tile calls on this device run the Hopper kernel (the planner then uses its table).
inline bool device_runs_hopper_prefill(int cc_major, long long smem_per_block) {
  return select_prefill_kernel(cc_major, smem_per_block, HopperPrefillLayout::kHeads, 4) == PrefillKernel::kHopper;
}

}  // namespace cake::cuda
