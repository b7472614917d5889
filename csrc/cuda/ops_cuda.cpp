// CUDA implementations of the cake ops: validation and planning (shared with the CPU), device
// guard, params packing and the launches on the current stream. No host synchronisation and no
// allocation in the prefill or the decode; lengths stay on the device and are clamped in the
// kernels.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cmath>

#include "../ops/cache_writer_args.h"
#include "../ops/decode_args.h"
#include "../ops/prefill_args.h"
#include "../ops/prefill_kernel_override.h"
#include "../ops/prefill_target.h"
#include "cache_writer_cuda.h"
#include "decode_merge_cuda.h"
#include "hopper/prefill_hopper.h"
#include "hopper_small/prefill_small.h"
#include "prefill_kernel_choice.h"
#include "portable/decode_launch.h"
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
  params.page_divisor = nvfp4::slot_page_divisor(list.geometry.page_size);
  params.page_stride = list.geometry.page_stride;
  params.num_slots = list.geometry.num_slots();
  params.width = int(list.width);
  return params;
}

// The kernel parameters both ops share, from validated inputs.
cuda::PrefillParams attention_params(const AttentionInputs& args, int64_t num_head_blocks) {
  cuda::PrefillParams params{};
  params.q = reinterpret_cast<const __nv_bfloat16*>(args.q.data_ptr());
  params.output = reinterpret_cast<__nv_bfloat16*>(args.output.data_ptr());
  params.out_lse = args.out_lse.data_ptr<float>();
  params.sink = args.sink.defined() ? args.sink.data_ptr<float>() : nullptr;
  params.lists[0] = list_params(args.main);
  params.lists[1] = list_params(args.extra);
  params.num_tokens = int(args.num_tokens);
  params.num_heads = int(args.num_heads);
  params.num_head_blocks = int(num_head_blocks);
  params.score_scale_log2 = float(args.sm_scale * M_LOG2E);
  params.lse_scale = float(args.lse_scale);
  return params;
}

const cudaDeviceProp* checked_device_properties(const at::Tensor& q, const char* op) {
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(q.device().index());
  TORCH_CHECK_NOT_IMPLEMENTED(props->major >= 8, op, " needs compute capability 8.0 or newer, got ", props->major, ".",
                              props->minor, " (", props->name, ")");
  return props;
}

// What a device runs under the kernel override, unchecked: the Hopper family where it runs the
// Hopper kernels (and whether the small-heads one), else the portable kernel; its SMs and
// head-tile cap. cuda_prefill_target adds the check that an override asking for the Hopper
// kernels can be met.
PrefillTarget device_target(const cudaDeviceProp& props, const PrefillKernelOverride& knobs) {
  const bool hopper = cuda::device_runs_hopper_prefill(props.major, props.sharedMemPerBlockOptin, knobs);
  return {hopper ? PrefillKernel::kHopper : PrefillKernel::kPortable, int64_t(props.multiProcessorCount),
          int64_t(cuda::prefill_max_head_tiles(props.sharedMemPerBlockOptin)),
          cuda::device_runs_hopper_small_prefill(props.major, props.sharedMemPerBlockOptin, knobs)};
}

// A whole-list call of the small-heads family: heads 0.. on the 64-head kernel in blocks of 64
// (H = 48, 112: all of them, the last block padded; H = 80, 96: heads 0..63), the rest on the
// small-heads kernel's own units (a token and 16 or 32 heads; its launcher sets num_head_blocks).
// One or two persistent grids, each of at most `max_ctas` CTAs. H a multiple of 16.
void launch_small_heads_call(const cuda::DecodeParams& params, int64_t num_heads, int max_ctas, cudaStream_t stream) {
  const int wide_heads = int(cuda::hopper_small_wide_heads(num_heads));
  const int narrow_heads = int(cuda::hopper_small_narrow_heads(num_heads));
  if (wide_heads > 0) {
    cuda::DecodeParams wide = params;
    wide.num_head_blocks = wide_heads / cuda::HopperPrefillLayout::kHeads;
    cuda::launch_sparse_mla_attention_hopper(wide, max_ctas, stream);
  }
  if (narrow_heads > 0) {
    const int first = int(num_heads) - narrow_heads;
    cuda::launch_sparse_mla_prefill_hopper_small(cuda::params_from_head(params, first), narrow_heads, max_ctas, stream);
  }
}

