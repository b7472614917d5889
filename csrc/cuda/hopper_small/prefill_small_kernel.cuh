// Small-heads Hopper (sm_90a) sparse-MLA prefill over the NVFP4 cache: a persistent,
// warp-specialised kernel for 16 or 32 heads a unit (docs/hopper_small_kernel.md), and its split
// form for the decode (kSplitItems: a unit is also one split of the token's chunks; kEnd: it ends
// in a partial for the merge, or, with one split, in the output; kShortSplits: the form for splits
// of a few chunks, UnitForm in prefill_small_layout.h).
//
// CTA c walks the units (token, kGroupHeads heads[, split]) c, c + gridDim.x, ..., chunk by chunk
// (64 candidates, one list chunk), with three warpgroups:
//   - converters 0 and 1 (prefill_small_convert.cuh): each converts its half of every candidate
//     row's dims into the register A operand of its half of S^T = K Q^T (wgmma, M = 64 candidates,
//     N = the unit's heads) and into the chunk's K tile, and hands its S half over;
//   - attend (prefill_small_attend.cuh): softmax over the chunk, P^T, and O^T += V^T P^T (wgmma,
//     V^T = the K tile read MN-major), then the unit's epilogue (O stored from registers).
// Two K tiles hold two chunks: the converters fill chunk j + 1 while PV reads chunk j, handing
// over on k_full / k_empty mbarriers (and s_empty for the S buffers).
#pragma once

#include "../common/decode_params.h"
#include "../common/ptx_primitives.cuh"
#include "../hopper/sm90_primitives.cuh"
#include "prefill_small_attend.cuh"
#include "prefill_small_convert.cuh"
#include "prefill_small_layout.h"

namespace cake::cuda::hopper_small {

// Moves this warpgroup's registers to `kRegisters` (setmaxnreg: down releases, up claims).
template <int kRegisters>
__device__ __forceinline__ void set_registers() {
  if constexpr (kRegisters < kLaunchRegisters) {
    sm90::release_registers<kRegisters>();
  } else if constexpr (kRegisters > kLaunchRegisters) {
    sm90::claim_registers<kRegisters>();
  }
}

template <int kGroupHeads, bool kSplitItems, UnitEnd kEnd, bool kShortSplits>
__global__ void __launch_bounds__(kThreads, 1)
    sparse_mla_prefill_small_kernel(const __grid_constant__ DecodeParams params) {
  static_assert(kSplitItems || kEnd == UnitEnd::kOutput, "only a split unit ends in a partial");
  static_assert(!kShortSplits || kSplitItems, "the short form is a decode split's");
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  using G = Geometry<kGroupHeads>;
  extern __shared__ __align__(1024) uint8_t smem_bytes[];
  using Storage = SharedStorage<kGroupHeads, kSplitItems>;
  Storage& smem = *reinterpret_cast<Storage*>(smem_bytes);
  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  const int thread = threadIdx.x % kWarpgroupThreads;
  trace_life(warpgroup, kLifeEntry);
  if (threadIdx.x == 0) {
    if ((smem_address(smem_bytes) & 1023u) != 0) __trap();  // the swizzled tiles need 1024-byte alignment
    for (int tile = 0; tile < kKTiles; ++tile) {
      mbarrier_init(smem_address(&smem.k_full[tile]), kConverterThreads);
      mbarrier_init(smem_address(&smem.k_empty[tile]), kWarpgroupThreads);
    }
    for (int buffer = 0; buffer < G::kSBuffers; ++buffer) mbarrier_init(smem_address(&smem.s_empty[buffer]), kWarpgroupThreads);
    for (int slot = 0; slot < kTableSlots; ++slot) mbarrier_init(smem_address(&smem.table_full[slot]), kChunkRows);
  }
  __syncthreads();
  trace_life(warpgroup, kLifeSetUp);
  // setmaxnreg: the side that claims registers waits until the other side has released them.
  if (warpgroup == 0) {
    set_registers<G::kAttendRegisters>();
    AttendRole<kGroupHeads, kSplitItems, kEnd, kShortSplits>(params, smem, thread).run();
    trace_life(warpgroup, kLifeExit);
  } else {
    set_registers<G::kConvertRegisters>();
    if (warpgroup == 1) {
      ConvertRole<kGroupHeads, 0, kSplitItems, kShortSplits>(params, smem, thread).run();
    } else {
      ConvertRole<kGroupHeads, 1, kSplitItems, kShortSplits>(params, smem, thread).run();
    }
    trace_life(warpgroup, kLifeExit);
  }
#endif
}

}  // namespace cake::cuda::hopper_small
