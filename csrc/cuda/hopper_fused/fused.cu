// Launch of the fused 64-head Hopper kernel (fused.h): compiled only with -DCAKE_HOPPER_FUSED (a
// development build); for every arch in the list then, the kernel body only in the sm_90a image.
#ifdef CAKE_HOPPER_FUSED
#include <c10/cuda/CUDAException.h>

#include "fused.h"
#include "fused_kernel.cuh"

namespace cake::cuda {

void launch_sparse_mla_prefill_hopper_fused(const DecodeParams& params, int max_ctas, cudaStream_t stream) {
  constexpr int kSmemBytes = HopperFusedPrefillLayout::kSmemBytes;
  const long long items = (long long)params.num_tokens * params.num_head_blocks;
  const unsigned num_ctas = unsigned(items < max_ctas ? items : max_ctas);
  // Above 48 KB a kernel must opt in; the call is cheap and safe during graph capture.
  C10_CUDA_CHECK(cudaFuncSetAttribute(hopper_fused::sparse_mla_fused_kernel,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  hopper_fused::sparse_mla_fused_kernel<<<num_ctas, HopperFusedPrefillLayout::kThreads, kSmemBytes, stream>>>(params);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace cake::cuda

#endif  // CAKE_HOPPER_FUSED