void run_prefill_cuda(PrefillArgs& args) {
  const at::Tensor& q = args.q;
  TORCH_CHECK_VALUE(q.is_cuda(), "q: expected a CUDA tensor (another argument is on CUDA), got ", q.device());
  const c10::cuda::CUDAGuard device_guard(q.device());
  const cudaDeviceProp* props = checked_device_properties(q, "cake::sparse_mla_prefill");
  // Read once: the plan's kernel and the portable instance below come from the same override.
  const PrefillKernelOverride knobs = prefill_kernel_override();
  validate_prefill_args(args, cuda_prefill_target(q.device().index(), knobs));
  const PrefillPlan& plan = args.plan;
  const bool use_hopper = is_hopper_family(plan.kernel);
  cuda::PrefillVariant variant = cuda::prefill_variant_for(int(plan.head_tiles), props->sharedMemPerBlockOptin);
  if (knobs.variant.has_value()) variant = {int(plan.head_tiles), knobs.variant->stages, knobs.variant->k_tiles};
  TORCH_CHECK_VALUE(use_hopper || (variant.head_tiles > 0 && size_t(variant.smem_bytes()) <= props->sharedMemPerBlockOptin),
                    "head_tiles: ", plan.head_tiles, " has no kernel instance that fits this device's ",
                    props->sharedMemPerBlockOptin, " bytes of shared memory per block");
  TORCH_CHECK_VALUE(plan.num_ctas < (int64_t(1) << 31), "q: too many tokens for one launch (", args.num_tokens, ")");
  if (args.num_tokens == 0) return;

  const cuda::PrefillParams params = attention_params(args, prefill_items_per_token(args.num_heads, plan.head_tiles));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (plan.kernel == PrefillKernel::kHopperSmall) {
    launch_small_heads_call(cuda::whole_list_params(params), args.num_heads, int(plan.grid_size), stream);
    return;
  }
  if (use_hopper) {
    // One split: the whole lists, output and out_lse written directly. The plan's persistent
    // grid (min(items, SMs)) is the launcher's CTA bound.
    cuda::launch_sparse_mla_attention_hopper(cuda::whole_list_params(params), int(plan.grid_size), stream);
    return;
  }
  TORCH_CHECK_VALUE(cuda::launch_sparse_mla_prefill(variant, params, stream), "head_tiles: no kernel instance for ",
                    plan.head_tiles, " with ", variant.stages, " stages and ", variant.k_tiles, " K tiles");
}

