// CPU implementations of the cake ops.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "cache_writer_cpu.h"
#include "prefill_cpu.h"

namespace cake {
namespace {

void sparse_mla_prefill_cpu_op(const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& indices,
                               const at::Tensor& output, const at::Tensor& out_lse, double sm_scale,
                               const std::optional<at::Tensor>& topk_length,
                               const std::optional<at::Tensor>& attn_sink,
                               const std::optional<at::Tensor>& extra_kv_cache,
                               const std::optional<at::Tensor>& extra_indices,
                               const std::optional<at::Tensor>& extra_topk_length, double lse_scale,
                               std::optional<int64_t> head_tiles) {
  // On the CPU a "multiprocessor" is an intra-op thread (matches torch.get_num_threads()).
  const PrefillArgs args = check_prefill_args(q, kv_cache, indices, output, out_lse, sm_scale, topk_length, attn_sink,
                                              extra_kv_cache, extra_indices, extra_topk_length, lse_scale, head_tiles,
                                              at::get_num_threads());
  if (args.num_tokens == 0) return;
  sparse_mla_prefill_cpu(args);
}

void nvfp4_pack_cache_cpu_op(const at::Tensor& latent_kv, const at::Tensor& cache) {
  write_cache_rows_cpu(prepare_pack_job(latent_kv, cache));
}

void nvfp4_append_cache_cpu_op(const at::Tensor& latent_kv, const at::Tensor& slot_mapping, const at::Tensor& cache) {
  write_cache_rows_cpu(prepare_append_job(latent_kv, slot_mapping, cache));
}

}  // namespace

TORCH_LIBRARY_IMPL(cake, CPU, m) {
  m.impl("sparse_mla_prefill", &sparse_mla_prefill_cpu_op);
  m.impl("nvfp4_pack_cache", &nvfp4_pack_cache_cpu_op);
  m.impl("nvfp4_append_cache", &nvfp4_append_cache_cpu_op);
}

}  // namespace cake
