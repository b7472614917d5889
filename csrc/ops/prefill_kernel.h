// The prefill kernels a call can run, and their names in Python ("cpu", "portable", "hopper",
// "hopper_small").
// Plain C++: the planner, the kernel override and both op implementations share it.
#pragma once

#include <optional>
#include <string_view>

namespace cake {

enum class PrefillKernel {
  kCpu,       // the CPU kernel (one task per token)
  kPortable,  // the mma.sync CUDA kernel (sm_80 and up): one CTA per work item
  kHopper,    // the wgmma CUDA kernel (sm_90a): 64 heads per work item, a persistent grid
  // The small-heads wgmma kernel (sm_90a): units of 16 or 32 heads, a persistent grid; on
  // Hopper it serves every call the 64-head kernel does not (docs/hopper_small_kernel.md). For
  // planning it is the Hopper family (its table), with its own grid: as a family name (kernel
  // override or planner argument) "hopper_small" means the same as "hopper".
  kHopperSmall,
};

inline const char* prefill_kernel_name(PrefillKernel kernel) {
  switch (kernel) {
    case PrefillKernel::kCpu:
      return "cpu";
    case PrefillKernel::kPortable:
      return "portable";
    case PrefillKernel::kHopper:
      return "hopper";
    case PrefillKernel::kHopperSmall:
      return "hopper_small";
  }
  return "?";
}

// The Hopper family: the 64-head kernel and the small-heads kernel (persistent grids, the Hopper
// planner table; as an override or planner argument either name means the family).
inline bool is_hopper_family(PrefillKernel kernel) {
  return kernel == PrefillKernel::kHopper || kernel == PrefillKernel::kHopperSmall;
}

inline std::optional<PrefillKernel> prefill_kernel_from_name(std::string_view name) {
  for (PrefillKernel kernel :
       {PrefillKernel::kCpu, PrefillKernel::kPortable, PrefillKernel::kHopper, PrefillKernel::kHopperSmall}) {
    if (name == prefill_kernel_name(kernel)) return kernel;
  }
  return std::nullopt;
}

}  // namespace cake
