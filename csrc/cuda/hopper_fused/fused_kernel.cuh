// The fused 64-head Hopper (sm_90a) sparse-MLA prefill over the NVFP4 cache, a development kernel
// (fused_layout.h): a persistent, warp-specialised kernel over (token, 64 heads) items, chunk by
// chunk (64 candidates). Warpgroups:
//   - converters 0 and 1 (fused_convert.cuh): the chunks of their parity, converted into the
//     register A operand of S^T = K Q^T and into the chunk's K tile, then the chunk's softmax;
//   - accumulators 0 and 1 (fused_accumulate.cuh): O = P V over half of the dims each, every
//     chunk in order, the item's epilogue; beside it the row table (0) and the RoPE copies (1).
// Chunk j uses K tile and P tile j % 2; the hand-overs are mbarriers (fused_layout.h).
#pragma once

#include "../common/decode_params.h"
#include "../common/ptx_primitives.cuh"
#include "../hopper/sm90_primitives.cuh"
#include "fused_accumulate.cuh"
#include "fused_convert.cuh"
#include "fused_layout.h"

namespace cake::cuda::hopper_fused {

__global__ void __launch_bounds__(kThreads, 1) sparse_mla_fused_kernel(const __grid_constant__ DecodeParams params) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  extern __shared__ __align__(1024) uint8_t smem_bytes[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_bytes);
  // Broadcast from lane 0 so that ptxas knows the role branches below are warp-uniform (code it
  // sees as divergent gets its wgmmas serialised).
  const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / kWarpgroupThreads, 0);
  const int thread = threadIdx.x % kWarpgroupThreads;
  if (threadIdx.x == 0) {
    if ((smem_address(smem_bytes) & 1023u) != 0) __trap();  // the swizzled tiles need 1024-byte alignment
    for (int c = 0; c < 2; ++c) {
      mbarrier_init(smem_address(&smem.p_full[c]), kWarpgroupThreads);
      for (int p = 0; p < kAccumulators; ++p) mbarrier_init(smem_address(&smem.k_empty[c][p]), kWarpgroupThreads);
      mbarrier_init(smem_address(&smem.rope_full[c]), kChunkRows);
    }
    for (int slot = 0; slot < kTableSlots; ++slot) {
      mbarrier_init(smem_address(&smem.table_full[slot]), kChunkRows);
      mbarrier_init(smem_address(&smem.scales_full[slot]), kChunkRows);
    }
    mbarrier_init(smem_address(&smem.q_full), kWarpgroupThreads);
    mbarrier_init(smem_address(&smem.q_free), kWarpgroupThreads);
  }
  __syncthreads();
  // setmaxnreg: the side that claims registers waits until the other side has released them.
  if (warpgroup < kAccumulators) {
    claim_registers<kAccumulatorRegisters>();
    if (warpgroup == 0) {
      AccumulateRole<0>(params, smem, thread).run();
    } else {
      AccumulateRole<1>(params, smem, thread).run();
    }
  } else {
    release_registers<kConverterRegisters>();
    if (warpgroup == kAccumulators) {
      ConvertRole<0>(params, smem).run();
    } else {
      ConvertRole<1>(params, smem).run();
    }
  }
#endif
}

}  // namespace cake::cuda::hopper_fused
