// Host side of the small-heads Hopper (sm_90a) kernel: its launches, the prefill's and the
// decode's split form. Which calls they serve: ../prefill_kernel_choice.h.
#pragma once

#include <cuda_runtime.h>

#include "../common/decode_params.h"
#include "prefill_small_layout.h"

namespace cake::cuda {

// Launches min(units, max_ctas) persistent CTAs over heads 0 .. num_heads_run - 1 of `params`
// (params.num_heads is the row stride of q, the output and the LSE, and may be larger: the
// pointers then start at a later head), a unit being a token and group_heads_for(num_heads_run)
// heads (params.num_head_blocks is ignored: the launcher sets it to the units per token). The
// caller skips empty launches.
void launch_sparse_mla_prefill_hopper_small(const PrefillParams& params, int num_heads_run, int max_ctas,
                                            cudaStream_t stream);

// The decode's split units over every head of `params`: a token, decode_unit_heads(num_heads,
// head_tiles) heads (32 where that divides H and head_tiles >= 2, else 16; where H is not a
// multiple of 16, H = 8, 24, ..., the last unit's rows past head H - 1 are padding: zero Q,
// nothing stored) and one of params.num_splits splits, each writing its partial into
// params.mid_out / mid_lse for the merge (with one split, the output and out_lse, sink included,
// and no scratch: 16-head units only, H = 8, 24, ..., 120, since the prefill's launches take the
// other head counts); min(units, max_ctas) persistent CTAs (params.num_head_blocks is ignored).
// The caller skips empty launches.
void launch_sparse_mla_decode_hopper_small(const DecodeParams& params, int head_tiles, int max_ctas,
                                           cudaStream_t stream);

}  // namespace cake::cuda
