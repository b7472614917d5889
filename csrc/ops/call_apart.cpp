// cake::check_call_apart: the overlap checks of one prefill, decode or cache-writer call alone, on
// the tensors as the caller passed them. Under torch.compile the public Python functions run it in
// the graph right before the mutating op: torch's functionalization hands that op copies of
// tensors that are views of one storage, so its own checks cannot see that two of them share
// bytes, while this op, which mutates nothing, gets the views themselves. It raises the ValueError
// the eager call raises for such an overlap.
#include <ATen/core/List.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <optional>
#include <string>

#include "cache_writer_args.h"
#include "decode_args.h"

namespace cake {
namespace {

// `tensors` in the op's argument order: for "prefill" and "decode" q, kv_cache, indices, output,
// out_lse, topk_length, attn_sink, extra_kv_cache, extra_indices, extra_topk_length, mid_out,
// mid_lse (the last two absent for the prefill); for "append" latent_kv, cache. The packing writer
// needs no entry: it writes a cache it allocates, which nothing the caller holds can overlap.
void check_call_apart(const std::string& op, const c10::List<std::optional<at::Tensor>>& tensors) {
  const auto tensor = [&](size_t i) { return tensors.get(i).value_or(at::Tensor()); };
  if (op == "append") {
    TORCH_CHECK_VALUE(tensors.size() == 2, "tensors: expected latent_kv and cache, got ", tensors.size());
    check_cache_apart(tensor(0), tensor(1), PointerChecks::kCheck);
    return;
  }
  TORCH_CHECK_VALUE(op == "prefill" || op == "decode", "op: expected 'prefill', 'decode' or 'append', got '",
                    op, "'");
  TORCH_CHECK_VALUE(tensors.size() == 12, "tensors: expected the call's 12 tensor arguments, got ", tensors.size());
  DecodeArgs args;
  pack_attention_inputs(args, tensor(0), tensor(1), tensor(2), tensor(3), tensor(4), /*sm_scale=*/0.0, tensors.get(5),
                        tensors.get(6), tensors.get(7), tensors.get(8), tensors.get(9), /*lse_scale=*/1.0);
  check_outputs_apart(args, PointerChecks::kCheck);
  if (op == "decode") {
    args.mid_out = tensor(10);
    args.mid_lse = tensor(11);
    check_scratch_apart(args, PointerChecks::kCheck);
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(cake, CPU, m) { m.impl("check_call_apart", &check_call_apart); }

#if defined(CAKE_WITH_CUDA)
TORCH_LIBRARY_IMPL(cake, CUDA, m) { m.impl("check_call_apart", &check_call_apart); }
#endif

}  // namespace cake
