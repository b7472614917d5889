// cake::sparse_mla_prefill_functional: allocates `output` and `out_lse` and runs
// cake::sparse_mla_prefill into them (the same validation, plan and kernel). It mutates none of
// its inputs, so torch.compile's CUDA graphs (mode="reduce-overhead") capture a call whose
// buffers would otherwise be graph inputs written in place.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "../format/nvfp4_format.h"

namespace cake {
namespace {

using OptTensor = std::optional<at::Tensor>;

std::tuple<at::Tensor, at::Tensor> sparse_mla_prefill_functional(
    const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& indices, double sm_scale,
    const OptTensor& topk_length, const OptTensor& attn_sink, const OptTensor& extra_kv_cache,
    const OptTensor& extra_indices, const OptTensor& extra_topk_length, double lse_scale,
    std::optional<int64_t> head_tiles) {
  // The shape the outputs are allocated from; everything else is checked by the op below.
  TORCH_CHECK_VALUE(q.dim() == 3 && q.size(2) == nvfp4::kHeadDim, "q: expected shape [T, H, 512], got ", q.sizes());
  at::Tensor output = at::empty(q.sizes(), q.options().dtype(at::kBFloat16));
  at::Tensor out_lse = at::empty({q.size(0), q.size(1)}, q.options().dtype(at::kFloat));
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("cake::sparse_mla_prefill", "")
                             .typed<void(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                         const at::Tensor&, double, const OptTensor&, const OptTensor&,
                                         const OptTensor&, const OptTensor&, const OptTensor&, double,
                                         std::optional<int64_t>)>();
  op.call(q, kv_cache, indices, output, out_lse, sm_scale, topk_length, attn_sink, extra_kv_cache, extra_indices,
          extra_topk_length, lse_scale, head_tiles);
  return {output, out_lse};
}

}  // namespace

TORCH_LIBRARY_IMPL(cake, CPU, m) { m.impl("sparse_mla_prefill_functional", &sparse_mla_prefill_functional); }

#if defined(CAKE_WITH_CUDA)
TORCH_LIBRARY_IMPL(cake, CUDA, m) { m.impl("sparse_mla_prefill_functional", &sparse_mla_prefill_functional); }
#endif

}  // namespace cake
