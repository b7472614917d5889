// Launch bodies shared by the per-instance .cu files (prefill_ht*.cu, decode_ht*.cu).
#pragma once

#include <c10/cuda/CUDAException.h>

#include "attention_kernel.cuh"
#include "decode_launch.h"
#include "prefill_launch.h"

namespace cake::cuda {

// One launch of `kernel` (an instance of {kHeadTiles, kStages, kKTiles}) over `grid`.
template <int kHeadTiles, int kStages, int kKTiles, typename Params>
void launch_portable_kernel(void (*kernel)(Params), const Params& params, dim3 grid, cudaStream_t stream) {
  const int smem_bytes = PrefillVariant{kHeadTiles, kStages, kKTiles}.smem_bytes();
  // Above 48 KB a kernel must opt in; the call is cheap and safe during graph capture.
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  constexpr int kThreads = kHeadTiles * PrefillTile::kThreadsPerHeadTile;
  kernel<<<grid, kThreads, smem_bytes, stream>>>(params);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <int kHeadTiles, int kStages, int kKTiles>
void launch_sparse_mla_prefill(const PrefillParams& params, cudaStream_t stream) {
  const dim3 grid(unsigned(params.num_tokens) * unsigned(params.num_head_blocks));
  launch_portable_kernel<kHeadTiles, kStages, kKTiles>(sparse_mla_prefill_kernel<kHeadTiles, kStages, kKTiles>, params,
                                                       grid, stream);
}

template <int kHeadTiles, int kStages, int kKTiles>
void launch_sparse_mla_decode_split(const DecodeParams& params, cudaStream_t stream) {
  // x: (token, head block), as the prefill; y: the split (blockIdx.y in the kernel).
  const dim3 grid(unsigned(params.num_tokens) * unsigned(params.num_head_blocks), unsigned(params.num_splits));
  launch_portable_kernel<kHeadTiles, kStages, kKTiles>(sparse_mla_decode_split_kernel<kHeadTiles, kStages, kKTiles>,
                                                       params, grid, stream);
}

}  // namespace cake::cuda
