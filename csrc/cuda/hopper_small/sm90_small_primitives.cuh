// The sm_90a instructions the small-heads Hopper prefill adds to ../hopper/sm90_primitives.cuh (whose
// mbarrier, fence, setmaxnreg and descriptor wrappers it uses): wgmma with a register A operand
// (QK^T) and with a transposed shared-memory A operand (PV) at N = 16 and 32, a named barrier
// that ORs a predicate, the global loads of the conversion and an L2 prefetch. One instruction
// each. Only meaningful in code compiled for sm_90a.
#pragma once

#include <cstdint>

namespace cake::cuda::sm90 {

// D[64 x 16] (+)= A[64 x 16] * B[16 x 16]: A from registers (the wgmma A fragment: warp w holds
// rows 16 w .. 16 w + 15), B K-major in shared memory.
__device__ __forceinline__ void wgmma_m64n16k16_rs(float (&d)[8], const uint32_t (&a)[4], uint64_t desc_b,
                                                   bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)));
}

// D[64 x 32] (+)= A[64 x 16] * B[16 x 32]: A from registers (the wgmma A fragment: warp w holds
// rows 16 w .. 16 w + 15), B K-major in shared memory.
__device__ __forceinline__ void wgmma_m64n32k16_rs(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b,
                                                   bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)));
}

// D[64 x 16] += A[64 x 16] * B[16 x 16]: A MN-major (transposed), B K-major, both in shared memory.
__device__ __forceinline__ void wgmma_m64n16k16_ss_ta(float (&d)[8], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, 1, 1, 1, 1, 0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(desc_a), "l"(desc_b));
}

// D[64 x 32] += A[64 x 16] * B[16 x 32]: A MN-major (transposed), B K-major, both in shared memory.
__device__ __forceinline__ void wgmma_m64n32k16_ss_ta(float (&d)[16], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, 1, 1, 1, 1, 0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(desc_a), "l"(desc_b));
}

// The shape for N = kN (16 or 32) heads.
template <int kN>
__device__ __forceinline__ void wgmma_rs(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t desc_b, bool accumulate) {
  static_assert(kN == 16 || kN == 32, "N = 16 or 32");
  if constexpr (kN == 16) {
    wgmma_m64n16k16_rs(d, a, desc_b, accumulate);
  } else {
    wgmma_m64n32k16_rs(d, a, desc_b, accumulate);
  }
}
template <int kN>
__device__ __forceinline__ void wgmma_ss_ta(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b) {
  static_assert(kN == 16 || kN == 32, "N = 16 or 32");
  if constexpr (kN == 16) {
    wgmma_m64n16k16_ss_ta(d, desc_a, desc_b);
  } else {
    wgmma_m64n32k16_ss_ta(d, desc_a, desc_b);
  }
}

// Named barrier `kId` over `kThreads` threads that also returns whether `value` was true in any of
// them (bar.red.or).
template <int kId, int kThreads>
__device__ __forceinline__ bool named_barrier_or(bool value) {
  uint32_t any;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, %2, %3, p;\nselp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(any)
      : "r"(uint32_t(value)), "n"(kId), "n"(kThreads)
      : "memory");
  return any != 0;
}

// Global loads of the conversion, through the read-only path. The code bytes of a row are read once
// and 32 contiguous bytes per warp instruction and row: not kept in L1 (ld_global_nc_8_no_l1,
// ../common/ptx_primitives.cuh). The RoPE and scale bytes are read by two instructions (or by the
// four threads of a row) that each use half of a sector: kept in L1, so the second one hits.
__device__ __forceinline__ uint4 ld_global_nc_16(const void* pointer) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(pointer));
  return v;
}

// The same loads where `valid`, nothing read otherwise: the registers then keep what they held
// (the caller masks such a row's values where it uses them). One predicated load into the
// registers themselves: a `valid ? load : 0` select becomes a predicated move that ptxas places
// where the loop carries the registers (right after the load, at the end of the chunk), and that
// move waits for the load.
__device__ __forceinline__ void ld_global_nc_16_if(uint4& v, const void* pointer, bool valid) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %4, 0;\n @p ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%5];\n}\n"
      : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)
      : "r"(int(valid)), "l"(pointer));
}
__device__ __forceinline__ void ld_global_nc_8_no_l1_if(uint2& v, const void* pointer, bool valid) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n @p ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%3];\n}\n"
      : "+r"(v.x), "+r"(v.y)
      : "r"(int(valid)), "l"(pointer));
}

// Brings `bytes` (a multiple of 16) from a 16-byte aligned global address into L2; no completion
// to wait for.
__device__ __forceinline__ void prefetch_l2(const void* pointer, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(pointer), "r"(bytes) : "memory");
}

}  // namespace cake::cuda::sm90
