// Thin wrappers over the PTX instructions the portable (sm_80+) kernels use: asynchronous
// 16-byte copies, ldmatrix, bf16 mma.sync, ex2. One instruction each, so kernels read as the
// algorithm and the SASS maps one-to-one.
#pragma once

#include <cuda_bf16.h>
#include <cstdint>

namespace cake::cuda {

__device__ __forceinline__ uint32_t smem_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// 16-byte global->shared copy that bypasses L1. With `valid == false` nothing is read and the
// destination is zero-filled (src-size 0), so masked rows cost no memory traffic.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_size) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&regs)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(regs[0]), "=r"(regs[1]), "=r"(regs[2]), "=r"(regs[3])
               : "r"(address));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&regs)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(regs[0]), "=r"(regs[1]), "=r"(regs[2]), "=r"(regs[3])
               : "r"(address));
}

// D[16x8] += A[16x16] * B[16x8], bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_bf16_16x8x16(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float low, float high) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// Byte permute: output byte i is byte (selector >> 4i) & 7 of the 8-byte value {high:low}.
__device__ __forceinline__ uint32_t byte_perm(uint32_t low, uint32_t high, uint32_t selector) {
  uint32_t result;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(result) : "r"(low), "r"(high), "r"(selector));
  return result;
}

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  const __nv_bfloat162 product =
      __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
  return *reinterpret_cast<const uint32_t*>(&product);
}

// Barrier among the 128 threads (4 warps) of head tile `tile` (0..3): named barrier 1 + tile
// (0 is __syncthreads). Literal ids keep the compiler from reserving all 16 barriers.
__device__ __forceinline__ void head_tile_barrier(int tile) {
  switch (tile) {
    case 0: asm volatile("bar.sync 1, 128;\n" ::: "memory"); break;
    case 1: asm volatile("bar.sync 2, 128;\n" ::: "memory"); break;
    case 2: asm volatile("bar.sync 3, 128;\n" ::: "memory"); break;
    default: asm volatile("bar.sync 4, 128;\n" ::: "memory"); break;
  }
}

// Sum / max over the 4 lanes of a quad (lane ^ 1, lane ^ 2), which hold one MMA fragment row;
// the same fixed order in every lane, so all four get the same bits.
__device__ __forceinline__ float quad_sum(float value) {
  value += __shfl_xor_sync(0xffffffffu, value, 1);
  return value + __shfl_xor_sync(0xffffffffu, value, 2);
}
__device__ __forceinline__ float quad_max(float value) {
  value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, 1));
  return fmaxf(value, __shfl_xor_sync(0xffffffffu, value, 2));
}

// 2^x with the hardware approximation (relative error ~2^-22); ex2(-inf) = 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace cake::cuda
