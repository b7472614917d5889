// The end of a (token, head) row of one decode split, for the CUDA split kernels: the split's
// partial (csrc/common/decode_splits.h, the softmax end without the sink) and where it goes in
// the scratch. The merge (decode_merge.cu) folds the partials and the sink into the output.
#pragma once

#include <cstdint>

#include "../../common/decode_splits.h"
#include "../../format/nvfp4_format.h"
#include "decode_params.h"
#include "online_softmax.cuh"

namespace cake::cuda {

// Output scale (of the bf16-rounded weights the MMA used) and base-2 LSE (of the fp32 weights) of
// a split's row: {0, -inf} when the split holds nothing for it, {NaN, NaN} when poisoned.
__device__ __forceinline__ SoftmaxFinal finalize_split_row(float row_max, const WeightSums& totals) {
  return {finalize_split_partial(row_max, totals.rounded).out_scale, finalize_split_partial(row_max, totals.exact).lse2};
}

// mid_lse index of (split, token, head); mid_out's row starts 512 floats times this in.
__device__ __forceinline__ int64_t split_row_index(const DecodeParams& params, int split, int token, int head) {
  return (int64_t(split) * params.num_tokens + token) * params.num_heads + head;
}

__device__ __forceinline__ float* split_output_row(const DecodeParams& params, int split, int token, int head) {
  return params.mid_out + split_row_index(params, split, token, head) * nvfp4::kHeadDim;
}

__device__ __forceinline__ void store_split_lse(const DecodeParams& params, int split, int token, int head, float lse2) {
  params.mid_lse[split_row_index(params, split, token, head)] = lse2;
}

}  // namespace cake::cuda
