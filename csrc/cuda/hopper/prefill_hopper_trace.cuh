// A development aid: with -DCAKE_HOPPER_TRACE (e.g. CAKE_NVCC_EXTRA="-DCAKE_HOPPER_TRACE" at
// build time) the first thread of each warpgroup of CTA 0 records clock64() at named points of
// its first kTraceBlocks blocks, and the launch prints them after the kernel ("TRACE role block
// clocks..."): the timeline that shows which role waits for which. Compiled out otherwise.
//
// The points (benchmarks/trace_items.py reads them):
// - roles 0 and 1, the leader and the follower, row = the first block of a pair: 0 start, 1 QK^T
//   done, 2 leader: weights handed over / follower: the leader's reference taken, 3 leader: its
//   own PV retired / follower: its weights stored, 4 leader: the follower's hand-over seen /
//   follower: hand-over done, 5 pair done; 6 leader: its reference moved and its weights formed /
//   follower: its softmax done, 7 leader: its weights stored and its own PV issued / follower: its
//   weights stored and fenced; and the follower's scores step split: 10 past the mbarrier of its
//   block's high half, before the proxy fence (the low half's QK^T issued before it), 8 its whole
//   QK^T issued, 9 past kReferenceReady (the first block's high half waited for too), then 1
//   retired (a point past kScoresIssued as well spills the dequant's loop in the whole-list
//   instance);
// - the same roles, row = the item's last block (odd for an item of an even block count, so no
//   pair's row): the item epilogue, 0 entry, 1 row sums exchanged, 2 this item's Q confirmed
//   landed, 3 O written (into the Q tile, or from registers to global memory), 4 the copy
//   thread's TMA stores of O have read the tile and the next Q's TMA loads are issued; and at
//   the item's start, row = its first block + 1: 6 the item's list read, 7 its Q landed;
// - roles 2 and 3, the dequant warpgroups, row = the block: 0 top, 5 the next block's row source
//   known, 6 the cursors advanced and the copies of the next scales and the index after issued
//   (the block top's bookkeeping done, its wait for the low half next), 1 low half free, 3 low
//   half written, 4 high half free, 2 high half written, 7 the last of its four warps to have
//   written the high half (kDequantTraceEvents of them: points 8 on print as zeros).
#pragma once

#include <cstdio>

#include "../common/trace_clock.cuh"
#include "prefill_hopper_layout.h"

