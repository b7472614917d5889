// Hopper (sm_90a) sparse-MLA attention over the NVFP4 cache: a persistent, warp-specialised
// kernel for the prefill and for the decode's splits.
//
// CTA c walks the work items (token, 64 heads, split) c, c + gridDim.x, ..., block by block (64
// candidates, one list chunk), with four warpgroups:
//   - consumers 0 and 1 (prefill_hopper_consumer.cuh): an item's blocks in pairs, consumer c runs
//     QK^T and the softmax of the pair's block c, the reference handed from 0 to 1, and each
//     accumulates its 256 output dims over both blocks;
//   - dequant warpgroups 0 and 1 (prefill_hopper_dequant.cuh): gather half d of each block's rows
//     into registers, convert NVFP4 -> bf16 and write K tile j % 2 (the RoPE dims by cp.async).
// The consumers also load each item's Q into the Q tile by TMA, and send its O out by TMA stores
// through the item's last K tile (or from registers where the output is only 4-byte aligned; a
// split item's fp32 partial through the Q tile; prefill_hopper_epilogue.cuh).
// Two 64-row K tiles hold two blocks, each handed over by dim halves (half_full / half_empty
// mbarriers), so a half is rewritten as soon as its last reader is done.
// docs/hopper_kernel.md describes the schedule, the budgets and the measured profile.
#pragma once

#include "prefill_hopper_consumer.cuh"
#include "prefill_hopper_dequant.cuh"
#include "prefill_hopper_layout.h"
#include "prefill_hopper_params.h"

namespace cake::cuda::hopper {

// kSplitItems: the decode's split items (partials into the scratch) when true; the whole lists
// (output and LSE written directly) when false, which is the prefill's instance.
template <bool kSplitItems>
__global__ void __launch_bounds__(kThreads, 1)
    sparse_mla_attention_hopper_kernel(const __grid_constant__ HopperParams params) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  extern __shared__ __align__(1024) uint8_t smem_bytes[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_bytes);
  // Broadcast from lane 0 so that ptxas knows the role branches below are warp-uniform: code it
  // sees as divergent gets its wgmmas serialised (ptxas info C7520), each waiting for the last.
  const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / kWarpgroupThreads, 0);
  trace_life(warpgroup, kLifeEntry);
  if constexpr (kSplitItems) launch_dependent_grids();  // the decode's merge waits for this grid's end
  if (threadIdx.x == 0) {
    // The first item's Q load waits for this descriptor otherwise; a short launch (a decode split)
    // pays that fetch on its critical path.
    prefetch_tensor_map(&params.q_map);
    if (params.output_aligned) prefetch_tensor_map(kSplitItems ? &params.partial_map : &params.output_map);
    if ((smem_address(smem_bytes) & 1023u) != 0) __trap();  // the swizzled tiles need 1024-byte alignment
    mbarrier_init(smem_address(&smem.q_full), kConsumers);  // each consumer loads half of Q (one expect_tx arrival)
    for (int parity = 0; parity < 2; ++parity) {
      // Each dequant thread arrives once on the low half (after its stores) and twice on the high
      // half: after its stores, and (cp.async) when its RoPE copies land.
      mbarrier_init(smem_address(&smem.half_full[parity][kLowDims]), kDequantThreads);
#if CAKE_HOPPER_WRITER_FENCE == 2
      mbarrier_init(smem_address(&smem.half_full[parity][kHighDims]), kDequantThreads);  // one arrival (variant)
#else
      mbarrier_init(smem_address(&smem.half_full[parity][kHighDims]), 2 * kDequantThreads);
#endif
      for (int half = 0; half < 2; ++half) mbarrier_init(smem_address(&smem.half_empty[parity][half]), kConsumerThreads);
    }
    fence_mbarrier_init();
  }
#if defined(CAKE_HOPPER_NO_TILE_STORES)
  // Development timing only: the dequant writes no NoPE dims into the K tiles; they start at zero
  // so that no score is made of uninitialised shared memory (a whole-list item's O, which leaves
  // through a K tile, stays in it for later blocks' scores: timing only either way).
  for (int i = threadIdx.x; i < kKTiles * kKTileBytes / 16; i += kThreads) {
    reinterpret_cast<uint4*>(smem.k)[i] = make_uint4(0, 0, 0, 0);
  }
#endif
#if defined(CAKE_HOPPER_MMA_ROW_SUMS)
  // The ones tile of the leader's row-sum MMAs (written once; wgmma, the async proxy, reads it).
  if (threadIdx.x < kOnesTileBytes / 16) {
    reinterpret_cast<uint4*>(smem.ones)[threadIdx.x] = make_uint4(0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u);
    fence_proxy_async();
  }
#endif
  __syncthreads();
  trace_life(warpgroup, kLifeSetUp);
  if (warpgroup >= kConsumers) {
    release_registers<kDequantRegisters>();
#ifdef CAKE_HOPPER_CONSUMERS_ALONE  // development timing only: wrong results
    return;
#endif
    DequantRole<kSplitItems>(params, smem, warpgroup - kConsumers, threadIdx.x % kWarpgroupThreads).run();
    trace_life(warpgroup, kLifeExit);
  } else {
    claim_registers<kConsumerRegisters>();
#ifdef CAKE_HOPPER_DEQUANT_ALONE  // development timing only: wrong results
    return;
#endif
    ConsumerRole<kSplitItems>(params, smem, warpgroup, threadIdx.x % kWarpgroupThreads).run();
    trace_life(warpgroup, kLifeExit);
  }
#endif
}

}  // namespace cake::cuda::hopper
