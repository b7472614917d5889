// The planner's view of a device (PrefillTarget): the kernel family whose table applies, the SM
// count and the largest head tile that fits. The op asks it for its tensors' device; Python's
// planner for a `device=` / `kernel=` / `num_sms=` request.
#pragma once

#include <c10/core/Device.h>

#include <optional>
#include <string>

#include "prefill_kernel_override.h"
#include "prefill_plan.h"

namespace cake {

// The CPU kernel: the portable table, one "SM" per intra-op thread, every head tile.
PrefillTarget cpu_prefill_target();

#if defined(CAKE_WITH_CUDA)
// Defined with the CUDA op (cuda/ops_cuda.cpp): the device's properties under `knobs`. A
// device index out of range raises ValueError naming device, as does kernel override "hopper"
// (or "hopper_small") on a device that cannot run the Hopper kernels.
PrefillTarget cuda_prefill_target(c10::DeviceIndex index, const PrefillKernelOverride& knobs);
// The current CUDA device, or -1 when there is none.
c10::DeviceIndex current_cuda_device_index();
#endif

// The target of `device` under the override in force (ValueError naming device for anything
// but the CPU and, in a CUDA build, a present CUDA device; "cuda" means the current one).
PrefillTarget prefill_target(c10::Device device);

// Python's planner keywords: `device` (a device string; nullopt: the current CUDA device when
// there is one, else the CPU), `kernel` ("hopper", "portable", "cpu", or "hopper_small", which
// means "hopper": the Hopper family, its small-heads kernel included; nullopt: the device's own)
// and `num_sms` (nullopt: the device's). An explicit kernel without a device describes that kernel family in general and
// then needs num_sms (except "cpu": the intra-op threads).
PrefillTarget resolve_prefill_target(const std::optional<std::string>& device, const std::optional<std::string>& kernel,
                                     std::optional<int64_t> num_sms);

}  // namespace cake
