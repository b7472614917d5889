// CPU implementations of the cake ops.
#include <torch/library.h>

#include "../ops/prefill_target.h"
#include "cache_writer_cpu.h"
#include "decode_cpu.h"
#include "prefill_cpu.h"

namespace cake {
namespace {

void run_prefill_cpu(PrefillArgs& args) {
  validate_prefill_args(args, cpu_prefill_target());
  if (args.num_tokens == 0) return;
  sparse_mla_prefill_cpu(args);
}

void run_decode_cpu(DecodeArgs& args) {
  validate_decode_args(args, cpu_prefill_target());
  if (args.num_tokens == 0) return;
  sparse_mla_decode_cpu(args);
}

void nvfp4_pack_cache_cpu_op(const at::Tensor& latent_kv, const at::Tensor& cache) {
  write_cache_rows_cpu(prepare_pack_job(latent_kv, cache));
}

void nvfp4_append_cache_cpu_op(const at::Tensor& latent_kv, const at::Tensor& slot_mapping, const at::Tensor& cache) {
  write_cache_rows_cpu(prepare_append_job(latent_kv, slot_mapping, cache));
}

}  // namespace

TORCH_LIBRARY_IMPL(cake, CPU, m) {
  m.impl("sparse_mla_prefill", &sparse_mla_prefill_op<run_prefill_cpu>);
  m.impl("sparse_mla_decode", &sparse_mla_decode_op<run_decode_cpu>);
  m.impl("nvfp4_pack_cache", &nvfp4_pack_cache_cpu_op);
  m.impl("nvfp4_append_cache", &nvfp4_append_cache_cpu_op);
}

}  // namespace cake
