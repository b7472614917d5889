// Launch of the small-heads Hopper prefill kernel. Built for every arch in the list; the kernel
// body exists only in the sm_90a image (elsewhere it is empty and never launched: see
// select_prefill_kernel in ../prefill_kernel_choice.h).
#include <c10/cuda/CUDAException.h>

#include "prefill_small.h"
#include "prefill_small_kernel.cuh"

namespace cake::cuda {
namespace {

template <int kGroupHeads>
void launch_group(const PrefillParams& params, int max_ctas, cudaStream_t stream) {
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
    launch_group<16>(unit_params, max_ctas, stream);
  } else {
    launch_group<32>(unit_params, max_ctas, stream);
  }
}

}  // namespace cake::cuda
