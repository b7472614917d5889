// Host side of the small-heads Hopper (sm_90a) prefill kernel: its launch. Which calls it serves:
// ../prefill_kernel_choice.h.
#pragma once

#include <cuda_runtime.h>

#include "../common/prefill_params.h"
#include "prefill_small_layout.h"

namespace cake::cuda {

// Launches min(units, max_ctas) persistent CTAs over heads 0 .. num_heads_run - 1 of `params`
// (params.num_heads is the row stride of q, the output and the LSE, and may be larger: the
// pointers then start at a later head), a unit being a token and group_heads_for(num_heads_run)
// heads (params.num_head_blocks is ignored: the launcher sets it to the units per token). The
// caller skips empty launches.
void launch_sparse_mla_prefill_hopper_small(const PrefillParams& params, int num_heads_run, int max_ctas,
                                            cudaStream_t stream);

}  // namespace cake::cuda
