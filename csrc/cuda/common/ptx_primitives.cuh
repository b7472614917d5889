// Thin wrappers over the PTX instructions that both CUDA prefill kernels use (all sm_80+):
// asynchronous 16-byte copies, named barriers, byte permutes, bf16x2 packing and multiplies,
// read-only loads that skip L1, 16-byte stores, quad shuffles (and the quad's word transpose, two
// rounds of them), ex2. One instruction each otherwise, so kernels read as the algorithm and the
// SASS maps one-to-one. Kernel-specific ones: ../portable/sm80_primitives.cuh (ldmatrix, mma.sync) and
// ../hopper/sm90_primitives.cuh (wgmma, mbarriers, setmaxnreg).
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
// 4-byte global->shared copy (through L1: .cg takes 16 bytes only).
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// 16 (8) bytes from global memory through the read-only path, not kept in L1: for bytes read
// once (a candidate row's codes).
__device__ __forceinline__ uint4 ld_global_nc_16_no_l1(const void* pointer) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(pointer));
  return v;
}
__device__ __forceinline__ uint2 ld_global_nc_8_no_l1(const void* pointer) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(pointer));
  return v;
}

// One 16-byte global store of four words (`address` 16-byte aligned). Written out because the
// compiler splits a uint4 store through a reinterpreted bf16 pointer into four 4-byte stores.
__device__ __forceinline__ void st_global_16(void* address, const uint32_t (&word)[4]) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(address), "r"(word[0]), "r"(word[1]), "r"(word[2]),
               "r"(word[3])
               : "memory");
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

// Named barrier `kId` over `kThreads` threads (whole warps); id 0 is __syncthreads. Both
// operands are immediates, so the compiler reserves only the ids a kernel names.
template <int kId, int kThreads>
__device__ __forceinline__ void named_barrier() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}
// Arrives on named barrier kId without waiting: the other side of a one-sided hand-over waits
// on it with named_barrier (kThreads counts both sides).
// compute-sanitizer's racecheck does not follow bar.arrive: it reports hazards on a correct
// arrive/sync ping-pong (benchmarks/racecheck_arrive_probe.cu). The build it checks
// (-DCAKE_RACECHECK_BUILD, benchmarks/run_sanitizer.sh) waits on both sides instead: the same
// accesses in the same order, with one more wait.
template <int kId, int kThreads>
__device__ __forceinline__ void named_barrier_arrive() {
#ifdef CAKE_RACECHECK_BUILD
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
#else
  asm volatile("bar.arrive %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
#endif
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

// 4 x 4 transpose of 32-bit words within each quad: lane q's word j moves to lane j's word q.
// An MMA fragment row holds 2 columns of each 8-column group in each of its 4 lanes; after this,
// lane q holds group q of 4 whole (16 bytes). Two exchange rounds (lane ^ 1, lane ^ 2), each
// swapping the words whose index differs from the lane's in that bit. Every lane of the warp
// takes part.
__device__ __forceinline__ void quad_transpose(uint32_t (&word)[4], int lane) {
#pragma unroll
  for (int bit = 1; bit <= 2; bit <<= 1) {
    const bool upper = (lane & bit) != 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (j & bit) continue;  // pairs (j, j + bit)
      const uint32_t sent = upper ? word[j] : word[j + bit];
      const uint32_t got = __shfl_xor_sync(0xffffffffu, sent, bit);
      if (upper) {
        word[j] = got;
      } else {
        word[j + bit] = got;
      }
    }
  }
}

// 2^x with the hardware approximation (relative error ~2^-22); ex2(-inf) = 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
// The same, with results below 2^-126 flushed to zero: one MUFU instruction, without the
// subnormal fix-up around it (a weight that small is nothing next to the row's max of >= 1).
__device__ __forceinline__ float fast_exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Programmatic dependent launch (sm_90+; nothing on older GPUs, where the launch does not ask for
// it). A kernel that another one follows with the programmatic-serialisation attribute calls
// launch_dependent_grids() to let that grid start early; the dependent grid calls
// wait_for_prerequisite_grids() before it reads anything the first one wrote: it returns once the
// first grid has finished and its writes are visible (at once for a launch without the attribute).
__device__ __forceinline__ void launch_dependent_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_prerequisite_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace cake::cuda
