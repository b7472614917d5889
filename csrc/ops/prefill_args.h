// The inputs of cake::sparse_mla_prefill in one struct, shared by the CPU and CUDA
// implementations: packed from the schema's arguments in one place (sparse_mla_prefill_op
// below), then validated, and the plan resolved, before anything is launched.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "../format/nvfp4_format.h"
#include "prefill_plan.h"

namespace cake {

// One candidate list: its [T, width] int32 indices, optional lengths, and the cache it reads.
struct CandidateList {
  at::Tensor cache;         // uint8 view, geometry below; undefined when the list is absent
  at::Tensor indices;       // [T, width] int32, contiguous (a [T, 1, width] input is viewed as 2-D)
  at::Tensor lengths;       // [>= T] int32 or undefined (every slot counts)
  nvfp4::CacheGeometry geometry{};
  int64_t width = 0;        // topk of this list; 0 when the list is absent
  int64_t num_chunks() const { return (width + nvfp4::kChunkSize - 1) / nvfp4::kChunkSize; }
};

struct PrefillArgs {
  // The op's arguments (schema in registration.cpp); optional tensors are undefined when absent.
  at::Tensor q;        // [T, H, 512] bf16
  at::Tensor output;   // [T, H, 512] bf16
  at::Tensor out_lse;  // [T, H] fp32
  at::Tensor sink;     // [>= H] fp32 or undefined
  CandidateList main;
  CandidateList extra;  // width 0 when absent
  double sm_scale = 0.0;
  double lse_scale = 1.0;
  std::optional<int64_t> head_tiles;  // as requested; the plan below holds the resolved value

  // Filled in by validate_prefill_args.
  int64_t num_tokens = 0;
  int64_t num_heads = 0;
  PrefillPlan plan{};
};

// Checks every argument (ValueError naming it) and resolves the plan for `target` (the
// planner's choice, or the explicit head_tiles checked against the choices and the device).
void validate_prefill_args(PrefillArgs& args, const PrefillTarget& target);

// The op's C++ signature, written once. Each dispatch key registers an instance whose `Run`
// validates the packed arguments for its device and launches its kernel.
template <void (*Run)(PrefillArgs&)>
void sparse_mla_prefill_op(const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& indices,
                           const at::Tensor& output, const at::Tensor& out_lse, double sm_scale,
                           const std::optional<at::Tensor>& topk_length, const std::optional<at::Tensor>& attn_sink,
                           const std::optional<at::Tensor>& extra_kv_cache,
                           const std::optional<at::Tensor>& extra_indices,
                           const std::optional<at::Tensor>& extra_topk_length, double lse_scale,
                           std::optional<int64_t> head_tiles) {
  PrefillArgs args;
  args.q = q;
  args.output = output;
  args.out_lse = out_lse;
  args.sink = attn_sink.value_or(at::Tensor());
  args.main.cache = kv_cache;
  args.main.indices = indices;
  args.main.lengths = topk_length.value_or(at::Tensor());
  args.extra.cache = extra_kv_cache.value_or(at::Tensor());
  args.extra.indices = extra_indices.value_or(at::Tensor());
  args.extra.lengths = extra_topk_length.value_or(at::Tensor());
  args.sm_scale = sm_scale;
  args.lse_scale = lse_scale;
  args.head_tiles = head_tiles;
  Run(args);
}

}  // namespace cake
