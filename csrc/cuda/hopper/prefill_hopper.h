// Host side of the Hopper (sm_90a) prefill kernel: its launch. Which calls it serves:
// ../prefill_kernel_choice.h.
#pragma once

#include <cuda_runtime.h>

#include "../common/prefill_params.h"
#include "prefill_hopper_layout.h"

namespace cake::cuda {

// Launches min(work items, num_sms) persistent CTAs; the caller skips empty launches.
void launch_sparse_mla_prefill_hopper(const PrefillParams& params, int num_sms, cudaStream_t stream);

}  // namespace cake::cuda
