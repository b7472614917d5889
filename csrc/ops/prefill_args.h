// The inputs of cake::sparse_mla_prefill in one struct, shared by the CPU and CUDA
// implementations: packed from the schema's arguments in one place (sparse_mla_prefill_op
// below), then validated (the checks shared with the decode, attention_inputs.h, plus the
// prefill's head counts and chunk limit), and the plan resolved, before anything is launched.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "attention_inputs.h"
#include "prefill_plan.h"

namespace cake {

struct PrefillArgs : AttentionInputs {
  std::optional<int64_t> head_tiles;  // as requested; the plan below holds the resolved value
  PrefillPlan plan{};                 // filled in by validate_prefill_args
};

// The tensor checks of the prefill (the shared ones with its head counts and chunk limit), without
// the plan: what the fake implementation also runs (`pointers` kWithoutData there).
void validate_prefill_inputs(AttentionInputs& inputs, PointerChecks pointers = PointerChecks::kCheck);

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
  pack_attention_inputs(args, q, kv_cache, indices, output, out_lse, sm_scale, topk_length, attn_sink, extra_kv_cache,
                        extra_indices, extra_topk_length, lse_scale);
  args.head_tiles = head_tiles;
  Run(args);
}

}  // namespace cake
