// Host side of the small-heads Hopper (sm_90a) prefill kernel: its launch. Which calls it serves:
// ../prefill_kernel_choice.h.
#pragma once

#include <cuda_runtime.h>

#include "../common/prefill_params.h"
#include "prefill_small_layout.h"

namespace cake::cuda {

// Launches min(units, max_ctas) persistent CTAs, a unit being a token and group_heads_for(H)
// heads (params.num_head_blocks is ignored: the launcher sets it to the units per token). The
// caller skips empty launches.
void launch_sparse_mla_prefill_hopper_small(const PrefillParams& params, int max_ctas, cudaStream_t stream);

// CTAs a call with `num_tokens` tokens and `num_heads` heads launches on `num_sms` SMs.
inline long long hopper_small_prefill_grid(long long num_tokens, long long num_heads, long long num_sms) {
  const long long units = num_tokens * (num_heads / hopper_small::group_heads_for(num_heads));
  return units < num_sms ? units : num_sms;
}

}  // namespace cake::cuda
