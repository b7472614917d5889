// Thin wrappers over the sm_90a instructions of the Hopper prefill kernel: wgmma (warpgroup
// MMA with shared-memory operands), its fences, mbarriers, setmaxnreg, stmatrix and the proxy
// fence, one instruction each; and the addressing of the 128-byte-swizzled tiles they read
// (descriptors, the lanes' fragment offsets). Only meaningful in code compiled for sm_90a.
#pragma once

#include <cstdint>

namespace cake::cuda::sm90 {

// Shared-memory matrix descriptor for a 128-byte-swizzled operand (PTX ISA "matrix descriptor"):
// start address, leading and stride byte offsets (all >> 4), swizzle mode 1 (128 B) in bits 62-63.
// K-major tiles: rows of 128 bytes, 8-row groups `stride_bytes` apart (leading offset unused).
// MN-major tiles: 64-element column blocks `leading_bytes` apart, 8-row groups `stride_bytes` apart.
// Every tile starts on a 1024-byte boundary, so the swizzle phase equals the row index mod 8.
__device__ __forceinline__ uint64_t smem_descriptor(uint32_t address, uint32_t leading_bytes, uint32_t stride_bytes) {
  return uint64_t((address & 0x3FFFFu) >> 4) | (uint64_t(leading_bytes >> 4) << 16) |
         (uint64_t(stride_bytes >> 4) << 32) | (uint64_t(1) << 62);
}

// The rows of a 128-byte-swizzled tile: 16-byte chunk c of row r sits at chunk c ^ (r % 8).
constexpr int kSwizzleRowBytes = 128;

// ldmatrix / stmatrix .x4 of a k-step's wgmma A fragment (a warpgroup's 64 rows of a K-major
// 128-byte-swizzled tile): lanes 8 i .. 8 i + 7 address matrix i = register a_i, whose rows are
// the warp's rows 16 w + 8 (i % 2) .. and whose columns are elements 8 (i / 2) .., i.e. chunk
// 2 (step % 4) + i / 2 of the row. The part of the lane's address that does not depend on the
// step: row * 128 + ((i / 2) ^ row % 8) * 16; k-step s adds an XOR of 32 (s % 4), its column
// block an offset. `thread`: the thread's index in its warpgroup.
__device__ __forceinline__ uint32_t fragment_x4_lane_offset(int thread) {
  const int lane = thread % 32;
  const int row = (thread / 32) * 16 + 8 * ((lane / 8) % 2) + lane % 8;
  return row * kSwizzleRowBytes + (((lane / 16) ^ (row % 8)) * 16);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Called after wgmma `index` (from 0) of a chain of `count`: with `group` > 0, the chain's wgmmas
// so far are committed and retired before the next is issued, after every `group` of them but the
// last. A chain that streams both operands from shared memory takes the whole port; the gaps are
// for other warps' shared stores (whether that pays is measured per use: the leader's QK^T groups,
// docs/hopper_kernel.md). `group` 0 (constant) compiles to nothing.
__device__ __forceinline__ void wgmma_drain_every(int group, int index, int count) {
  if (group > 0 && (index + 1) % group == 0 && index + 1 < count) {
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence();
  }
}
// Pins accumulator registers at this point of the program, so the compiler neither reads them
// before a wgmma_wait nor moves them while an MMA that writes them is in flight.
template <int kCount>
__device__ __forceinline__ void pin_registers(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Keeps registers that an in-flight wgmma reads (A from registers) allocated and unchanged up
// to this point: place it after the wgmma_wait that retires the MMA.
template <int kRows, int kCols>
__device__ __forceinline__ void pin_registers(uint32_t (&a)[kRows][kCols]) {
#pragma unroll
  for (int i = 0; i < kRows; ++i)
#pragma unroll
    for (int j = 0; j < kCols; ++j) asm volatile("" : "+r"(a[i][j])::"memory");
}

// Makes nvcc emit the computation of these values without any use of them (development builds
// that leave out the instruction that used them, e.g. the consumers' wgmma). The empty asm leaves
// nothing in the PTX, so ptxas, seeing no use, may still drop that computation: a build that must
// keep arithmetic needs a real use (the dequant's CAKE_HOPPER_NO_TILE_STORES feeds a running XOR
// to a store nobody executes).
template <int kCount>
__device__ __forceinline__ void keep_registers(const uint32_t (&v)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" ::"r"(v[i]));
}

// D[64 x 64] (+)= A[64 x 16] * B[16 x 64]^T: A and B K-major (QK^T: Q rows, K rows).
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)));
}

// D[64 x 128] (+)= A[64 x 16] * B[16 x 128]: A K-major, B MN-major (PV: P rows, V = a K tile).
__device__ __forceinline__ void wgmma_m64n128k16_ss_bt(float (&d)[64], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)));
}

