// Parameters of the CUDA decode (split-K): the attention's (PrefillParams: q, the lists, the
// outputs, the sink) plus the split count and the scratch, filled by the launcher from validated
// arguments (csrc/ops/decode_args.h). The split kernel and the merge kernel take the same struct.
#pragma once

#include "prefill_params.h"

namespace cake::cuda {

struct DecodeParams : PrefillParams {
  // Split s's partial of (token t, head h): mid_out[((s * num_tokens + t) * num_heads + h) * 512
  // ...] (normalised over the split) and mid_lse[(s * num_tokens + t) * num_heads + h] (base 2,
  // no sink, no lse_scale). nullptr with one split, which writes output and out_lse directly.
  float* mid_out;
  float* mid_lse;
  int num_splits;  // splits per (token, head block); chunks as in csrc/common/decode_splits.h
};

// A call over the whole lists (one split, no scratch: the kernel writes output and out_lse).
inline DecodeParams whole_list_params(const PrefillParams& params) {
  DecodeParams whole{};
  static_cast<PrefillParams&>(whole) = params;
  whole.num_splits = 1;
  return whole;
}

}  // namespace cake::cuda