// The decode: the split kernel over (split, token, head block) items (the Hopper kernels where
// they serve the call, else the portable kernel's body; with one split it writes output and
// out_lse itself), then, with several splits, the merge.
void run_decode_cuda(DecodeArgs& args) {
  const at::Tensor& q = args.q;
  TORCH_CHECK_VALUE(q.is_cuda(), "q: expected a CUDA tensor (another argument is on CUDA), got ", q.device());
  const c10::cuda::CUDAGuard device_guard(q.device());
  const cudaDeviceProp* props = checked_device_properties(q, "cake::sparse_mla_decode");
  // The decode's instances fit wherever the prefill's of the same head tile do
  // (portable/prefill_variants.h), so the prefill's target (its head-tile cap, its kernels, the
  // override's demand for the Hopper kernels) is the decode's too.
  const PrefillKernelOverride knobs = prefill_kernel_override();
  validate_decode_args(args, cuda_prefill_target(q.device().index(), knobs));
  const DecodePlan& plan = args.plan;
  const cuda::PrefillVariant variant = cuda::decode_variant_for(int(plan.head_tiles), props->sharedMemPerBlockOptin);
  TORCH_CHECK_VALUE(variant.head_tiles > 0, "head_tiles: ", plan.head_tiles, " has no decode kernel instance that fits "
                    "this device's ", props->sharedMemPerBlockOptin, " bytes of shared memory per block");
  const int64_t head_blocks = decode_head_blocks(args.num_heads, plan.head_tiles);
  // The grid: (token, head block) in x (below 2^31), the split in y (at most 65535); the merge
  // indexes rows (token, head) in 32 bits.
  TORCH_CHECK_VALUE(args.num_tokens * args.num_heads < (int64_t(1) << 30), "q: too many tokens for one launch (",
                    args.num_tokens, ")");
  TORCH_CHECK_VALUE(plan.num_splits <= 65535, "num_splits: expected at most 65535 on CUDA, got ", plan.num_splits);
  if (args.num_tokens == 0) return;

  cuda::DecodeParams params{};
  static_cast<cuda::PrefillParams&>(params) = attention_params(args, head_blocks);
  cuda::set_decode_splits(params, int(plan.num_splits));
  if (plan.num_splits > 1) {
    params.mid_out = args.mid_out.data_ptr<float>();
    params.mid_lse = args.mid_lse.data_ptr<float>();
  }
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  // The split kernel (select_decode_split_kernel): the 64-head Hopper kernel where it serves the
  // head count and tile, or the small-heads kernel for the other calls (a one-split call of
  // 16, 32, ..., 128 heads as the prefill runs it, the rest on its split form), each a persistent
  // grid over (token, head block, split) items, unless the kernel override keeps the GPU on the
  // portable kernel or the plan splits into one-chunk splits; the portable kernel's body
  // otherwise.
  // The Hopper kernels number their items in 32 bits (at most T x H / 16 x splits of them); past
  // that the portable kernel's grid (splits in y) takes the call.
  const bool items_fit = args.num_tokens * ((args.num_heads + 15) / 16) * plan.num_splits < (int64_t(1) << 31);
  const PrefillKernel split_kernel =
      items_fit ? cuda::select_decode_split_kernel(props->major, props->sharedMemPerBlockOptin, args.num_heads,
                                                   plan.head_tiles, plan.num_splits, plan.chunks_per_block, knobs)
                : PrefillKernel::kPortable;
  if (split_kernel == PrefillKernel::kHopper) {
    cuda::launch_sparse_mla_attention_hopper(params, props->multiProcessorCount, stream);
  } else if (split_kernel == PrefillKernel::kHopperSmall && plan.num_splits == 1 && is_prefill_head_count(args.num_heads)) {
    // What the prefill runs for these heads (so the same bits as the prefill's), output written.
    launch_small_heads_call(params, args.num_heads, props->multiProcessorCount, stream);
  } else if (split_kernel == PrefillKernel::kHopperSmall) {
    cuda::launch_sparse_mla_decode_hopper_small(params, int(plan.head_tiles), props->multiProcessorCount, stream);
  } else {
    TORCH_CHECK_VALUE(cuda::launch_sparse_mla_decode_split(variant, params, stream), "head_tiles: no decode kernel "
                      "instance for ", plan.head_tiles);
  }
  if (plan.num_splits > 1) cuda::launch_sparse_mla_decode_merge(params, stream);
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

c10::DeviceIndex current_cuda_device_index() {
  return c10::cuda::device_count() > 0 ? c10::cuda::current_device() : c10::DeviceIndex(-1);
}

PrefillTarget cuda_prefill_target(c10::DeviceIndex index, const PrefillKernelOverride& knobs) {
  const c10::DeviceIndex count = c10::cuda::device_count();
  TORCH_CHECK_VALUE(index >= 0 && index < count, "device: expected a CUDA device index in [0, ", int(count), "), got ",
                    int(index));
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(index);
  const PrefillTarget target = device_target(*props, knobs);
  TORCH_CHECK_VALUE(target.family == PrefillKernel::kHopper || !knobs.requires_hopper(), "kernel override: '",
                    prefill_kernel_name(knobs.kernel.value_or(PrefillKernel::kHopper)), "' is set "
                    "(torch_ops.set_prefill_kernel_override or CAKE_PREFILL_KERNEL), but cuda:", int(index), " (",
                    props->name, ", compute capability ", props->major, ".", props->minor, ") cannot run the Hopper "
                    "kernel", cuda::hopper_prefill_compiled() ? "" : " (this build has no sm_90a code)");
  return target;
}

TORCH_LIBRARY_IMPL(cake, CUDA, m) {
  m.impl("sparse_mla_prefill", &sparse_mla_prefill_op<run_prefill_cuda>);
  m.impl("sparse_mla_decode", &sparse_mla_decode_op<run_decode_cuda>);
  m.impl("nvfp4_pack_cache", &nvfp4_pack_cache_cuda_op);
  m.impl("nvfp4_append_cache", &nvfp4_append_cache_cuda_op);
}

}  // namespace cake
