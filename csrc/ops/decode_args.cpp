#include "decode_args.h"
#include "tensor_alignment.h"
#include "tensor_overlap.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <string>

namespace cake {
namespace {

// mid_out [S, T, H, 512] or mid_lse [S, T, H]: fp32 on q's device (the form; checked for both
// scratch buffers before either's split count, so that a call the fakes can only check for form
// raises the same first error as the op).
void check_scratch_form(const at::Tensor& scratch, const DecodeArgs& args, bool rows, const char* name) {
  check_same_device(scratch, args.q, name);
  TORCH_CHECK_VALUE(scratch.scalar_type() == at::kFloat, name, ": expected dtype float32, got ", scratch.scalar_type());
  const int64_t rank = rows ? 4 : 3;
  const bool shape_ok = scratch.dim() == rank && scratch.size(1) == args.num_tokens &&
                        scratch.size(2) == args.num_heads && (!rows || scratch.size(3) == nvfp4::kHeadDim);
  TORCH_CHECK_VALUE(shape_ok, name, ": expected shape [S, ", args.num_tokens, ", ", args.num_heads,
                    rows ? ", 512]" : "]", " (S splits, T and H of q), got ", scratch.sizes());
}

// S >= num_splits, contiguous; mid_out 16-byte aligned (the CUDA merge reads it in 16-byte
// vectors). Returns false, having checked nothing, where the split count is not known (`splits` a
// range) and S is below its top: the op's own check may then fail or pass.
bool check_scratch_splits(const at::Tensor& scratch, bool rows, const char* name, const DecodeSplitRange& splits,
                          PointerChecks pointers) {
  if (!splits.known() && scratch.size(0) < splits.most) return false;
  TORCH_CHECK_VALUE(scratch.size(0) >= splits.fewest, name, ": expected at least ", splits.fewest,
                    " splits in dim 0 (the plan's num_splits), got ", scratch.size(0));
  TORCH_CHECK_VALUE(scratch.is_contiguous(), name, ": expected a contiguous tensor");
  if (rows) check_data_alignment(scratch, 16, name, pointers);
  return true;
}

}  // namespace

void validate_decode_inputs(AttentionInputs& inputs, int64_t max_splits, PointerChecks pointers) {
  TORCH_CHECK_VALUE(max_splits >= 1, "max_splits: expected >= 1, got ", max_splits);
  const int64_t max_chunks = decode_list_chunk_limit(max_splits);
  const std::string max_chunks_text = "16 * max_splits = " + std::to_string(max_chunks);
  const AttentionLimits limits{&is_decode_head_count, "{8, 16, ..., 128} (multiple of 8)", max_chunks,
                               max_chunks_text.c_str()};
  validate_attention_inputs(inputs, limits, pointers);
}

void validate_decode_args(DecodeArgs& args, const PrefillTarget& target) {
  validate_decode_inputs(args, args.max_splits);

  args.plan = plan_decode_on_target(target, args.num_tokens, args.num_heads, args.num_chunks(), args.max_splits,
                                    args.head_tiles, args.num_splits);
  validate_decode_scratch(args);
}

void validate_decode_scratch(const DecodeArgs& args, PointerChecks pointers) {
  validate_decode_scratch(args, DecodeSplitRange{args.plan.num_splits, args.plan.num_splits}, pointers);
}

void validate_decode_scratch(const DecodeArgs& args, const DecodeSplitRange& splits, PointerChecks pointers) {
  TORCH_CHECK_VALUE(args.mid_out.defined() == args.mid_lse.defined(),
                    args.mid_out.defined() ? "mid_lse: required when mid_out is given"
                                           : "mid_out: required when mid_lse is given");
  if (args.mid_out.defined()) {
    check_scratch_form(args.mid_out, args, /*rows=*/true, "mid_out");
    check_scratch_form(args.mid_lse, args, /*rows=*/false, "mid_lse");
    if (check_scratch_splits(args.mid_out, /*rows=*/true, "mid_out", splits, pointers)) {
      check_scratch_splits(args.mid_lse, /*rows=*/false, "mid_lse", splits, pointers);
    }
    check_scratch_apart(args, pointers);
  } else if (splits.known()) {
    TORCH_CHECK_VALUE(splits.fewest == 1, "mid_out/mid_lse: required when the plan splits (num_splits = ",
                      splits.fewest, "); allocate them with cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch",
                      args.num_chunks() <= kMaxChunksPerSplit ? " or pass num_splits=1" : "");
  }
}

DecodeSplitRange decode_split_range(const DecodeArgs& args) {
  const DecodeSplitBounds bounds = decode_split_bounds(args.num_chunks(), args.max_splits);
  const int64_t fewest = bounds.fits, most = std::max(bounds.fits, bounds.most);
  // No tokens: the planner gives the fewest on every device (a one-split plan only where a split
  // holds the lists); so does a range of one count.
  return args.num_tokens == 0 ? DecodeSplitRange{fewest, fewest} : DecodeSplitRange{fewest, most};
}

void check_scratch_apart(const DecodeArgs& args, PointerChecks pointers) {
  // The splits write the scratch and the merge reads it while writing output and out_lse.
  check_apart(args.mid_out, "mid_out", args.mid_lse, "mid_lse", pointers);
  const auto apart_from_the_call = [&](const at::Tensor& scratch, const char* name) {
    check_apart(scratch, name, args.output, "output", pointers);
    check_apart(scratch, name, args.out_lse, "out_lse", pointers);
    check_apart_from_read(scratch, name, args, pointers);
  };
  apart_from_the_call(args.mid_out, "mid_out");
  apart_from_the_call(args.mid_lse, "mid_lse");
}

}  // namespace cake