// D[64 x 128] (+)= A[64 x 16] * B[16 x 128]: A from registers (four bf16 pairs a thread, the
// accumulator fragment layout of an m64nNk16 result), B MN-major (PV: own weights, V = a K tile).
__device__ __forceinline__ void wgmma_m64n128k16_rs_bt(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b,
                                                       bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)));
}

// D[64 x 8] (+)= A[64 x 16] * B[16 x 8]: A from registers (as wgmma_m64n128k16_rs_bt), B K-major.
// With B all ones every column of D is a row sum of A (the PV weights' sums).
__device__ __forceinline__ void wgmma_m64n8k16_rs(float (&d)[4], const uint32_t (&a)[4], uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)));
}
// D[64 x 8] (+)= A[64 x 16] * B[16 x 8]: A and B K-major, both in shared memory.
__device__ __forceinline__ void wgmma_m64n8k16_ss(float (&d)[4], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)));
}

// A shared load that the compiler keeps in program order among the asm statements around it.
__device__ __forceinline__ float ld_shared_f32(uint32_t address) {
  float value;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(value) : "r"(address) : "memory");
  return value;
}
__device__ __forceinline__ void st_shared_4(uint32_t address, uint32_t value) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(address), "r"(value) : "memory");
}
__device__ __forceinline__ void st_shared_8(uint32_t address, uint32_t a, uint32_t b) {
  asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(address), "r"(a), "r"(b) : "memory");
}
__device__ __forceinline__ void st_shared_16(uint32_t address, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

// Stores four 8x8 bf16 matrices, register i of the warp's threads holding matrix i in the mma
// fragment layout (thread t: row t / 4, columns 2 (t % 4), + 1); lanes 8 i .. 8 i + 7 give the
// addresses of matrix i's rows (16 bytes each).
__device__ __forceinline__ void stmatrix_x4(uint32_t address, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");
}

// Writes by ordinary stores become visible to the tensor cores (the async proxy) after this
// fence and a barrier.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// After the barriers are initialised and before anyone uses them: makes the initialisation
// visible to the async proxy (the TMA completes transaction bytes on q_full).
__device__ __forceinline__ void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// `count` arrivals at once (one thread arriving for a group of threads).
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Arrives on the barrier when all of this thread's earlier cp.async copies have landed; the
// barrier's expected count includes this arrival (.noinc).
__device__ __forceinline__ void cp_async_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Arrives on the barrier and adds `bytes` to the transaction count its phase waits for (the
// bytes of the TMA loads that complete on it).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// TMA copies of one box of a 3-D tensor map (`map`: the generic address of a __grid_constant__
// kernel parameter), at element coordinates (x, y, z). The load completes its bytes on `bar`;
// the store joins the thread's bulk group (commit, then wait for it to have read the source).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* map, uint32_t bar, int x, int y, int z) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];\n" ::"r"(dst),
      "l"(map), "r"(bar), "r"(x), "r"(y), "r"(z)
      : "memory");
}
// Brings a tensor map (a __grid_constant__ parameter) into the descriptor cache ahead of its
// first use, so the first TMA copy does not wait for the descriptor's fetch.
__device__ __forceinline__ void prefetch_tensor_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}
__device__ __forceinline__ void tma_store_3d(const void* map, uint32_t src, int x, int y, int z) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(map),
               "r"(src), "r"(x), "r"(y), "r"(z)
               : "memory");
}
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until at most kPending of this thread's bulk groups have not yet read their shared memory.
template <int kPending>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
// Until at most kPending of this thread's bulk groups are not complete (their writes done).
template <int kPending>
__device__ __forceinline__ void bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Blocks until the phase with parity `parity` of the barrier has completed. kSuspendHintNs > 0
// passes try_wait a suspend-time hint: the warp sleeps until the phase completes (or the hint
// runs out) instead of re-issuing the test, which frees issue slots for warps beside it on the
// same scheduler (the fused development kernel's converters); 0, the default, polls.
template <uint32_t kSuspendHintNs = 0>
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  if constexpr (kSuspendHintNs == 0) {
    asm volatile(
        "{\n.reg .pred done;\nwait_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait_%=;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
  } else {
    asm volatile(
        "{\n.reg .pred done;\nwait_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, %2;\n"
        "@!done bra wait_%=;\n}\n" ::"r"(bar),
        "r"(parity), "n"(kSuspendHintNs)
        : "memory");
  }
}

// Whether the barrier has passed phase `parity`, without waiting.
__device__ __forceinline__ bool mbarrier_passed(uint32_t bar, uint32_t parity) {
  uint32_t passed;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(passed)
      : "r"(bar), "r"(parity)
      : "memory");
  return passed != 0;
}

template <int kRegisters>
__device__ __forceinline__ void release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

}  // namespace cake::cuda::sm90
