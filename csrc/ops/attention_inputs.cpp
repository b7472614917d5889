#include "attention_inputs.h"

#include <cfloat>
#include <cmath>

#include <c10/util/Exception.h>

#include "cache_view.h"
#include "tensor_alignment.h"
#include "tensor_overlap.h"

namespace cake {
namespace {

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

// One candidate list: its cache view, indices and lengths, each error naming the caller's argument.
void check_candidate_list(CandidateList& list, const at::Tensor& q, int64_t num_tokens, const char* cache_name,
                          const char* indices_name, const char* lengths_name, PointerChecks pointers) {
  check_same_device(list.cache, q, cache_name);
  list.geometry = check_cache_view(list.cache, cache_name, pointers);
  check_same_device(list.indices, q, indices_name);
  list.indices = check_indices(list.indices, num_tokens, indices_name);
  list.width = list.indices.size(1);
  if (list.lengths.defined()) {
    check_same_device(list.lengths, q, lengths_name);
    check_lengths(list.lengths, num_tokens, lengths_name);
  }
}

}  // namespace

void check_apart_from_read(const at::Tensor& written, const char* written_name, const AttentionInputs& inputs,
                           PointerChecks pointers) {
  check_apart(written, written_name, inputs.q, "q", pointers);
  check_apart(written, written_name, inputs.main.cache, "kv_cache", pointers);
  check_apart(written, written_name, inputs.main.indices, "indices", pointers);
  check_apart(written, written_name, inputs.main.lengths, "topk_length", pointers);
  check_apart(written, written_name, inputs.extra.cache, "extra_kv_cache", pointers);
  check_apart(written, written_name, inputs.extra.indices, "extra_indices", pointers);
  check_apart(written, written_name, inputs.extra.lengths, "extra_topk_length", pointers);
  check_apart(written, written_name, inputs.sink, "attn_sink", pointers);
}

void check_same_device(const at::Tensor& tensor, const at::Tensor& q, const char* name) {
  TORCH_CHECK_VALUE(tensor.device() == q.device(), name, ": expected a tensor on ", q.device(), " (the device of q), got ",
                    tensor.device());
}

void validate_attention_inputs(AttentionInputs& inputs, const AttentionLimits& limits, PointerChecks pointers) {
  const at::Tensor& q = inputs.q;
  // q, output, out_lse.
  TORCH_CHECK_VALUE(q.dim() == 3 && q.size(2) == nvfp4::kHeadDim, "q: expected shape [T, H, 512], got ", q.sizes());
  TORCH_CHECK_VALUE(q.scalar_type() == at::kBFloat16, "q: expected dtype bfloat16, got ", q.scalar_type());
  TORCH_CHECK_VALUE(q.is_contiguous(), "q: expected a contiguous tensor");
  // The CUDA kernels copy q in 16-byte pieces and store output as bf16 pairs.
  check_data_alignment(q, 16, "q", pointers);
  inputs.num_tokens = q.size(0);
  inputs.num_heads = q.size(1);
  TORCH_CHECK_VALUE(limits.head_count_ok(inputs.num_heads), "q: expected a head count in ", limits.head_counts,
                    ", got H = ", inputs.num_heads);
  check_same_device(inputs.output, q, "output");
  TORCH_CHECK_VALUE(inputs.output.sizes() == q.sizes(), "output: expected shape ", q.sizes(), " (the shape of q), got ",
                    inputs.output.sizes());
  TORCH_CHECK_VALUE(inputs.output.scalar_type() == at::kBFloat16, "output: expected dtype bfloat16, got ",
                    inputs.output.scalar_type());
  TORCH_CHECK_VALUE(inputs.output.is_contiguous(), "output: expected a contiguous tensor");
  check_data_alignment(inputs.output, 4, "output", pointers);
  check_same_device(inputs.out_lse, q, "out_lse");
  TORCH_CHECK_VALUE(inputs.out_lse.dim() == 2 && inputs.out_lse.size(0) == inputs.num_tokens &&
                    inputs.out_lse.size(1) == inputs.num_heads,
                    "out_lse: expected shape [", inputs.num_tokens, ", ", inputs.num_heads, "], got ",
                    inputs.out_lse.sizes());
  TORCH_CHECK_VALUE(inputs.out_lse.scalar_type() == at::kFloat, "out_lse: expected dtype float32, got ",
                    inputs.out_lse.scalar_type());
  TORCH_CHECK_VALUE(inputs.out_lse.is_contiguous(), "out_lse: expected a contiguous tensor");

  // Main candidate list.
  CandidateList& main = inputs.main;
  check_candidate_list(main, q, inputs.num_tokens, "kv_cache", "indices", "topk_length", pointers);

  // Extra (compressed) candidate list.
  CandidateList& extra = inputs.extra;
  TORCH_CHECK_VALUE(extra.cache.defined() == extra.indices.defined(),
                    extra.cache.defined() ? "extra_indices: required when extra_kv_cache is given"
                                          : "extra_kv_cache: required when extra_indices is given");
  TORCH_CHECK_VALUE(!extra.lengths.defined() || extra.indices.defined(),
                    "extra_topk_length: given without extra_indices and extra_kv_cache");
  if (extra.cache.defined()) {
    check_candidate_list(extra, q, inputs.num_tokens, "extra_kv_cache", "extra_indices", "extra_topk_length",
                         pointers);
  }
  TORCH_CHECK_VALUE(inputs.num_chunks() <= limits.max_chunks, "indices/extra_indices: expected ceil(topk/64) + "
                    "ceil(extra_topk/64) <= ", limits.max_chunks_text, " chunks, got ", main.num_chunks(), " + ",
                    extra.num_chunks(), " (topk ", main.width, ", extra_topk ", extra.width, ")");

  if (inputs.sink.defined()) {
    const at::Tensor& sink = inputs.sink;
    check_same_device(sink, q, "attn_sink");
    TORCH_CHECK_VALUE(sink.scalar_type() == at::kFloat, "attn_sink: expected dtype float32, got ", sink.scalar_type());
    TORCH_CHECK_VALUE(sink.dim() == 1 && sink.size(0) >= inputs.num_heads, "attn_sink: expected a 1-D tensor "
                      "with at least ", inputs.num_heads, " entries (H of q), got shape ", sink.sizes());
    TORCH_CHECK_VALUE(sink.is_contiguous(), "attn_sink: expected a contiguous tensor");
  }
  TORCH_CHECK_VALUE(!std::isfinite(inputs.sm_scale) || std::abs(inputs.sm_scale) <= kMaxFiniteSmScale,
                    "sm_scale: expected a magnitude of at most 1e30 (or NaN / +-inf, which make every row with a "
                    "candidate NaN), got ", inputs.sm_scale);
  // The LSE is multiplied by lse_scale as a float32: a value that rounds to zero there would turn
  // every LSE into 0 (and an empty row's -inf into NaN), one past its range into +-inf or NaN.
  TORCH_CHECK_VALUE(std::isfinite(inputs.lse_scale) && std::abs(inputs.lse_scale) <= double(FLT_MAX) &&
                        float(inputs.lse_scale) != 0.f,
                    "lse_scale: expected a finite value that is nonzero as a float32 and at most float32's largest "
                    "(~3.4e38) in magnitude, got ", inputs.lse_scale);
  // Last: a call the fake implementations check (no data pointers) raises the same earlier errors.
  check_outputs_apart(inputs, pointers);
}

void check_outputs_apart(const AttentionInputs& inputs, PointerChecks pointers) {
  check_apart(inputs.output, "output", inputs.out_lse, "out_lse", pointers);
  check_apart_from_read(inputs.output, "output", inputs, pointers);
  check_apart_from_read(inputs.out_lse, "out_lse", inputs, pointers);
}

}  // namespace cake
