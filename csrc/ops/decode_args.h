// The inputs of cake::sparse_mla_decode in one struct, shared by its implementations: the
// attention inputs every op takes (attention_inputs.h, the same checks as the prefill's but for
// the decode's head counts and chunk limit), the split-K scratch and the plan, packed in one
// place (sparse_mla_decode_op below) and validated before anything runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "attention_inputs.h"
#include "decode_plan.h"
#include "prefill_plan.h"

namespace cake {

struct DecodeArgs : AttentionInputs {
  at::Tensor mid_out;  // [S, T, H, 512] fp32, S >= plan.num_splits; undefined when absent
  at::Tensor mid_lse;  // [S, T, H] fp32
  std::optional<int64_t> num_splits;  // as requested
  int64_t max_splits = kDefaultMaxSplits;
  std::optional<int64_t> head_tiles;  // as requested
  DecodePlan plan{};                  // filled in by validate_decode_args
};

// The tensor checks of the decode (max_splits, then the shared ones with its head counts and its
// chunk limit of 16 * max_splits), without the plan or the scratch: what the fake implementation
// also runs (`pointers` kWithoutData there).
void validate_decode_inputs(AttentionInputs& inputs, int64_t max_splits,
                            PointerChecks pointers = PointerChecks::kCheck);

// Checks every argument (ValueError naming it), resolves the plan for `target` (its SMs, head tiles
// up to its max_head_tiles, its split kernels' fewest chunks a split; the planner's, or the explicit
// head_tiles / num_splits checked) and checks the scratch against it: required when the plan has
// more than one split, and then with at least that many splits.
void validate_decode_args(DecodeArgs& args, const PrefillTarget& target);

// The scratch's checks against `args.plan` (validate_decode_args' last step): mid_out and mid_lse
// together, each on q's device, fp32, [S, T, H(, 512)], S at least the plan's splits, contiguous,
// mid_out 16-byte aligned (`pointers` kWithoutData: not that, for tensors without data); required when
// the plan splits.
void validate_decode_scratch(const DecodeArgs& args, PointerChecks pointers = PointerChecks::kCheck);

// The split counts a call's plan may have where the device is not known (the fake implementation,
// without an explicit num_splits): known when fewest == most.
struct DecodeSplitRange {
  int64_t fewest;
  int64_t most;
  bool known() const { return fewest == most; }
};
// From the chunk count, max_splits and T: at least ceil(chunks / 32) splits (32 chunks a split at
// most), at most min(max_splits, chunks); with T = 0 the planner's fewest.
DecodeSplitRange decode_split_range(const DecodeArgs& args);
// The same checks against a range: everything the op's checks would say for every count in it,
// and nothing where the answer depends on the count (S below the range's top, or no scratch while
// the range holds more than one count).
void validate_decode_scratch(const DecodeArgs& args, const DecodeSplitRange& splits, PointerChecks pointers);
// Their overlap checks alone: mid_out and mid_lse apart from each other and from every other tensor
// of the call (absent scratch passes); cake::check_call_apart runs them on their own too.
void check_scratch_apart(const DecodeArgs& args, PointerChecks pointers);

// The op's C++ signature, written once. Each dispatch key registers an instance whose `Run`
// validates the packed arguments for its device and runs its kernel.
template <void (*Run)(DecodeArgs&)>
void sparse_mla_decode_op(const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& indices,
                          const at::Tensor& output, const at::Tensor& out_lse, double sm_scale,
                          const std::optional<at::Tensor>& topk_length, const std::optional<at::Tensor>& attn_sink,
                          const std::optional<at::Tensor>& extra_kv_cache,
                          const std::optional<at::Tensor>& extra_indices,
                          const std::optional<at::Tensor>& extra_topk_length, const std::optional<at::Tensor>& mid_out,
                          const std::optional<at::Tensor>& mid_lse, double lse_scale,
                          std::optional<int64_t> num_splits, int64_t max_splits, std::optional<int64_t> head_tiles) {
  DecodeArgs args;
  pack_attention_inputs(args, q, kv_cache, indices, output, out_lse, sm_scale, topk_length, attn_sink, extra_kv_cache,
                        extra_indices, extra_topk_length, lse_scale);
  args.mid_out = mid_out.value_or(at::Tensor());
  args.mid_lse = mid_lse.value_or(at::Tensor());
  args.num_splits = num_splits;
  args.max_splits = max_splits;
  args.head_tiles = head_tiles;
  Run(args);
}

}  // namespace cake
