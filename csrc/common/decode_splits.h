// How the decode splits a token's candidates among CTAs, and the split-K softmax pieces, shared
// by the CPU kernel and the CUDA kernels: host and device.
//
// A token's candidates form one list of chunks of 64 positions: the main list's
// ceil(topk / 64) chunks, then the extra list's ceil(extra_topk / 64) (each list rounded up on
// its own, so a chunk never spans both lists). Split s of n covers chunks
// [s * C / n, (s + 1) * C / n) (integer division, C chunks in all): every split gets
// floor(C / n) or ceil(C / n) chunks, none is empty when n <= C, and together they cover every
// chunk once, in order.
//
// Each split computes a partial over its own valid candidates (base 2, without the sink):
// out_s = sum_c exp2(z_c - lse_s) * K_c and lse_s = log2(sum_c exp2(z_c)), in fp32; an empty
// split (no valid candidate, or only -inf logits) gives zeros and -inf (NaN in a dim where a
// zero-weight value is infinite), a poisoned one (a NaN or +inf logit) NaN and NaN. The merge
// treats the splits as candidates with logit lse_s and value out_s and ends like any softmax
// (finalize_softmax: the sink, the non-finite rules).
#pragma once

#include <cstdint>

#include "softmax_finalize.h"

namespace cake {

// The list positions split `split` of `num_splits` covers: [main_begin, main_end) of the main
// list and [extra_begin, extra_end) of the extra list (ends past a list's width or a token's
// length are clamped by the reader).
struct DecodeSplitPositions {
  int64_t main_begin, main_end, extra_begin, extra_end;
};

CAKE_HOST_DEVICE int64_t decode_split_first_chunk(int64_t split, int64_t num_splits, int64_t num_chunks) {
  return split * num_chunks / num_splits;
}

// The same first chunk in 32 bits, from C / n and C % n (launch constants): s * C / n is
// s * (C / n) + s * (C % n) / n exactly, and s * (C % n) < n * n <= 2^32 for the n <= 65535
// the CUDA decode allows. The Hopper kernels' split seeks use it (unit_chunks in
// csrc/cuda/common/candidate_lists.cuh): each 64-bit division is a call of ~100 instructions,
// run once by a short split.
CAKE_HOST_DEVICE uint32_t decode_split_first_chunk_u32(uint32_t split, uint32_t num_splits, uint32_t chunks_quotient,
                                                       uint32_t chunks_remainder) {
  return split * chunks_quotient + split * chunks_remainder / num_splits;
}

CAKE_HOST_DEVICE DecodeSplitPositions decode_split_positions(int64_t split, int64_t num_splits, int64_t main_chunks,
                                                            int64_t extra_chunks) {
  const int64_t num_chunks = main_chunks + extra_chunks;
  const int64_t first = decode_split_first_chunk(split, num_splits, num_chunks);
  const int64_t last = decode_split_first_chunk(split + 1, num_splits, num_chunks);
  const int64_t main_first = first < main_chunks ? first : main_chunks;
  const int64_t main_last = last < main_chunks ? last : main_chunks;
  const int64_t extra_first = first > main_chunks ? first - main_chunks : 0;
  const int64_t extra_last = last > main_chunks ? last - main_chunks : 0;
  return {main_first * nvfp4::kChunkSize, main_last * nvfp4::kChunkSize, extra_first * nvfp4::kChunkSize,
          extra_last * nvfp4::kChunkSize};
}

// A split's partial from its running max and weight sum (as the kernels keep them for a row):
// out_scale normalises the split's weighted sum, lse2 is its base-2 LSE; {0, -inf} when empty,
// {NaN, NaN} when poisoned. The same end as a row without a sink.
CAKE_HOST_DEVICE SoftmaxFinal finalize_split_partial(float row_max, float row_sum) {
  return finalize_softmax(row_max, row_sum, /*has_sink=*/false, 0.0f);
}

// The merge weighs split s by exp2(lse_s - reference), with reference the largest partial LSE
// (fmaxf drops NaN; a NaN lse_s makes its weight, and so the sum, NaN), or 0 when every split
// is empty (all weights are then exp2(-inf) = 0, an empty row).
CAKE_HOST_DEVICE float decode_merge_reference(float max_partial_lse) {
  return max_partial_lse == -INFINITY ? 0.0f : max_partial_lse;
}

}  // namespace cake
