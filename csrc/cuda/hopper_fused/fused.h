// Host side of the fused 64-head Hopper (sm_90a) kernel, a development kernel: built into the
// library only with -DCAKE_HOPPER_FUSED, where the 64-head kernel's whole-list launches (the
// prefill's) run it instead (../hopper/prefill_hopper.cu).
#pragma once

#include <cuda_runtime.h>

#include "../common/decode_params.h"
#include "fused_layout.h"

namespace cake::cuda {

// min(items, max_ctas) persistent CTAs over the (token, 64 heads) items of `params` (whole lists:
// num_splits 1; num_head_blocks = num_heads / 64), writing output and out_lse.
void launch_sparse_mla_prefill_hopper_fused(const DecodeParams& params, int max_ctas, cudaStream_t stream);

}  // namespace cake::cuda
