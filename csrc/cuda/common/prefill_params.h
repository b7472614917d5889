// Parameters of the CUDA prefill kernels (portable and Hopper): plain pointers, strides and
// scalars, filled by the launcher from validated arguments (csrc/ops/prefill_args.h).
#pragma once

#include <cuda_bf16.h>
#include <cstdint>

#include "../../format/nvfp4_format.h"

namespace cake::cuda {

struct CandidateListParams {
  const uint8_t* cache;     // cache view base (page 0, row 0); 16-byte aligned
  const int32_t* indices;   // [num_tokens, width] slots; negative or >= num_slots masks
  const int32_t* lengths;   // [>= num_tokens] valid leading slots, or nullptr (all `width`)
  int64_t page_size;        // tokens per page
  nvfp4::SlotPageDivisor page_divisor;  // slot_page_divisor(page_size): a slot's page without a division
  int64_t page_stride;      // bytes between pages (multiple of 16)
  int64_t num_slots;        // num_pages * page_size
  int width;                // topk of this list; 0 when the list is absent
};

struct PrefillParams {
  const __nv_bfloat16* q;   // [num_tokens, num_heads, 512]
  __nv_bfloat16* output;    // [num_tokens, num_heads, 512]
  float* out_lse;           // [num_tokens, num_heads]
  const float* sink;        // [>= num_heads] natural-log sink logits, or nullptr
  CandidateListParams lists[2];  // main, extra
  int num_tokens;
  int num_heads;
  int num_head_blocks;      // num_heads / (16 * head_tiles)
  float score_scale_log2;   // sm_scale * log2(e): logits in base 2
  float lse_scale;
};

// The same call seen from head `first_head` on: q, the output, the LSE and the sink start there,
// and num_heads stays the row stride (a kernel then runs a range of heads given apart).
inline PrefillParams params_from_head(const PrefillParams& params, int first_head) {
  PrefillParams shifted = params;
  shifted.q += int64_t(first_head) * nvfp4::kHeadDim;
  shifted.output += int64_t(first_head) * nvfp4::kHeadDim;
  shifted.out_lse += first_head;
  if (shifted.sink != nullptr) shifted.sink += first_head;
  return shifted;
}

}  // namespace cake::cuda
