// The end of the softmax, shared by the CPU and CUDA kernels: fold the optional attention sink
// (a candidate with logit `sink` and value zero) into the running max `row_max` and sum
// `row_sum` of the candidates (base 2), and return the output scale and the base-2 LSE.
//
// Non-finite values (the rule every kernel follows, and torch_ops.reference defines):
// - a row whose scores contain NaN or +inf gets NaN output and NaN LSE. The kernels take the max
//   with fmaxf / std::max, which drop NaN, so the max alone cannot tell; but the weight of a NaN
//   score (and of a +inf score, exp2(inf - inf)) is NaN, so the sum is NaN, and that is tested;
// - a non-finite sm_scale makes every score NaN (score_scale_or_nan), so every row with a
//   candidate is NaN;
// - a row with no candidate (or only -inf scores, whose weights are all zero) has nothing to
//   poison it: out_scale 0 and -inf, or the sink's own LSE (NaN only if the sink itself is NaN).
//   The kernels multiply their sum of weights times values by out_scale, so a dim where a
//   zero-weight candidate's value is infinite (0 * inf) stays NaN, as the contract says.
#pragma once

#include <cmath>

#include "../format/nvfp4_format.h"

namespace cake {

struct SoftmaxFinal {
  float out_scale;  // multiply the unnormalised sum of p * V by this
  float lse2;       // base-2 log-sum-exp (before lse_scale)
};

// The factor the kernels multiply raw q.k scores by (sm_scale * log2(e)), or NaN when it is not
// finite: an infinite scale has no meaningful softmax, and NaN makes every score say so.
CAKE_HOST_DEVICE float score_scale_or_nan(float scale_log2) {
  const bool finite = (nvfp4::float_to_bits(scale_log2) & 0x7F800000u) != 0x7F800000u;
  return finite ? scale_log2 : nvfp4::bits_to_float(0x7FC00000u);
}

// row_sum == 0 means no valid candidate (or only -inf scores); a NaN row_sum or row_max means a
// NaN or +inf score. sink2 is the sink in base 2 (sink * log2(e)).
CAKE_HOST_DEVICE SoftmaxFinal finalize_softmax(float row_max, float row_sum, bool has_sink, float sink2) {
  if (row_sum != row_sum || row_max != row_max) {
    const float nan = nvfp4::bits_to_float(0x7FC00000u);
    return {nan, nan};
  }
  if (!(row_sum > 0.0f)) return {0.0f, has_sink ? sink2 : -INFINITY};  // empty: zeros
  // From here on row_max is finite (the weights were taken against it and summed to > 0).
  if (!has_sink || sink2 == -INFINITY) return {1.0f / row_sum, row_max + log2f(row_sum)};  // -inf: no sink
  if (sink2 != sink2) return {sink2, sink2};     // a NaN sink poisons the row
  if (sink2 == INFINITY) return {0.0f, sink2};   // it takes all the weight
  const float top = fmaxf(row_max, sink2);
  // Every exponent is <= 0, so nothing overflows however large the sink.
  const float kept = exp2f(row_max - top);
  const float denominator = row_sum * kept + exp2f(sink2 - top);
  return {kept / denominator, top + log2f(denominator)};
}

}  // namespace cake
