// Launch body shared by the per-instance .cu files.
#pragma once

#include <c10/cuda/CUDAException.h>

#include "prefill_kernel.cuh"
#include "prefill_launch.h"

namespace cake::cuda {

template <int kHeadTiles, int kStages, int kKTiles>
void launch_sparse_mla_prefill(const PrefillParams& params, cudaStream_t stream) {
  const int smem_bytes = PrefillVariant{kHeadTiles, kStages, kKTiles}.smem_bytes();
  // Above 48 KB a kernel must opt in; the call is cheap and safe during graph capture.
  C10_CUDA_CHECK(cudaFuncSetAttribute(sparse_mla_prefill_kernel<kHeadTiles, kStages, kKTiles>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  const unsigned num_ctas = unsigned(params.num_tokens) * unsigned(params.num_head_blocks);
  constexpr int kThreads = kHeadTiles * PrefillTile::kThreadsPerHeadTile;
  sparse_mla_prefill_kernel<kHeadTiles, kStages, kKTiles><<<num_ctas, kThreads, smem_bytes, stream>>>(params);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace cake::cuda
