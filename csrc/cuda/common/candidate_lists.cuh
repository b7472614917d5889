// Per-token candidate-list helpers shared by the CUDA prefill kernels: the clamped length of a
// list and the slot of one candidate (-1 when masked: past the length, negative, or beyond the
// cache). Masked candidates are never read.
#pragma once

#include <cstdint>

#include "prefill_params.h"

namespace cake::cuda {

// The token's valid prefix of one list: clamp(lengths[t], 0, width), or width.
__device__ __forceinline__ int list_length(const CandidateListParams& list, int token) {
  if (list.width == 0) return 0;
  if (list.lengths == nullptr) return list.width;
  const int length = __ldg(list.lengths + token);
  return length < 0 ? 0 : (length > list.width ? list.width : length);
}

// Slot of candidate `position` of a list, or -1 when it is past the length or out of range.
__device__ __forceinline__ int64_t candidate_slot(const CandidateListParams& list, int token, int length,
                                                  int position) {
  if (position >= length) return -1;
  const int64_t slot = __ldg(list.indices + int64_t(token) * list.width + position);
  return (slot >= 0 && slot < list.num_slots) ? slot : -1;
}

}  // namespace cake::cuda
