// A development aid: with -DCAKE_SMALL_TRACE (e.g. CAKE_NVCC_EXTRA="-DCAKE_SMALL_TRACE" at build
// time) the first thread of each warpgroup of CTA 0 records clock64() at named points of the CTA's
// first kTraceChunks chunks, and each launch prints them after the kernel ("STRACE role chunk
// clocks..."): the timeline that shows which warpgroup waits for which. Compiled out otherwise.
//
// The points (benchmarks/trace_small.py reads them), row = the chunk over the CTA's walk:
// - role 0, the attend warpgroup: 0 the chunk's start, 1 k_full passed, 2 the softmax done (S
//   halves read, P^T written), 3 the kPReady barrier passed, 4 PV issued, 5 PV retired (k_empty
//   arrived), 6 the chunk's end (at 16 heads a unit, the row table's entries written);
// - roles 1 and 2, converters 0 and 1: 0 the chunk's top, 1 the next chunk's row sources known
//   (and where converter 0 writes the row table, its entries made and the next indices loaded),
//   2 k_empty passed (the K tile free; the entries stored), 3 converted (QK^T retired), 4 s_empty
//   passed, 5 the S half stored and k_full arrived; inside the conversion, 6 its first half of
//   the NoPE group slots issued (slot kSlots / 2 - 1 done), 7 all of them (converter 1's RoPE
//   k-steps follow).
// Besides the per-chunk points, each role records CTA 0's life (trace_life, printed as `LIFE role
// clocks...`, the 64-head kernel's format): its entry, the end of the barrier set-up, the start of
// its first unit's epilogue (the attend warpgroup) and its exit, so that a short launch (a decode
// split of one or two chunks) shows where its fixed time goes.
#pragma once

#include <cstdio>

#include "../common/trace_clock.cuh"

namespace cake::cuda::hopper_small {

constexpr int kTraceRoles = 3;
constexpr int kTraceEvents = 8;
enum TraceLife : int { kLifeEntry = 0, kLifeSetUp = 1, kLifeFirstEpilogue = 2, kLifeExit = 3, kLifePoints = 4 };

#ifdef CAKE_SMALL_TRACE
constexpr int kTraceChunks = 64;
__device__ unsigned long long g_small_trace[kTraceRoles][kTraceEvents][kTraceChunks];
__device__ unsigned long long g_small_life[kTraceRoles][kLifePoints];
__device__ __forceinline__ void trace_event(int role, int event, int chunk) {
  if (blockIdx.x == 0 && threadIdx.x % 128 == 0 && chunk < kTraceChunks) g_small_trace[role][event][chunk] = clock64();
}
// The clock past a named barrier (../common/trace_clock.cuh), for the point right after one.
__device__ __forceinline__ void trace_event_past_barrier(int role, int event, int chunk) {
  if (blockIdx.x == 0 && threadIdx.x % 128 == 0 && chunk < kTraceChunks) {
    g_small_trace[role][event][chunk] = clock_past_barrier();
  }
}
__device__ __forceinline__ void trace_life(int role, int point) {
  if (blockIdx.x == 0 && threadIdx.x % 128 == 0) {
    g_small_life[role][point] = point == kLifeSetUp ? clock_past_barrier() : clock64();
  }
}
// Host side, after a launch: waits for it and prints the timeline (no printf in the kernel:
// ptxas would serialise the wgmmas around the call).
inline void print_small_trace() {
  static unsigned long long host[kTraceRoles][kTraceEvents][kTraceChunks];
  static unsigned long long life[kTraceRoles][kLifePoints];
  cudaDeviceSynchronize();
  cudaMemcpyFromSymbol(host, g_small_trace, sizeof(host));
  cudaMemcpyFromSymbol(life, g_small_life, sizeof(life));
  for (int role = 0; role < kTraceRoles; ++role) {
    printf("LIFE %d", role);
    for (int point = 0; point < kLifePoints; ++point) printf(" %llu", life[role][point]);
    printf("\n");
  }
  print_trace_rows("STRACE", &host[0][0][0], kTraceRoles, kTraceEvents, kTraceChunks);
  fflush(stdout);  // before the caller's own output (benchmarks/trace_small.py marks launches)
  // Zeros for the next launch, so that a point it does not reach reads "not recorded".
  static const unsigned long long zeros[kTraceRoles][kTraceEvents][kTraceChunks] = {};
  static const unsigned long long life_zeros[kTraceRoles][kLifePoints] = {};
  cudaMemcpyToSymbol(g_small_trace, zeros, sizeof(zeros));
  cudaMemcpyToSymbol(g_small_life, life_zeros, sizeof(life_zeros));
}
#else
__device__ __forceinline__ void trace_event(int, int, int) {}
__device__ __forceinline__ void trace_event_past_barrier(int, int, int) {}
__device__ __forceinline__ void trace_life(int, int) {}
inline void print_small_trace() {}
#endif

}  // namespace cake::cuda::hopper_small
