// Launches of the small-heads Hopper kernel: the prefill's (whole-list units) and the decode's
// (split units). Built for every arch in the list; the kernel body exists only in the sm_90a image
// (elsewhere it is empty and never launched: see select_prefill_kernel and
// select_decode_split_kernel in ../prefill_kernel_choice.h).
#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>

#include "prefill_small.h"
#include "prefill_small_kernel.cuh"

namespace cake::cuda {
namespace {

// min(units, max_ctas) persistent CTAs over the units of `params` (num_head_blocks: units per token).
template <int kGroupHeads, bool kSplitItems, hopper_small::UnitEnd kEnd, bool kShortSplits = false>
void launch_units(const DecodeParams& params, int max_ctas, cudaStream_t stream) {
  constexpr int kSmemBytes = hopper_small::smem_bytes<kGroupHeads, kSplitItems>();
  const auto kernel = hopper_small::sparse_mla_prefill_small_kernel<kGroupHeads, kSplitItems, kEnd, kShortSplits>;
  // Above 48 KB a kernel must opt in; the call is cheap and safe during graph capture.
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const long long units =
      (long long)params.num_tokens * params.num_head_blocks * (kSplitItems ? params.num_splits : 1);
  const unsigned num_ctas = unsigned(units < max_ctas ? units : max_ctas);
  kernel<<<num_ctas, hopper_small::kThreads, kSmemBytes, stream>>>(params);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  hopper_small::print_small_trace();  // a CAKE_SMALL_TRACE build only
}

}  // namespace

void launch_sparse_mla_prefill_hopper_small(const PrefillParams& params, int num_heads_run, int max_ctas,
                                            cudaStream_t stream) {
  const int group_heads = hopper_small::group_heads_for(num_heads_run);
  DecodeParams unit_params = whole_list_params(params);
  unit_params.num_head_blocks = num_heads_run / group_heads;
  using hopper_small::UnitEnd;
  if (group_heads == 16) {
    launch_units<16, false, UnitEnd::kOutput>(unit_params, max_ctas, stream);
  } else {
    launch_units<32, false, UnitEnd::kOutput>(unit_params, max_ctas, stream);
  }
}

void launch_sparse_mla_decode_hopper_small(const DecodeParams& params, int head_tiles, int max_ctas,
                                           cudaStream_t stream) {
  const int group_heads = hopper_small::decode_unit_heads(params.num_heads, head_tiles);
  DecodeParams unit_params = params;
  unit_params.num_head_blocks = (params.num_heads + group_heads - 1) / group_heads;
  using hopper_small::UnitEnd;
  if (params.num_splits == 1) {
    // One split ends in the output (the sink and out_lse in the kernel, no merge). Only the head
    // counts the prefill's launches do not take come here (H = 8, 24, ..., 120: 16-head units, the
    // last one padded), so there is no 32-head instance of this form.
    TORCH_INTERNAL_ASSERT(group_heads == 16, "a one-split decode of ", params.num_heads, " heads on the split form");
    launch_units<16, true, UnitEnd::kOutput>(unit_params, max_ctas, stream);
  } else if (group_heads == 16) {
    if (largest_split_chunks(params) <= hopper_small::kShortSplitChunks) {
      launch_units<16, true, UnitEnd::kPartial, true>(unit_params, max_ctas, stream);
    } else {
      launch_units<16, true, UnitEnd::kPartial>(unit_params, max_ctas, stream);
    }
  } else {
    launch_units<32, true, UnitEnd::kPartial>(unit_params, max_ctas, stream);
  }
}

}  // namespace cake::cuda
