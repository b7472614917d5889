// The tensors every sparse-MLA attention op takes (q, the caches and candidate lists, the sink,
// the outputs), in one struct, and their checks. The prefill (prefill_args.h) and the decode
// (decode_args.h) extend it with their own plan; the head counts and the chunk limit they accept
// are the only checks that differ, so the caller passes them in.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

#include "../format/nvfp4_format.h"
#include "tensor_alignment.h"

namespace cake {

// One candidate list: its [T, width] int32 indices, optional lengths, and the cache it reads.
struct CandidateList {
  at::Tensor cache;         // uint8 view, geometry below; undefined when the list is absent
  at::Tensor indices;       // [T, width] int32, contiguous (a [T, 1, width] input is viewed as 2-D)
  at::Tensor lengths;       // [>= T] int32 or undefined (every slot counts)
  nvfp4::CacheGeometry geometry{};
  int64_t width = 0;        // topk of this list; 0 when the list is absent
  int64_t num_chunks() const { return nvfp4::list_chunks(width); }
};

struct AttentionInputs {
  // The op's arguments (schemas in registration.cpp); optional tensors are undefined when absent.
  at::Tensor q;        // [T, H, 512] bf16
  at::Tensor output;   // [T, H, 512] bf16
  at::Tensor out_lse;  // [T, H] fp32
  at::Tensor sink;     // [>= H] fp32 or undefined
  CandidateList main;
  CandidateList extra;  // width 0 when absent
  double sm_scale = 0.0;
  double lse_scale = 1.0;

  // Filled in by validate_attention_inputs.
  int64_t num_tokens = 0;
  int64_t num_heads = 0;

  int64_t num_chunks() const { return main.num_chunks() + extra.num_chunks(); }
};

// What an op accepts beyond the shared checks: its head counts and its chunk limit, with the
// words its error messages use for them.
struct AttentionLimits {
  bool (*head_count_ok)(int64_t num_heads);
  const char* head_counts;  // e.g. "{16, 32, ..., 128} (multiple of 16)"
  int64_t max_chunks;
  const char* max_chunks_text;  // e.g. "16" or "16 * max_splits = 256"
};

// The largest finite |sm_scale| the ops accept. The kernels form sm_scale * log2(e) in float32, one
// of them times 2^9 more (its raw scores are 2^-9 times the true ones), so a finite scale near
// float32's range would become infinite in some kernels and not in others; this bound keeps every
// kernel's factor finite. NaN and +-inf stay accepted (every row with a candidate is NaN).
constexpr double kMaxFiniteSmScale = 1e30;

// Packs the arguments every attention op's schema starts with (the order of the schemas in
// registration.cpp); absent optional tensors become undefined ones.
inline void pack_attention_inputs(AttentionInputs& inputs, const at::Tensor& q, const at::Tensor& kv_cache,
                                  const at::Tensor& indices, const at::Tensor& output, const at::Tensor& out_lse,
                                  double sm_scale, const std::optional<at::Tensor>& topk_length,
                                  const std::optional<at::Tensor>& attn_sink,
                                  const std::optional<at::Tensor>& extra_kv_cache,
                                  const std::optional<at::Tensor>& extra_indices,
                                  const std::optional<at::Tensor>& extra_topk_length, double lse_scale) {
  inputs.q = q;
  inputs.output = output;
  inputs.out_lse = out_lse;
  inputs.sink = attn_sink.value_or(at::Tensor());
  inputs.main.cache = kv_cache;
  inputs.main.indices = indices;
  inputs.main.lengths = topk_length.value_or(at::Tensor());
  inputs.extra.cache = extra_kv_cache.value_or(at::Tensor());
  inputs.extra.indices = extra_indices.value_or(at::Tensor());
  inputs.extra.lengths = extra_topk_length.value_or(at::Tensor());
  inputs.sm_scale = sm_scale;
  inputs.lse_scale = lse_scale;
}

// Checks every tensor (ValueError naming the argument, before anything is launched) and fills
// num_tokens and num_heads. `pointers` kWithoutData: tensors without data (fake tensors): no
// alignment checks, overlap by storage offsets (tensor_alignment.h).
void validate_attention_inputs(AttentionInputs& inputs, const AttentionLimits& limits,
                               PointerChecks pointers = PointerChecks::kCheck);

// Raises ValueError naming `written` (a tensor the op writes) when it shares memory with a tensor
// the op reads: q, either list's cache, indices and lengths, the sink (tensor_overlap.h).
void check_apart_from_read(const at::Tensor& written, const char* written_name, const AttentionInputs& inputs,
                           PointerChecks pointers);

// validate_attention_inputs' last step: output and out_lse apart from each other and from every
// tensor the op reads. It needs none of the other checks, so cake::check_call_apart runs it alone.
void check_outputs_apart(const AttentionInputs& inputs, PointerChecks pointers);

// Raises ValueError naming `name` when `tensor` is not on q's device.
void check_same_device(const at::Tensor& tensor, const at::Tensor& q, const char* name);

}  // namespace cake
