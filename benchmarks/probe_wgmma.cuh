// The wgmma shape the probes use that the kernels do not (small_roles_probe.cu, wgmma_rate_probe.cu):
// S^T = K Q^T at N = 16 with both operands K-major in shared memory. One instruction.
#pragma once

#include <cstdint>

// D[64 x 16] (+)= A[64 x 16] * B[16 x 16]: both K-major in shared memory.
__device__ __forceinline__ void wgmma_m64n16k16_ss(float (&d)[8], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)));
}
