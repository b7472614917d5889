// The per-row arithmetic of the online softmax that the CUDA attention kernels use (base 2: the
// logits carry sm_scale * log2(e)). The portable kernel moves a row's reference on every new max,
// the Hopper kernels only on a large one (next_reference); each kernel decides how the threads
// holding a row exchange maxima and sums.
#pragma once

#include <cuda_bf16.h>

#include "ptx_primitives.cuh"

namespace cake::cuda {

// The Hopper kernels' lazy reference: a row's softmax reference moves only when a block's max
// exceeds it by more than this (log2): weights stay <= 256, bf16 rounding is scale-free, and the O
// rescale becomes rare. (The portable kernel moves it on every new max.)
constexpr float kLazyRescaleLog2 = 8.0f;

// The lazy reference after a block whose row max is `block_max` (-inf: all masked; NaN never
// moves it).
__device__ __forceinline__ float next_reference(float reference, float block_max) {
  return block_max > reference + kLazyRescaleLog2 ? block_max : reference;  // false while block_max == -inf
}

// A candidate's logit in base 2, or -inf when it is masked.
__device__ __forceinline__ float masked_logit2(float score, bool valid, float score_scale_log2) {
  return valid ? score * score_scale_log2 : -INFINITY;
}

// The value a row's weights are taken against: its max, or 0 while every candidate so far is
// masked (then every weight is exp2(-inf) = 0, where -inf - -inf would give NaN).
__device__ __forceinline__ float softmax_reference(float row_max) { return row_max == -INFINITY ? 0.0f : row_max; }

// Sums of a row's weights: of the bf16-rounded weights the MMA multiplies (they normalise the
// output, so it is consistent with what was multiplied) and of the fp32 weights (the LSE).
struct WeightSums {
  float rounded;
  float exact;
};

// The weight of `logit2` against `reference`, added to `sums`; returns the bf16-rounded weight.
__device__ __forceinline__ float add_weight(WeightSums& sums, float logit2, float reference) {
  const float weight = fast_exp2(logit2 - reference);
  sums.exact += weight;
  const float rounded = __bfloat162float(__float2bfloat16_rn(weight));
  sums.rounded += rounded;
  return rounded;
}

// The weights of two logits of one row against `reference`, their fp32 sum added to `exact_sum`;
// returns them as a bf16 pair (element 0 low). Flushes weights below 2^-126 to zero. Alone: for
// the 64-head Hopper kernel's development builds whose PV sums the rounded weights against a ones
// tile, or that divide O by the fp32 sum.
__device__ __forceinline__ uint32_t add_weight_pair_exact(float& exact_sum, float logit2_0, float logit2_1,
                                                          float reference) {
  const float weight0 = fast_exp2_ftz(logit2_0 - reference);
  const float weight1 = fast_exp2_ftz(logit2_1 - reference);
  exact_sum += weight0 + weight1;
  return pack_bf16x2(weight0, weight1);
}

// add_weight_pair_exact with the rounded weights' sum too. The rounded sum comes from the packed
// pair, so each weight is rounded once.
__device__ __forceinline__ uint32_t add_weight_pair(WeightSums& sums, float logit2_0, float logit2_1,
                                                    float reference) {
  const uint32_t packed = add_weight_pair_exact(sums.exact, logit2_0, logit2_1, reference);
  sums.rounded += __uint_as_float(packed << 16) + __uint_as_float(packed & 0xFFFF0000u);
  return packed;
}

// A row's running sums (`rounded`, `exact`) after its reference moved by log2(rescale) and a
// block's weights were added. (`rescale` by reference: by value, nvcc swaps one FMA's operands
// and the kernels' machine code is no longer the one they were measured with.)
__device__ __forceinline__ void rescale_add(float& rounded, float& exact, const float& rescale,
                                            const WeightSums& block) {
  rounded = rounded * rescale + block.rounded;
  exact = exact * rescale + block.exact;
}

}  // namespace cake::cuda
