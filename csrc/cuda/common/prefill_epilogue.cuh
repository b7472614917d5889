// The end of a (token, head) row that both CUDA prefill kernels share: the sink folded in by
// finalize_softmax (shared with the CPU kernel), the output scale and base-2 LSE, and where the
// row's output and LSE go.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "../../common/softmax_finalize.h"
#include "../../format/nvfp4_format.h"
#include "online_softmax.cuh"
#include "prefill_params.h"

namespace cake::cuda {

constexpr float kLog2e = 1.4426950408889634f;

// The sink of head `head` in base 2 (0 without a sink), loaded ahead of finalize_row where its
// latency would otherwise sit on the epilogue's path.
__device__ __forceinline__ float row_sink2(const PrefillParams& params, int head) {
  return params.sink != nullptr ? __ldg(params.sink + head) * kLog2e : 0.0f;
}

// Output scale and base-2 LSE of a row from its reference, its total sums and its sink2.
__device__ __forceinline__ SoftmaxFinal finalize_row_with_sink(const PrefillParams& params, float sink2,
                                                               float row_max, const WeightSums& totals) {
  const float out_scale = finalize_softmax(row_max, totals.rounded, params.sink != nullptr, sink2).out_scale;
  const float lse2 = finalize_softmax(row_max, totals.exact, params.sink != nullptr, sink2).lse2;
  return {out_scale, lse2};
}
// The same, for head `head`.
__device__ __forceinline__ SoftmaxFinal finalize_row(const PrefillParams& params, int head, float row_max,
                                                     const WeightSums& totals) {
  return finalize_row_with_sink(params, row_sink2(params, head), row_max, totals);
}

// The 512 outputs of (token, head).
__device__ __forceinline__ __nv_bfloat16* output_row(const PrefillParams& params, int token, int head) {
  return params.output + (int64_t(token) * params.num_heads + head) * nvfp4::kHeadDim;
}

__device__ __forceinline__ void store_lse(const PrefillParams& params, int token, int head, float lse2) {
  params.out_lse[int64_t(token) * params.num_heads + head] = lse2 * params.lse_scale;
}

}  // namespace cake::cuda
