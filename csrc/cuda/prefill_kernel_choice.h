// Which CUDA prefill kernel serves a call. Plain C++ (no CUDA headers): the op, the planner and
// the Python module (torch_ops._C.prefill_kernel_for, used by tests) ask the same functions.
#pragma once

#include "../ops/prefill_kernel.h"
#include "../ops/prefill_kernel_override.h"
#include "hopper/prefill_hopper_layout.h"
#include "hopper_small/prefill_small_layout.h"
#include "portable/prefill_variants.h"

namespace cake::cuda {

// True when this build contains sm_90a code (setup.py defines CAKE_WITH_SM90A then).
constexpr bool hopper_prefill_compiled() {
#if defined(CAKE_WITH_SM90A)
  return true;
#else
  return false;
#endif
}

// Whether this device runs the Hopper kernel at all: an sm_90a build, compute capability 9.x, its
// shared memory (and the small-heads kernel's, when the override asks for that one), and no
// override keeping it on the portable kernel (the planner then uses the Hopper kernel's table).
inline bool device_runs_hopper_prefill(int cc_major, long long smem_per_block,
                                       const PrefillKernelOverride& knobs) {
  return hopper_prefill_compiled() && cc_major == 9 && smem_per_block >= HopperPrefillLayout::kSmemBytes &&
         (!knobs.asks_small_heads() || smem_per_block >= HopperSmallPrefillLayout::kMaxSmemBytes) &&
         !knobs.forces_portable();
}

// The shapes it serves: 64 heads per work item (head_tiles 4).
inline bool hopper_prefill_serves(long long num_heads, long long head_tiles) {
  return head_tiles * nvfp4::kHeadsPerTile == HopperPrefillLayout::kHeads && num_heads % HopperPrefillLayout::kHeads == 0;
}

// The small-heads kernel (under the kernel override "hopper_small") serves every call the 64-head
// kernel does not: 16, 32 or 48 heads a unit (prefill_small_layout.h: group_heads_for), several
// units per token above 48 heads, whatever head_tiles says.
inline bool hopper_small_prefill_serves(long long num_heads, long long head_tiles) {
  return !hopper_prefill_serves(num_heads, head_tiles);
}

// Every call the Hopper kernel does not serve runs the portable kernel, or under the override
// "hopper_small" the small-heads kernel.
inline PrefillKernel select_prefill_kernel(int cc_major, long long smem_per_block, long long num_heads,
                                           long long head_tiles, const PrefillKernelOverride& knobs) {
  if (!device_runs_hopper_prefill(cc_major, smem_per_block, knobs)) return PrefillKernel::kPortable;
  if (hopper_prefill_serves(num_heads, head_tiles)) return PrefillKernel::kHopper;
  return knobs.asks_small_heads() && hopper_small_prefill_serves(num_heads, head_tiles) ? PrefillKernel::kHopperSmall
                                                                                      : PrefillKernel::kPortable;
}

// Whether some compiled portable instance has this pipeline (what a variant override may ask).
inline bool prefill_pipeline_compiled(int stages, int k_tiles) {
  for (const PrefillVariant& variant : kPrefillVariants) {
    if (variant.stages == stages && variant.k_tiles == k_tiles) return true;
  }
  return false;
}

}  // namespace cake::cuda
