// Launch of the small-heads Hopper prefill kernel. Built for every arch in the list; the kernel
// body exists only in the sm_90a image (elsewhere it is empty and never launched: see
// select_prefill_kernel in ../prefill_kernel_choice.h).
#include <c10/cuda/CUDAException.h>

#include "prefill_small.h"
#include "../common/tensor_map.h"
#include "prefill_small_kernel.cuh"
#include "prefill_small_params.h"

namespace cake::cuda {
namespace {

// The launch's parameters and its output tensor map. `params` starts at the launch's first head
// (params_from_head) and covers num_heads_run heads of rows params.num_heads apart, so the map
// spans exactly those heads: a unit's box (kGroupHeads heads from head0, within num_heads_run)
// never reaches another launch's heads, which the map's bound would clip anyway. The moved
// pointer keeps the output's alignment (a head is 1,024 bytes); an output view only 4-byte
// aligned (the op accepts those), and every unit of 32 heads (no staging tile), keeps the
// register stores.
template <int kGroupHeads>
HopperSmallParams small_params(const PrefillParams& params, int num_heads_run) {
  HopperSmallParams small{};
  static_cast<PrefillParams&>(small) = params;
  small.output_by_tma = hopper_small::Geometry<kGroupHeads>::kStagesOutput && tma_addressable(params.output);
  if (small.output_by_tma) {
    small.output_map =
        head_rows_tensor_map(params.output, params.num_tokens, num_heads_run, params.num_heads, kGroupHeads);
  }
  return small;
}

template <int kGroupHeads>
void launch_group(const PrefillParams& unit_params, int num_heads_run, int max_ctas, cudaStream_t stream) {
  const HopperSmallParams params = small_params<kGroupHeads>(unit_params, num_heads_run);
  constexpr int kSmemBytes = hopper_small::smem_bytes<kGroupHeads>();
  const auto kernel = hopper_small::sparse_mla_prefill_small_kernel<kGroupHeads>;
  // Above 48 KB a kernel must opt in; the call is cheap and safe during graph capture.
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const long long units = (long long)params.num_tokens * params.num_head_blocks;
  const unsigned num_ctas = unsigned(units < max_ctas ? units : max_ctas);
  kernel<<<num_ctas, hopper_small::kThreads, kSmemBytes, stream>>>(params);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void launch_sparse_mla_prefill_hopper_small(const PrefillParams& params, int num_heads_run, int max_ctas,
                                            cudaStream_t stream) {
  const int group_heads = hopper_small::group_heads_for(num_heads_run);
  PrefillParams unit_params = params;
  unit_params.num_head_blocks = num_heads_run / group_heads;
  if (group_heads == 16) {
    launch_group<16>(unit_params, num_heads_run, max_ctas, stream);
  } else {
    launch_group<32>(unit_params, num_heads_run, max_ctas, stream);
  }
}

}  // namespace cake::cuda
