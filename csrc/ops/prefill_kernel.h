// The prefill kernels a call can run, and their names in Python ("cpu", "portable", "hopper").
// Plain C++: the planner, the kernel override and both op implementations share it.
#pragma once

#include <optional>
#include <string_view>

namespace cake {

enum class PrefillKernel {
  kCpu,       // the CPU kernel (one task per token)
  kPortable,  // the mma.sync CUDA kernel (sm_80 and up): one CTA per work item
  kHopper,    // the wgmma CUDA kernel (sm_90a): 64 heads per work item, a persistent grid
};

inline const char* prefill_kernel_name(PrefillKernel kernel) {
  switch (kernel) {
    case PrefillKernel::kCpu:
      return "cpu";
    case PrefillKernel::kPortable:
      return "portable";
    case PrefillKernel::kHopper:
      return "hopper";
  }
  return "?";
}

inline std::optional<PrefillKernel> prefill_kernel_from_name(std::string_view name) {
  for (PrefillKernel kernel : {PrefillKernel::kCpu, PrefillKernel::kPortable, PrefillKernel::kHopper}) {
    if (name == prefill_kernel_name(kernel)) return kernel;
  }
  return std::nullopt;
}

}  // namespace cake
