// Host side of the Hopper (sm_90a) attention kernel: its launch, for the prefill (one split) and
// the decode's split kernel. Which calls it serves: ../prefill_kernel_choice.h.
#pragma once

#include <cuda_runtime.h>

#include "../common/decode_params.h"
#include "prefill_hopper_layout.h"

namespace cake::cuda {

// Launches min(work items, max_ctas) persistent CTAs (items: tokens x head blocks x splits); the
// caller skips empty launches. With one split it writes output / out_lse, with several the
// partials in mid_out / mid_lse.
void launch_sparse_mla_attention_hopper(const DecodeParams& params, int max_ctas, cudaStream_t stream);

}  // namespace cake::cuda
