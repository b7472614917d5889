// Development check of the 64-head kernel (-DCAKE_HOPPER_QK_RECHECK, docs/hopper_kernel.md,
// "Development builds"): after a consumer's QK^T of a block has retired, while it still holds the
// block's halves, it issues the same 32 k-steps again into the same registers and compares a hash
// of both results. The tensor cores give the same bits for the same operands, so a thread whose
// second S differs read K or Q bytes that were not final the first time: a hand-over from the
// dequant (or the Q load) that did not make its writes visible to the wgmma. Each such warp is
// counted and its first few are recorded; the host prints them after the launch (no printf in the
// kernel: ptxas would serialise the wgmmas around the call). Results as main's; times are not.
#pragma once

#include <cstdio>

namespace cake::cuda::hopper {

#if defined(CAKE_HOPPER_QK_RECHECK)
constexpr int kRecheckRecords = 32;
// The follower's blocks are rechecked; with CAKE_HOPPER_QK_RECHECK=2 the leader's too (ptxas then
// spills ~580 bytes a thread in the leader: its times are far from main's).
constexpr bool kRecheckLeader = CAKE_HOPPER_QK_RECHECK == 2;
struct QkRecheckLog {
  unsigned int mismatches;  // warps whose second S differed, over every launch since the last print
  unsigned int blocks;      // (warp, block) rechecks made
  int record[kRecheckRecords][4];  // CTA, consumer, block in the CTA's walk, warp
};
__device__ QkRecheckLog g_qk_recheck;

// Order-sensitive hash of a thread's 32 scores (their bits).
__device__ __forceinline__ uint32_t score_hash(const float (&s)[32]) {
  uint32_t h = 0;
#pragma unroll
  for (int i = 0; i < 32; ++i) h = h * 0x9E3779B1u + __float_as_uint(s[i]);
  return h;
}

// A warp's verdict on one recheck (lane 0 records it).
__device__ __forceinline__ void record_recheck(bool differs, int consumer, int gblock) {
  const bool any = __any_sync(0xffffffffu, differs);
  if (threadIdx.x % 32 != 0) return;
  atomicAdd(&g_qk_recheck.blocks, 1u);
  if (!any) return;
  const unsigned int slot = atomicAdd(&g_qk_recheck.mismatches, 1u);
  if (slot < kRecheckRecords) {
    g_qk_recheck.record[slot][0] = blockIdx.x;
    g_qk_recheck.record[slot][1] = consumer;
    g_qk_recheck.record[slot][2] = gblock;
    g_qk_recheck.record[slot][3] = (threadIdx.x / 32) % 4;
  }
}

// Host side, after a launch: waits for it, prints a QK_RECHECK line and its records, and clears the
// log for the next launch.
inline void print_qk_recheck() {
  QkRecheckLog log;
  cudaDeviceSynchronize();
  cudaMemcpyFromSymbol(&log, g_qk_recheck, sizeof(log));
  printf("QK_RECHECK mismatching warps %u of %u warp rechecks\n", log.mismatches, log.blocks);
  for (unsigned int i = 0; i < log.mismatches && i < unsigned(kRecheckRecords); ++i) {
    printf("QK_RECHECK cta %d consumer %d block %d warp %d\n", log.record[i][0], log.record[i][1], log.record[i][2],
           log.record[i][3]);
  }
  fflush(stdout);
  const QkRecheckLog cleared = {};
  cudaMemcpyToSymbol(g_qk_recheck, &cleared, sizeof(cleared));
}
#else
constexpr bool kRecheckLeader = false;
inline void print_qk_recheck() {}
#endif

}  // namespace cake::cuda::hopper
