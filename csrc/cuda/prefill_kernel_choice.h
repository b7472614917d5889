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

// Whether this device runs the Hopper kernel at all: an sm_90a build, compute capability 9.x, its
// shared memory, and no knob forcing the portable kernel. (The planner then uses its table.)
inline bool device_runs_hopper_prefill(int cc_major, long long smem_per_block) {
  return hopper_prefill_compiled() && cc_major == 9 && smem_per_block >= HopperPrefillLayout::kSmemBytes &&
         !portable_prefill_forced();
}

// The shapes it serves: 64 heads per work item (head_tiles 4).
inline bool hopper_prefill_serves(long long num_heads, long long head_tiles) {
  return head_tiles == 4 && num_heads % HopperPrefillLayout::kHeads == 0;
}

// Every call the Hopper kernel does not serve runs the portable kernel.
inline PrefillKernel select_prefill_kernel(int cc_major, long long smem_per_block, long long num_heads,
                                           long long head_tiles) {
  return device_runs_hopper_prefill(cc_major, smem_per_block) && hopper_prefill_serves(num_heads, head_tiles)
             ? PrefillKernel::kHopper
             : PrefillKernel::kPortable;
}

}  // namespace cake::cuda
