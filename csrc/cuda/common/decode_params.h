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
  // C / num_splits and C % num_splits, C = both lists' chunks by their widths: a split's chunk
  // range in 32 bits (decode_split_first_chunk_u32).
  int split_chunks_quotient;
  int split_chunks_remainder;
};

// num_splits and the two constants of its chunk ranges, from the lists' widths already in `params`.
inline void set_decode_splits(DecodeParams& params, int num_splits) {
  const int chunks = int(nvfp4::list_chunks(params.lists[0].width) + nvfp4::list_chunks(params.lists[1].width));
  params.num_splits = num_splits;
  params.split_chunks_quotient = chunks / num_splits;
  params.split_chunks_remainder = chunks % num_splits;
}
// The chunks of the largest split: floor(C / n) or ceil(C / n) each (csrc/common/decode_splits.h).
inline int largest_split_chunks(const DecodeParams& params) {
  return params.split_chunks_quotient + (params.split_chunks_remainder > 0 ? 1 : 0);
}

// A call over the whole lists (one split, no scratch: the kernel writes output and out_lse).
inline DecodeParams whole_list_params(const PrefillParams& params) {
  DecodeParams whole{};
  static_cast<PrefillParams&>(whole) = params;
  set_decode_splits(whole, 1);
  return whole;
}

}  // namespace cake::cuda