namespace cake::cuda::hopper {

// Besides the per-block points, each role records the CTA's life (trace_life): its entry, the
// end of the barrier set-up, the start of its first item's epilogue (consumers) and its exit, so
// that a short launch (a decode split of two blocks) shows where its fixed time goes.
enum TraceLife : int { kLifeEntry = 0, kLifeSetUp = 1, kLifeFirstEpilogue = 2, kLifeExit = 3, kLifePoints = 4 };

#ifdef CAKE_HOPPER_TRACE
__device__ unsigned long long g_hopper_trace[4][kTraceEvents][kTraceBlocks];
__device__ unsigned long long g_hopper_life[4][kLifePoints];
// (unsigned: row -1, an epilogue's row when CTA 0's first item has no candidates, is left out.)
__device__ __forceinline__ void trace_event(int role, int event, int block) {
  if (blockIdx.x == 0 && threadIdx.x % 128 == 0 && unsigned(block) < kTraceBlocks) g_hopper_trace[role][event][block] = clock64();
}
// The points right after a named barrier read the clock past it (../common/trace_clock.cuh); only
// there: the branch costs registers (spills) elsewhere.
__device__ __forceinline__ void trace_event_past_barrier(int role, int event, int block) {
  if (blockIdx.x == 0 && threadIdx.x % 128 == 0 && unsigned(block) < kTraceBlocks) {
    g_hopper_trace[role][event][block] = clock_past_barrier();
  }
}
__device__ __forceinline__ void trace_life(int role, int point) {
  if (blockIdx.x == 0 && threadIdx.x % 128 == 0) {
    // The role through an opaque move: otherwise ptxas keeps the entry's address of the role's
    // row for the exit's store, live (and spilled) across the whole kernel.
    int opaque_role;
    asm volatile("mov.b32 %0, %1;\n" : "=r"(opaque_role) : "r"(role));
    g_hopper_life[opaque_role][point] = point == kLifeSetUp ? clock_past_barrier() : clock64();
  }
}
// The dequant warpgroups' points: the clock's low word into shared memory (SharedStorage::
// dequant_trace, zeroed by trace_dequant_start at the role's start), copied out with its high word
// by trace_dequant_finish at the role's end, before its exit point (kLifeExit), which therefore
// comes late by the copy (one thread's 384 shared loads and global stores, ~18,000 cycles in the
// logs of 1e6cd63): recorded before the copy, inside the role, the exit point's role index stays
// live across the role and the dequant spills.
// (By the recording thread itself, so that no other thread's zero can land after its first point;
// the other warps' first point 7 comes after their first block's conversion, long after this.)
__device__ __forceinline__ void trace_dequant_start(SharedStorage& smem, int warpgroup) {
  if (blockIdx.x != 0 || threadIdx.x % 128 != 0) return;
  for (int i = 0; i < kDequantTraceEvents * kTraceBlocks; ++i) (&smem.dequant_trace[warpgroup][0][0])[i] = 0u;
}
// CTA 0, read again at each dequant point (an opaque read of %ctaid.x): held in a register across
// the dequant's block loop instead, it made the split instance spill 8 bytes there (56 registers).
// The other roles' points keep blockIdx.x: with this read at every point the build spills 8 bytes
// again (CUDA 13.0).
__device__ __forceinline__ bool trace_in_cta_zero() {
  uint32_t cta;
  asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(cta));
  return cta == 0;
}
__device__ __forceinline__ void trace_dequant_event(SharedStorage& smem, int warpgroup, int event, int block) {
  if (trace_in_cta_zero() && threadIdx.x % 128 == 0 && block < kTraceBlocks) {
    smem.dequant_trace[warpgroup][event][block] = uint32_t(clock64());
  }
}
// Point 7: the warpgroup's last warp to have written its rows' high half (each warp's lane 0
// raises the slot to its clock's low word; a wrap of the low word between the warps' points, once
// in 2^32 cycles, would keep the earlier value): the high half's barrier completes after it.
__device__ __forceinline__ void trace_dequant_last_warp(SharedStorage& smem, int warpgroup, int event, int block) {
  if (trace_in_cta_zero() && threadIdx.x % 32 == 0 && block < kTraceBlocks) {
    atomicMax(&smem.dequant_trace[warpgroup][event][block], uint32_t(clock64()));
  }
}
// A low word above the clock's now is from before the last wrap of the low word (the trace spans
// far less than 2^32 cycles); 0 stays 0 (a point not reached).
__device__ __forceinline__ void trace_dequant_finish(SharedStorage& smem, int warpgroup) {
  if (blockIdx.x != 0 || threadIdx.x % 128 != 0) return;
  const unsigned long long now = clock64();
  for (int event = 0; event < kDequantTraceEvents; ++event) {
    for (int block = 0; block < kTraceBlocks; ++block) {
      const uint32_t low = smem.dequant_trace[warpgroup][event][block];
      unsigned long long clock = (now & ~0xFFFFFFFFull) | low;
      if (clock > now) clock -= 1ull << 32;
      g_hopper_trace[2 + warpgroup][event][block] = low == 0u ? 0ull : clock;
    }
  }
}
// Host side, after a launch: waits for it and prints the timeline (no printf in the kernel:
// ptxas would serialise the wgmmas around the call).
inline void print_trace() {
  static unsigned long long host[4][kTraceEvents][kTraceBlocks];
  static unsigned long long life[4][kLifePoints];
  cudaDeviceSynchronize();
  cudaMemcpyFromSymbol(host, g_hopper_trace, sizeof(host));
  cudaMemcpyFromSymbol(life, g_hopper_life, sizeof(life));
  for (int role = 0; role < 4; ++role) {
    printf("LIFE %d", role);
    for (int point = 0; point < kLifePoints; ++point) printf(" %llu", life[role][point]);
    printf("\n");
  }
  print_trace_rows("TRACE", &host[0][0][0], 4, kTraceEvents, kTraceBlocks);
  fflush(stdout);  // before the caller's own output (benchmarks/trace_items.py marks launches)
}
#else
__device__ __forceinline__ void trace_dequant_start(SharedStorage&, int) {}
__device__ __forceinline__ void trace_dequant_event(SharedStorage&, int, int, int) {}
__device__ __forceinline__ void trace_dequant_last_warp(SharedStorage&, int, int, int) {}
__device__ __forceinline__ void trace_dequant_finish(SharedStorage&, int) {}
__device__ __forceinline__ void trace_event(int, int, int) {}
__device__ __forceinline__ void trace_event_past_barrier(int, int, int) {}
__device__ __forceinline__ void trace_life(int, int) {}
inline void print_trace() {}
#endif

}  // namespace cake::cuda::hopper
