// Host side of the Hopper (sm_90a) prefill kernel: whether it serves a call, and its launch.
#pragma once

#include <cuda_runtime.h>

#include "../prefill/prefill_params.h"
#include "prefill_hopper_layout.h"

namespace cake::cuda {

// Launches min(work items, num_sms) persistent CTAs; the caller skips empty launches.
void launch_sparse_mla_prefill_hopper(const PrefillParams& params, int num_sms, cudaStream_t stream);

}  // namespace cake::cuda
