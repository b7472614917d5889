#include "prefill_args.h"

#include <c10/util/Exception.h>

#include "cache_view.h"
#include "prefill_plan.h"

namespace cake {
namespace {

void check_device(const at::Tensor& tensor, const at::Tensor& q, const char* name) {
  TORCH_CHECK_VALUE(tensor.device() == q.device(), name, ": expected a tensor on ", q.device(), " (the device of q), got ",
                    tensor.device());
}

// [T, width] or [T, 1, width] int32 -> contiguous 2-D view.
at::Tensor check_indices(const at::Tensor& indices, int64_t num_tokens, const char* name) {
  TORCH_CHECK_VALUE(indices.scalar_type() == at::kInt, name, ": expected dtype int32, got ", indices.scalar_type());
  TORCH_CHECK_VALUE(indices.dim() == 2 || (indices.dim() == 3 && indices.size(1) == 1), name,
                    ": expected shape [T, topk] or [T, 1, topk], got ", indices.sizes());
  TORCH_CHECK_VALUE(indices.size(0) == num_tokens, name, ": expected ", num_tokens, " rows (T of q), got ",
                    indices.size(0));
  TORCH_CHECK_VALUE(indices.size(-1) >= 1, name, ": expected topk >= 1, got ", indices.size(-1));
  TORCH_CHECK_VALUE(indices.is_contiguous(), name, ": expected a contiguous tensor");
  return indices.view({num_tokens, indices.size(-1)});
}

void check_lengths(const at::Tensor& lengths, int64_t num_tokens, const char* name) {
  TORCH_CHECK_VALUE(lengths.scalar_type() == at::kInt, name, ": expected dtype int32, got ", lengths.scalar_type());
  TORCH_CHECK_VALUE(lengths.dim() == 1, name, ": expected a 1-D tensor, got shape ", lengths.sizes());
  TORCH_CHECK_VALUE(lengths.size(0) >= num_tokens, name, ": expected at least ", num_tokens, " entries (T of q), got ",
                    lengths.size(0));
  TORCH_CHECK_VALUE(lengths.is_contiguous(), name, ": expected a contiguous tensor");
}

}  // namespace

PrefillArgs check_prefill_args(const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& indices,
                               const at::Tensor& output, const at::Tensor& out_lse, double sm_scale,
                               const std::optional<at::Tensor>& topk_length,
                               const std::optional<at::Tensor>& attn_sink,
                               const std::optional<at::Tensor>& extra_kv_cache,
                               const std::optional<at::Tensor>& extra_indices,
                               const std::optional<at::Tensor>& extra_topk_length, double lse_scale,
                               std::optional<int64_t> head_tiles, int64_t num_sms, int64_t max_head_tiles,
                               bool hopper_plan) {
  PrefillArgs args;
  // q, output, out_lse.
  TORCH_CHECK_VALUE(q.dim() == 3 && q.size(2) == nvfp4::kHeadDim, "q: expected shape [T, H, 512], got ", q.sizes());
  TORCH_CHECK_VALUE(q.scalar_type() == at::kBFloat16, "q: expected dtype bfloat16, got ", q.scalar_type());
  TORCH_CHECK_VALUE(q.is_contiguous(), "q: expected a contiguous tensor");
  args.num_tokens = q.size(0);
  args.num_heads = q.size(1);
  TORCH_CHECK_VALUE(is_prefill_head_count(args.num_heads), "q: expected a head count in {16, 32, ..., 128} (multiple of 16) "
                    "with a prefill instance, got H = ", args.num_heads);
  check_device(output, q, "output");
  TORCH_CHECK_VALUE(output.sizes() == q.sizes(), "output: expected shape ", q.sizes(), " (the shape of q), got ",
                    output.sizes());
  TORCH_CHECK_VALUE(output.scalar_type() == at::kBFloat16, "output: expected dtype bfloat16, got ", output.scalar_type());
  TORCH_CHECK_VALUE(output.is_contiguous(), "output: expected a contiguous tensor");
  check_device(out_lse, q, "out_lse");
  TORCH_CHECK_VALUE(out_lse.dim() == 2 && out_lse.size(0) == args.num_tokens && out_lse.size(1) == args.num_heads,
                    "out_lse: expected shape [", args.num_tokens, ", ", args.num_heads, "], got ", out_lse.sizes());
  TORCH_CHECK_VALUE(out_lse.scalar_type() == at::kFloat, "out_lse: expected dtype float32, got ", out_lse.scalar_type());
  TORCH_CHECK_VALUE(out_lse.is_contiguous(), "out_lse: expected a contiguous tensor");

  // Main candidate list.
  check_device(kv_cache, q, "kv_cache");
  args.main.cache = kv_cache;
  args.main.geometry = check_cache_view(kv_cache, "kv_cache");
  check_device(indices, q, "indices");
  args.main.indices = check_indices(indices, args.num_tokens, "indices");
  args.main.width = args.main.indices.size(1);
  if (topk_length.has_value()) {
    check_device(*topk_length, q, "topk_length");
    check_lengths(*topk_length, args.num_tokens, "topk_length");
    args.main.lengths = *topk_length;
  }

  // Extra (compressed) candidate list.
  TORCH_CHECK_VALUE(extra_kv_cache.has_value() == extra_indices.has_value(),
                    extra_kv_cache.has_value() ? "extra_indices: required when extra_kv_cache is given"
                                               : "extra_kv_cache: required when extra_indices is given");
  TORCH_CHECK_VALUE(!extra_topk_length.has_value() || extra_indices.has_value(),
                    "extra_topk_length: given without extra_indices and extra_kv_cache");
  if (extra_kv_cache.has_value()) {
    check_device(*extra_kv_cache, q, "extra_kv_cache");
    args.extra.cache = *extra_kv_cache;
    args.extra.geometry = check_cache_view(*extra_kv_cache, "extra_kv_cache");
    check_device(*extra_indices, q, "extra_indices");
    args.extra.indices = check_indices(*extra_indices, args.num_tokens, "extra_indices");
    args.extra.width = args.extra.indices.size(1);
    if (extra_topk_length.has_value()) {
      check_device(*extra_topk_length, q, "extra_topk_length");
      check_lengths(*extra_topk_length, args.num_tokens, "extra_topk_length");
      args.extra.lengths = *extra_topk_length;
    }
  }
  const int64_t num_chunks = args.main.num_chunks() + args.extra.num_chunks();
  TORCH_CHECK_VALUE(num_chunks <= nvfp4::kMaxChunks, "indices/extra_indices: expected ceil(topk/64) + "
                    "ceil(extra_topk/64) <= 16 chunks, got ", args.main.num_chunks(), " + ", args.extra.num_chunks(),
                    " (topk ", args.main.width, ", extra_topk ", args.extra.width, ")");

  if (attn_sink.has_value()) {
    check_device(*attn_sink, q, "attn_sink");
    TORCH_CHECK_VALUE(attn_sink->scalar_type() == at::kFloat, "attn_sink: expected dtype float32, got ",
                      attn_sink->scalar_type());
    TORCH_CHECK_VALUE(attn_sink->dim() == 1 && attn_sink->size(0) >= args.num_heads, "attn_sink: expected a 1-D tensor "
                      "with at least ", args.num_heads, " entries (H of q), got shape ", attn_sink->sizes());
    TORCH_CHECK_VALUE(attn_sink->is_contiguous(), "attn_sink: expected a contiguous tensor");
    args.sink = *attn_sink;
  }

  const std::vector<int64_t> choices = prefill_head_tile_choices(args.num_heads);
  if (head_tiles.has_value()) {
    bool allowed = false;
    for (int64_t choice : choices) allowed = allowed || choice == *head_tiles;
    TORCH_CHECK_VALUE(allowed, "head_tiles: expected one of ", c10::IntArrayRef(choices), " for H = ", args.num_heads,
                      ", got ", *head_tiles);
    TORCH_CHECK_VALUE(*head_tiles <= max_head_tiles, "head_tiles: ", *head_tiles, " needs more shared memory per "
                      "block than this device has; it runs at most ", max_head_tiles);
    args.head_tiles = *head_tiles;
  } else {
    args.head_tiles = cap_head_tiles(plan_prefill_head_tiles(args.num_tokens, args.num_heads, num_sms, hopper_plan),
                                     max_head_tiles);
  }
  args.q = q;
  args.output = output;
  args.out_lse = out_lse;
  args.sm_scale = sm_scale;
  args.lse_scale = lse_scale;
  return args;
}

}  // namespace cake
