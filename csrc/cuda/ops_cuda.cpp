// CUDA implementations of the cake ops: validation (shared with the CPU), device guard, params
// packing and the launch on the current stream. No host synchronisation and no allocation in
// the prefill; lengths stay on the device and are clamped in the kernel.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "../ops/cache_writer_args.h"
#include "../ops/prefill_args.h"
#include "cache_writer_cuda.h"
#include "hopper/prefill_hopper.h"
#include "prefill_kernel_choice.h"
#include "portable/prefill_launch.h"

namespace cake {
namespace {

cuda::CandidateListParams list_params(const CandidateList& list) {
  cuda::CandidateListParams params{};
  if (list.width == 0) return params;
  params.cache = list.cache.data_ptr<uint8_t>();
  params.indices = list.indices.data_ptr<int32_t>();
  params.lengths = list.lengths.defined() ? list.lengths.data_ptr<int32_t>() : nullptr;
  params.page_size = list.geometry.page_size;
  params.page_stride = list.geometry.page_stride;
  params.num_slots = list.geometry.num_slots();
  params.width = int(list.width);
  return params;
}

void sparse_mla_prefill_cuda_op(const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& indices,
                                const at::Tensor& output, const at::Tensor& out_lse, double sm_scale,
                                const std::optional<at::Tensor>& topk_length,
                                const std::optional<at::Tensor>& attn_sink,
                                const std::optional<at::Tensor>& extra_kv_cache,
                                const std::optional<at::Tensor>& extra_indices,
                                const std::optional<at::Tensor>& extra_topk_length, double lse_scale,
                                std::optional<int64_t> head_tiles) {
  TORCH_CHECK_VALUE(q.is_cuda(), "q: expected a CUDA tensor (another argument is on CUDA), got ", q.device());
  const c10::cuda::CUDAGuard device_guard(q.device());
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(q.device().index());
  TORCH_CHECK_NOT_IMPLEMENTED(props->major >= 8, "cake::sparse_mla_prefill needs compute capability 8.0 or newer, "
                              "got ", props->major, ".", props->minor, " (", props->name, ")");
  const bool hopper_device = cuda::device_runs_hopper_prefill(props->major, props->sharedMemPerBlockOptin);
  const PrefillArgs args = check_prefill_args(q, kv_cache, indices, output, out_lse, sm_scale, topk_length, attn_sink,
                                              extra_kv_cache, extra_indices, extra_topk_length, lse_scale, head_tiles,
                                              props->multiProcessorCount,
                                              cuda::prefill_max_head_tiles(props->sharedMemPerBlockOptin), hopper_device);
  const bool use_hopper = hopper_device && cuda::hopper_prefill_serves(args.num_heads, args.head_tiles);
  // CAKE_PREFILL_VARIANT="stages,k_tiles" overrides the portable instance: a knob for benchmark sweeps.
  const char* variant_knob = std::getenv("CAKE_PREFILL_VARIANT");
  cuda::PrefillVariant variant = cuda::prefill_variant_for(int(args.head_tiles), props->sharedMemPerBlockOptin);
  if (variant_knob != nullptr) {
    variant.head_tiles = int(args.head_tiles);
    std::sscanf(variant_knob, "%d,%d", &variant.stages, &variant.k_tiles);
  }
  TORCH_CHECK_VALUE(use_hopper || (variant.head_tiles > 0 && size_t(variant.smem_bytes()) <= props->sharedMemPerBlockOptin),
                    "head_tiles: ", args.head_tiles, " has no kernel instance that fits this device's ",
                    props->sharedMemPerBlockOptin, " bytes of shared memory per block");
  TORCH_CHECK_VALUE(args.num_tokens * (args.num_heads / (16 * args.head_tiles)) < (int64_t(1) << 31),
                    "q: too many tokens for one launch (", args.num_tokens, ")");
  if (args.num_tokens == 0) return;

  cuda::PrefillParams params{};
  params.q = reinterpret_cast<const __nv_bfloat16*>(args.q.data_ptr());
  params.output = reinterpret_cast<__nv_bfloat16*>(args.output.data_ptr());
  params.out_lse = args.out_lse.data_ptr<float>();
  params.sink = args.sink.defined() ? args.sink.data_ptr<float>() : nullptr;
  params.lists[0] = list_params(args.main);
  params.lists[1] = list_params(args.extra);
  params.num_tokens = int(args.num_tokens);
  params.num_heads = int(args.num_heads);
  params.num_head_blocks = int(args.num_heads / (16 * args.head_tiles));
  params.score_scale_log2 = float(args.sm_scale * M_LOG2E);
  params.lse_scale = float(args.lse_scale);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (use_hopper) {
    cuda::launch_sparse_mla_prefill_hopper(params, props->multiProcessorCount, stream);
    return;
  }
  TORCH_CHECK_VALUE(cuda::launch_sparse_mla_prefill(variant, params, stream), "head_tiles: no kernel instance for ",
                    args.head_tiles, " with ", variant.stages, " stages and ", variant.k_tiles, " K tiles");
}

void nvfp4_pack_cache_cuda_op(const at::Tensor& latent_kv, const at::Tensor& cache) {
  TORCH_CHECK_VALUE(cache.is_cuda(), "cache: expected a CUDA tensor (another argument is on CUDA), got ", cache.device());
  const c10::cuda::CUDAGuard device_guard(cache.device());
  cuda::write_cache_rows_cuda(prepare_pack_job(latent_kv, cache));
}

void nvfp4_append_cache_cuda_op(const at::Tensor& latent_kv, const at::Tensor& slot_mapping, const at::Tensor& cache) {
  TORCH_CHECK_VALUE(cache.is_cuda(), "cache: expected a CUDA tensor (another argument is on CUDA), got ", cache.device());
  const c10::cuda::CUDAGuard device_guard(cache.device());
  cuda::write_cache_rows_cuda(prepare_append_job(latent_kv, slot_mapping, cache));
}

}  // namespace

TORCH_LIBRARY_IMPL(cake, CUDA, m) {
  m.impl("sparse_mla_prefill", &sparse_mla_prefill_cuda_op);
  m.impl("nvfp4_pack_cache", &nvfp4_pack_cache_cuda_op);
  m.impl("nvfp4_append_cache", &nvfp4_append_cache_cuda_op);
}

}  // namespace cake
