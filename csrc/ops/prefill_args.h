// Argument validation for cake::sparse_mla_prefill, shared by the CPU and CUDA implementations.
// Everything the kernels may assume is checked here, before anything is launched.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "../format/nvfp4_format.h"

namespace cake {

// One candidate list: its [T, width] int32 indices, optional lengths, and the cache it reads.
struct CandidateList {
  at::Tensor cache;         // uint8 view, geometry below
  at::Tensor indices;       // [T, width] int32, contiguous (a [T, 1, width] input is viewed as 2-D)
  at::Tensor lengths;       // [>= T] int32 or undefined (every slot counts)
  nvfp4::CacheGeometry geometry;
  int64_t width = 0;        // topk of this list; 0 when the list is absent
  int64_t num_chunks() const { return (width + nvfp4::kChunkSize - 1) / nvfp4::kChunkSize; }
};

struct PrefillArgs {
  at::Tensor q;        // [T, H, 512] bf16
  at::Tensor output;   // [T, H, 512] bf16
  at::Tensor out_lse;  // [T, H] fp32
  at::Tensor sink;     // [>= H] fp32 or undefined
  CandidateList main;
  CandidateList extra;  // width 0 when absent
  int64_t num_tokens = 0;
  int64_t num_heads = 0;
  int64_t head_tiles = 1;  // resolved plan
  double sm_scale = 0.0;
  double lse_scale = 1.0;
};

// Validates every argument and resolves the head-tile plan when it is not given: the planner's
// choice for `num_sms`, capped at `max_head_tiles` (what the device's shared memory allows).
PrefillArgs check_prefill_args(const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& indices,
                               const at::Tensor& output, const at::Tensor& out_lse, double sm_scale,
                               const std::optional<at::Tensor>& topk_length,
                               const std::optional<at::Tensor>& attn_sink,
                               const std::optional<at::Tensor>& extra_kv_cache,
                               const std::optional<at::Tensor>& extra_indices,
                               const std::optional<at::Tensor>& extra_topk_length, double lse_scale,
                               std::optional<int64_t> head_tiles, int64_t num_sms, int64_t max_head_tiles = 4,
                               bool hopper_plan = false);

}  // namespace cake
