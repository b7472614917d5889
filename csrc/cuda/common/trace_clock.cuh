// The development traces' clock (the 64-head kernel's CAKE_HOPPER_TRACE, the small-heads kernel's
// CAKE_SMALL_TRACE): a clock64() read that cannot run ahead of a named barrier the warp is passing,
// and the host's printout of a trace's [role][event][row] clocks.
#pragma once

#include <cstdint>
#include <cstdio>

namespace cake::cuda {

// The clock once the warp has passed a named barrier. A warp may issue instructions that touch no
// memory past a bar.sync it is still waiting on (the SASS is BAR.*.DEFER_BLOCKING), so a bare
// clock read right after one can give the time the barrier was reached, not passed (a trace of the
// 64-head kernel had its leader past a barrier ~1,200 cycles before the follower arrived), and
// ptxas sees through a dependence on a barrier's result. A shared-memory load cannot pass the
// barrier, and this clock read is predicated on the loaded value, so it waits for the load (1
// stands for the clock if the word happens to be 0x7fffffff).
// The word loaded is the CTA's first word of shared memory (address 0 of the shared window: both
// kernels have shared memory, and naming their dynamic array here would add a second symbol for it).
__device__ __forceinline__ unsigned long long clock_past_barrier() {
  uint32_t word;
  asm volatile("ld.volatile.shared.u32 %0, [%1];\n" : "=r"(word) : "r"(0u) : "memory");
  unsigned long long clock;
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.u32 p, %1, 0x7fffffff;\n\t@p mov.u64 %0, %%clock64;\n\t@!p mov.u64 %0, 1;\n\t}\n"
      : "=l"(clock)
      : "r"(word)
      : "memory");
  return clock;
}

// One line a (role, row): "<tag> role row" and the row's `events` clocks, from clocks laid out
// [role][event][row] (as the kernels record them).
inline void print_trace_rows(const char* tag, const unsigned long long* clocks, int roles, int events, int rows) {
  for (int role = 0; role < roles; ++role) {
    for (int row = 0; row < rows; ++row) {
      printf("%s %d %d", tag, role, row);
      for (int event = 0; event < events; ++event) printf(" %llu", clocks[(role * events + event) * rows + row]);
      printf("\n");
    }
  }
}

}  // namespace cake::cuda
