// The end of the softmax, shared by the CPU and CUDA kernels: fold the optional attention sink
// (a candidate with logit `sink` and value zero) into the running max `row_max` and sum
// `row_sum` of the candidates (base 2), and return the output scale and the base-2 LSE.
#pragma once

#include <cmath>

#include "../format/nvfp4_format.h"

namespace cake {

struct SoftmaxFinal {
  float out_scale;  // multiply the unnormalised sum of p * V by this
  float lse2;       // base-2 log-sum-exp (before lse_scale)
};

// row_sum == 0 means no valid candidate. sink2 is the sink in base 2 (sink * log2(e)).
CAKE_HOST_DEVICE SoftmaxFinal finalize_softmax(float row_max, float row_sum, bool has_sink, float sink2) {
  const bool has_rows = row_sum > 0.0f;
  if (!has_sink) {
    if (!has_rows) return {0.0f, -INFINITY};
    return {1.0f / row_sum, row_max + log2f(row_sum)};
  }
  const float top = has_rows ? fmaxf(row_max, sink2) : sink2;
  if (top == INFINITY || top == -INFINITY) {
    // sink = +inf takes all the weight; sink = -inf with no candidate leaves nothing.
    if (top == INFINITY || !has_rows) return {0.0f, top};
    return {1.0f / row_sum, row_max + log2f(row_sum)};
  }
  // Every exponent is <= 0, so nothing overflows however large the sink.
  const float kept = has_rows ? exp2f(row_max - top) : 0.0f;
  const float denominator = row_sum * kept + exp2f(sink2 - top);
  return {kept / denominator, top + log2f(denominator)};
}

}  // namespace cake
