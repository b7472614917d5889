// Launch of the Hopper prefill kernel. Built for every arch in the list; the kernel body exists
// only in the sm_90a image (elsewhere it is empty and never launched: see hopper_prefill_serves).
#include <c10/cuda/CUDAException.h>

#include "prefill_hopper.h"
#include "prefill_hopper_kernel.cuh"

namespace cake::cuda {

void launch_sparse_mla_prefill_hopper(const PrefillParams& params, cudaStream_t stream) {
  constexpr int kSmemBytes = HopperPrefillLayout::kSmemBytes;
  // Above 48 KB a kernel must opt in; the call is cheap and safe during graph capture.
  C10_CUDA_CHECK(cudaFuncSetAttribute(sparse_mla_prefill_hopper_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      kSmemBytes));
  const unsigned num_ctas = unsigned(params.num_tokens) * unsigned(params.num_head_blocks);
  sparse_mla_prefill_hopper_kernel<<<num_ctas, HopperPrefillLayout::kThreads, kSmemBytes, stream>>>(params);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace cake::cuda
