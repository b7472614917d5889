// A process-wide override of which CUDA prefill kernel serves a call, for tests and benchmarks.
// Python sets it (torch_ops.set_prefill_kernel_override); until then it comes from the
// environment (CAKE_PREFILL_KERNEL, CAKE_PREFILL_VARIANT), parsed once, at first use. Either
// way it goes through the same validation, and a bad value raises ValueError naming its source.
#pragma once

#include <optional>
#include <string>

#include "prefill_kernel.h"

namespace cake {

// The pipeline shape of a portable kernel instance (see cuda/portable/prefill_variants.h).
struct PrefillPipeline {
  int stages;
  int k_tiles;
};

struct PrefillKernelOverride {
  // kPortable keeps Hopper GPUs on the portable kernel; kHopper requires the Hopper kernels (a
  // CUDA device that cannot run them raises) and otherwise chooses as the device does (the
  // 64-head kernel for its shapes, the small-heads kernel for the rest); kHopperSmall is a
  // synonym of kHopper (the family by the name of its small-heads kernel); nullopt: the device's
  // own choice.
  std::optional<PrefillKernel> kernel;
  // A compiled portable instance's pipeline for every CUDA call (which then runs the portable
  // kernel); nullopt: the preferred instance for the head tile and the device.
  std::optional<PrefillPipeline> variant;

  bool forces_portable() const { return kernel == PrefillKernel::kPortable || variant.has_value(); }
  bool requires_hopper() const { return kernel.has_value() && is_hopper_family(*kernel); }
};

// Validates an override given as values. `kernel` is "hopper", "portable", "hopper_small" (the
// same as "hopper") or nullopt; `variant` must be the pipeline of a compiled portable instance
// and excludes the Hopper kernels. Errors name `kernel_source` / `variant_source` (the Python
// argument or the environment variable).
PrefillKernelOverride make_prefill_kernel_override(const std::optional<std::string>& kernel,
                                                   const std::optional<PrefillPipeline>& variant,
                                                   const char* kernel_source = "kernel",
                                                   const char* variant_source = "variant");

// The environment's text form: CAKE_PREFILL_KERNEL = "hopper" | "portable" | "hopper_small",
// CAKE_PREFILL_VARIANT = "stages,k_tiles"; nullptr or "" means unset.
PrefillKernelOverride parse_prefill_kernel_override(const char* kernel_text, const char* variant_text);

// The override in force: the environment's, parsed on the first call, until one is set.
PrefillKernelOverride prefill_kernel_override();
void set_prefill_kernel_override(const PrefillKernelOverride& knobs);

}  // namespace cake
