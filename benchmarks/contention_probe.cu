// What slows a consumer warpgroup's tensor work while other warps of its SM work beside it. The
// 64-head Hopper prefill with both sides running free (no waits) takes 1.33-1.36x its consumers
// alone, with shared memory ~67% busy (docs/hopper_kernel.md, "They contend more than they wait"):
// the dequant slows the consumers while both run, and which of its activities does it was left
// open (what this probe found: docs/benchmarks.md, "The contention probe's slowdown was its own
// issue, ..."). Here one CTA a SM, 512 threads (four warpgroups, as the kernel): warpgroups 0 and 1 are
// the consumers, each running kChains chains of one form of the kernel's tensor work,
//   qk   32 wgmma m64n64k16 with Q and K tiles in shared memory (a block's QK^T), then a wait;
//   pv   32 wgmma m64n128k16 with A from registers and B MN-major in shared memory (four blocks'
//        worth of a consumer's PV), then a wait;
//   qk_rs    QK^T with Q as the register operand (fixed registers: only K read from shared memory);
//   qk_ldsm  the same with Q's fragments loaded by ldmatrix from the Q tile, 8, 4, 2 or 1 k-steps a
//        set, two sets (each reloaded once the wgmma group that read it has retired; 64, 32, 16 or
//        8 registers: the 64-head kernel's consumers had room for 1 only, and that variant was
//        slower: docs/tried.md);
//   pv16     the small-heads kernel's PV at 16 heads: 8 m-tiles x 4 k-steps of m64n16k16, A (V^T)
//        MN-major and B (P^T) from shared memory;
//   pv_ss    the 64-head kernel's PV of the other consumer's block: m64n128k16, P and V from shared
//        memory;
//   qk, descriptors as the kernel's: kQk's wgmmas issued as the 64-head kernel issues them (two
//        base descriptors plus each k-step's offset: ~3 instructions a wgmma, where kQk rebuilds
//        both descriptors every k-step, ~10.5). The forms differ in how many instructions their
//        warps issue a wgmma, and the background's slowdown follows that count, not the operands'
//        path (docs/benchmarks.md, "The contention probe's slowdown was its own issue, ...");
//   qk as the kernel's, then its weights stored and fenced: with the softmax-like pass, each
//        consumer thread then stores its 32 values as bf16 (four 16-byte st.shared, conflict-free,
//        into the Q tile; the kernel uses stmatrix into a P tile) and fences them for the async
//        proxy, as the kernel's leader does before its hand-over;
//   ..., one consumer: the same with consumer warpgroup 1 idle (no other QK^T streaming beside);
// optionally followed by a softmax-like pass over the accumulators (kSoftmaxOps float operations a
// value), and warpgroups 2 and 3 run one background load until both consumers are done:
//   none     nothing (they return at once);
//   alu      eight independent integer chains (LOP3, IMAD, SHF): issue slots and the ALU pipes only;
//   sts      16-byte shared stores, a warp's 32 lanes 512 contiguous bytes of a third 64 KB tile;
//   alu_sts  N integer ops into each store's data, then the store (N = 8, 32, 128, 512; 32 is about
//            the dequant's mix: ~560 instructions and 16 tile stores a thread a block);
//   lds      16-byte volatile shared loads of that tile (XORed into a register);
//   sts_sleep  the stores spaced by __nanosleep (20 or 100 ns) instead of integer work;
//   alu_burst  alu_sts's work (32 ops a store) with a batch's 16 stores' data made first and then
//            stored back to back;
//   alu_lds  alu_sts with a 16-byte load in place of each store (the loaded word feeds the work);
//   alu_lop_sts  alu_sts without IMAD (LOP3 and SHF);
//   alu_sts without its stores  alu_sts's integer work alone (work: warp-instructions a cycle);
//   alu | sts  warpgroup 2 the integer chains of alu, warpgroup 3 the stores of sts (work: the
//            stores' bytes);
//   dequant_like  the dequant's conversion (nvfp4_bit_decode.cuh) of 16 bytes of codes loaded from
//            the tile, its four words' 16 bytes each stored back (work: bytes stored a cycle);
//   imad only, imad 1 in 4 (lop3 the rest), hmul2.bf16 only, ffma only, prmt only, lop3 only:
//            eight dependent chains of one kind, no shared-memory access (work: warp-instructions
//            a cycle an SM); with "(N ops a store)", a 16-byte store after every N of them.
// Prints, per consumer form and background, the median over CTAs of a consumer's cycles a chain
// (against the chain alone), and the background warps' work: batches a 1,000 cycles an SM (alu; a
// batch is 8 x 8 x 3 integer operations a thread in the source, ~320 SASS instructions with ptxas of
// CUDA 13.0), warp-instructions a cycle an SM (the single kinds, counted as one instruction an op,
// though ptxas makes two of a lop3 op: read those rows' SASS; alu_sts without its stores, two) or
// shared-memory bytes a cycle an SM (the others). Random bf16 operands; the values
// mean nothing, the times do.
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o contention_probe \
//       benchmarks/contention_probe.cu && ./contention_probe
// (bash benchmarks/device_suite.sh contention-probe builds and runs it).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "../csrc/cuda/common/ptx_primitives.cuh"
#include "../csrc/cuda/hopper/nvfp4_bit_decode.cuh"  // e2m1x8_to_bf16x8: the dequant's conversion
#include "../csrc/cuda/hopper/sm90_primitives.cuh"
#include "../csrc/cuda/hopper_fused/fused_primitives.cuh"  // wgmma_m64n64k16_rs
#include "../csrc/cuda/hopper_small/sm90_small_primitives.cuh"  // wgmma_m64n16k16_ss_ta
#include "../csrc/cuda/portable/sm80_primitives.cuh"      // ldmatrix_x4
#include "probe_check.h"
#include "probe_pool.h"

namespace {

using namespace cake::cuda::sm90;
using cake::cuda::smem_address;

constexpr int kWarpgroup = 128;
constexpr int kThreads = 4 * kWarpgroup;
constexpr int kChains = 48;
constexpr int kStepsPerChain = 32;
constexpr int kTileBytes = 64 * 1024;               // Q, K and the background's tile: 64 KB each
constexpr int kFlagOffset = 3 * kTileBytes;         // consumers done (a count in shared memory)
constexpr int kSmemBytes = kFlagOffset + 1024;
constexpr int kSoftmaxOps = 12;                     // float operations a value in the softmax-like pass
constexpr int kStoresPerBatch = 16;                 // sts, alu_sts, lds: 16-byte accesses a thread a batch
constexpr int kOutPerCta = 6;                       // consumer cycles x2, background batches x2, background cycles x2

enum Form { kQk, kPv, kQkRs, kQkLdsm8, kPv16, kQkLdsm4, kQkLdsm2, kQkLdsm1, kPvSs, kQkOffsets, kQkLeaderSteps,
            kQkOffsetsSolo, kQkLeaderStepsSolo };
// Solo forms: consumer warpgroup 1 runs no chains (warpgroup 0's steps with no other consumer's wgmma beside them).
__host__ __device__ constexpr bool solo(Form f) { return f == kQkOffsetsSolo || f == kQkLeaderStepsSolo; }
__host__ __device__ constexpr bool kernel_issue(Form f) { return f == kQkOffsets || f == kQkLeaderSteps || solo(f); }
__host__ __device__ constexpr bool leader_steps(Form f) { return f == kQkLeaderSteps || f == kQkLeaderStepsSolo; }
// k-steps a set of Q fragments in the ldmatrix forms (two sets in flight).
__host__ __device__ constexpr int set_steps(Form f) {
  return f == kQkLdsm8 ? 8 : f == kQkLdsm4 ? 4 : f == kQkLdsm2 ? 2 : 1;
}
__host__ __device__ constexpr bool by_ldmatrix(Form f) {
  return f == kQkLdsm8 || f == kQkLdsm4 || f == kQkLdsm2 || f == kQkLdsm1;
}
enum Background { kNone, kAlu, kSts, kAluSts, kLds, kStsSleep, kAluBurst, kAluLds, kAluLopSts, kSplit,
                  kImad, kImadQuarter, kHmul2, kFfma, kPrmt, kLop3, kAluNoSts, kDequantLike };
// One instruction kind in eight dependent chains (a batch: 8 rounds of the 8 chains, 64 a thread).
// With kAluPerStore > 0 (and not ffma): a 16-byte store after every kAluPerStore of them, 16 a batch.
__host__ __device__ constexpr bool single_kind(Background b) {
  return b == kImad || b == kImadQuarter || b == kHmul2 || b == kFfma || b == kPrmt || b == kLop3;
}
constexpr int kDequantStoresPerBatch = 4 * kStoresPerBatch;  // dequant_like: 4 words converted and stored a load
constexpr const char* form_name(Form f) {
  switch (f) {
    case kQk: return "qk (m64n64k16 ss)";
    case kPv: return "pv (m64n128k16 rs)";
    case kQkRs: return "qk_rs (m64n64k16 rs, A fixed)";
    case kQkLdsm8: return "qk_ldsm (m64n64k16 rs, A by ldmatrix, 8 k-steps a set)";
    case kQkLdsm4: return "qk_ldsm (4 k-steps a set)";
    case kQkLdsm2: return "qk_ldsm (2 k-steps a set)";
    case kQkLdsm1: return "qk_ldsm (1 k-step a set)";
    case kPvSs: return "pv_ss (m64n128k16 ss, B MN-major)";
    case kQkOffsets: return "qk, descriptors as the kernel's (base + offset: 3 instructions a wgmma)";
    case kQkLeaderSteps: return "qk as the kernel's, then its weights stored (8 KB a warpgroup) and fenced";
    case kQkOffsetsSolo: return "qk as the kernel's, one consumer";
    case kQkLeaderStepsSolo: return "qk as the kernel's, weights stored and fenced, one consumer";
    default: return "pv16 (m64n16k16 ss, A MN-major)";
  }
}
__host__ __device__ constexpr int accumulators(Form f) { return f == kPv || f == kPv16 || f == kPvSs ? 64 : 32; }
constexpr const char* background_name(Background b) {
  return b == kNone ? "none" : b == kAlu ? "alu" : b == kSts ? "sts" : b == kAluSts ? "alu_sts" : b == kLds ? "lds"
         : b == kStsSleep ? "sts_sleep" : b == kAluBurst ? "alu_burst" : b == kAluLds ? "alu_lds"
         : b == kAluLopSts ? "alu_lop_sts" : b == kSplit ? "alu | sts" : b == kImad ? "imad only"
         : b == kImadQuarter ? "imad 1 in 4, lop3 the rest" : b == kHmul2 ? "hmul2.bf16 only" : b == kFfma ? "ffma only"
         : b == kPrmt ? "prmt only" : b == kLop3 ? "lop3 only" : b == kAluNoSts ? "alu_sts without its stores"
         : "dequant_like (16-byte code load, 4 words converted, 4 tile stores)";
}

__device__ __forceinline__ uint32_t ld_volatile_shared_u32(uint32_t address) {
  uint32_t v;
  asm volatile("ld.volatile.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(address));
  return v;
}
// Volatile: a plain ld.shared of a loop-invariant address is hoisted out of the loop by ptxas.
__device__ __forceinline__ void ld_volatile_shared_16(uint32_t address, uint32_t (&v)[4]) {
  asm volatile("ld.volatile.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
               : "r"(address));
}

// alu_sts's integer work into a store's data x[0..3]: kOps operations over four chains, each an
// IMAD on a LOP3 (kImad) or, as alu_lop_sts, a SHF on a LOP3 (no IMAD, the same count).
template <int kOps, bool kImad>
__device__ __forceinline__ void store_data(uint32_t (&x)[8]) {
#pragma unroll
  for (int k = 0; k < kOps / 4; ++k) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t mixed = x[i] ^ (x[i + 4] & 0x80008000u);
      x[i] = kImad ? mixed * 0x01000193u + uint32_t(k) : __funnelshift_l(mixed, x[i], 5 + k % 8);
    }
  }
}

// The MN-major B (V) of a PV k-step: 16 rows (2 KB) of the first two column blocks, as the
// kernel's PV reads a K tile.
__device__ __forceinline__ uint32_t pv_mn_major(int step) { return (step % 4) * 2048 + (step / 4 % 4) * 16384; }

// One chain of the consumer's form into d.
template <Form kForm>
__device__ __forceinline__ void chain(float (&d)[accumulators(kForm)], const uint32_t (&a)[4], uint32_t q_tile,
                                      uint32_t k_tile, uint32_t lane_offset) {
  if constexpr (by_ldmatrix(kForm)) {
    // Q's A fragments by ldmatrix, kSet k-steps a set, two sets: a set is reloaded once the wgmma
    // group that read it has retired (wgmma reads register operands after issue).
    constexpr int kSet = set_steps(kForm);
    uint32_t frag[2][kSet][4];
#pragma unroll
    for (int g = 0; g < kStepsPerChain / kSet; ++g) {
      if (g >= 2) wgmma_wait<1>();
#pragma unroll
      for (int j = 0; j < kSet; ++j) {
        const int step = kSet * g + j;
        cake::cuda::ldmatrix_x4(frag[g % 2][j], q_tile + (step / 4) * 8192 + (lane_offset ^ (32 * (step % 4))));
      }
      wgmma_fence();
#pragma unroll
      for (int j = 0; j < kSet; ++j) {
        const int step = kSet * g + j;
        const uint32_t k_major = (step / 4) * 8192 + (step % 4) * 32;
        wgmma_m64n64k16_rs(d, frag[g % 2][j], smem_descriptor(k_tile + k_major, 16, 1024), true);
      }
      wgmma_commit();
    }
    wgmma_wait<0>();
    pin_registers(d);
    return;
  }
  if constexpr (kForm == kPv16) {
    // The small-heads kernel's PV at 16 heads: O^T (8 m-tiles of 64 dims x 16 heads, 8 accumulators
    // each) += V^T (MN-major from the K tile) P^T (K-major, here the Q tile's first rows): 8 x 4.
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < kStepsPerChain; ++step) {
      const int m_tile = step / 4, kk = step % 4;
      wgmma_m64n16k16_ss_ta(reinterpret_cast<float(&)[8]>(d[8 * m_tile]),
                            smem_descriptor(k_tile + m_tile * 8192 + kk * 2048, 8192, 1024),
                            smem_descriptor(q_tile + kk * 32, 16, 1024));
    }
    wgmma_commit();
    wgmma_wait<0>();
    pin_registers(d);
    return;
  }
  if constexpr (kernel_issue(kForm)) {
    // The 64-head kernel's issue (prefill_hopper_consumer.cuh): two base descriptors, each k-step's
    // offset added to them (ptxas: two UIADD3.64 a wgmma), where kQk rebuilds both descriptors from
    // the address every k-step (~10 uniform instructions a wgmma).
    const uint64_t q_desc = smem_descriptor(q_tile, 16, 1024), k_desc = smem_descriptor(k_tile, 16, 1024);
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < kStepsPerChain; ++step) {
      const uint32_t offset = ((step / 4) * 8192 + (step % 4) * 32) >> 4;
      wgmma_m64n64k16_ss(d, q_desc + offset, k_desc + offset, true);
    }
    wgmma_commit();
    wgmma_wait<0>();
    pin_registers(d);
    return;
  }
  wgmma_fence();
#pragma unroll
  for (int step = 0; step < kStepsPerChain; ++step) {
    // K-major: a 32-byte slice of a column block's 64 rows (128-byte swizzle, 8-row groups 1 KB apart).
    const uint32_t k_major = (step / 4) * 8192 + (step % 4) * 32;
    if constexpr (kForm == kQk) {
      wgmma_m64n64k16_ss(d, smem_descriptor(q_tile + k_major, 16, 1024), smem_descriptor(k_tile + k_major, 16, 1024),
                         true);
    } else if constexpr (kForm == kQkRs) {
      wgmma_m64n64k16_rs(d, a, smem_descriptor(k_tile + k_major, 16, 1024), true);
    } else if constexpr (kForm == kPvSs) {
      // The 64-head kernel's PV of the other consumer's block: P (K-major, here the Q tile's first
      // 8 KB column block) and V MN-major, both from shared memory.
      wgmma_m64n128k16_ss_bt(d, smem_descriptor(q_tile + (step % 4) * 32, 16, 1024),
                             smem_descriptor(k_tile + pv_mn_major(step), 8192, 1024), true);
    } else if constexpr (kForm == kPv) {
      wgmma_m64n128k16_rs_bt(d, a, smem_descriptor(k_tile + pv_mn_major(step), 8192, 1024), true);
    }
  }
  wgmma_commit();
  wgmma_wait<0>();
  pin_registers(d);
}

template <Form kForm, Background kBackground, bool kSoftmax, int kAluPerStore>
__global__ void __launch_bounds__(kThreads, 1) contention(long long* __restrict__ out) {
  extern __shared__ __align__(1024) uint8_t smem[];
  const int thread = threadIdx.x;
  // Warp-uniform to ptxas (from lane 0), or it serialises every wgmma (docs/hopper_kernel.md, "Registers").
  const int warpgroup = __shfl_sync(0xffffffffu, thread / kWarpgroup, 0);
  for (int i = thread; i < 3 * kTileBytes / 4; i += kThreads) {
    const uint32_t h = (uint32_t(i) * 2654435761u) ^ (blockIdx.x * 40503u);
    reinterpret_cast<uint32_t*>(smem)[i] = (h & 0x807F807Fu) | 0x3C003C00u;  // bf16 in [-2, 2)
  }
  const uint32_t q_tile = smem_address(smem), k_tile = q_tile + kTileBytes, b_tile = k_tile + kTileBytes;
  const uint32_t flag = q_tile + kFlagOffset;
  if (thread == 0) st_shared_4(flag, 0u);
  fence_proxy_async();
  __syncthreads();
  long long* cta_out = out + blockIdx.x * kOutPerCta;

  if (warpgroup < 2) {
    const uint32_t a[4] = {0x3C003C00u ^ uint32_t(thread), 0x3C003C00u, 0x3C003C00u, 0x3C003C00u};
    const uint32_t lane_offset = fragment_x4_lane_offset(thread % kWarpgroup);
    constexpr int kD = accumulators(kForm);
    float d[kD];
#pragma unroll
    for (int i = 0; i < kD; ++i) d[i] = 0.0f;
    const long long start = clock64();
    const int chains = solo(kForm) && warpgroup == 1 ? 0 : kChains;
#pragma unroll 1
    for (int c = 0; c < chains; ++c) {
      chain<kForm>(d, a, q_tile, k_tile, lane_offset);
      if constexpr (kSoftmax) {
        // A stand-in for the block's softmax: dependent float work on every accumulator.
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          float x = d[i];
#pragma unroll
          for (int k = 0; k < kSoftmaxOps / 3; ++k) x = fmaxf(fmaf(x, 0.999f, -0.001f), -4.0f) * 0.5f;
          d[i] = x;
        }
      }
      if constexpr (leader_steps(kForm)) {
        // The leader's weights: 32 values a thread as bf16 pairs, four 16-byte stores (a warpgroup's
        // 8 KB, over the first Q column blocks: the values mean nothing), then the proxy fence that
        // hands them to a wgmma, as write_weights and its fence do in the kernel. Each store's 32
        // lanes write 512 contiguous bytes: no bank conflicts, as the kernel's stmatrix into the
        // swizzled P tile has none (at 6782450 the lanes were 64 bytes apart, a 4-way conflict).
        const uint32_t p_tile = q_tile + warpgroup * 8192 + (thread % kWarpgroup) * 16;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          st_shared_16(p_tile + 2048 * j, cake::cuda::pack_bf16x2(d[8 * j], d[8 * j + 1]),
                       cake::cuda::pack_bf16x2(d[8 * j + 2], d[8 * j + 3]), cake::cuda::pack_bf16x2(d[8 * j + 4], d[8 * j + 5]),
                       cake::cuda::pack_bf16x2(d[8 * j + 6], d[8 * j + 7]));
        }
        fence_proxy_async();
      }
    }
    const long long cycles = clock64() - start;
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < kD; ++i) total += d[i];
    // Both consumers' warps done before the count moves (named barrier 1 + warpgroup, 128 threads).
    asm volatile("bar.sync %0, %1;\n" ::"r"(1 + warpgroup), "r"(kWarpgroup) : "memory");
    if (thread % kWarpgroup == 0) {
      atomicAdd(reinterpret_cast<unsigned*>(smem + kFlagOffset), 1u);
      cta_out[warpgroup] = total == 12345.0f ? -1 : cycles;
    }
    return;
  }
  if constexpr (kBackground == kNone) {
    if (thread % kWarpgroup == 0) cta_out[2 + (warpgroup - 2)] = 0, cta_out[4 + (warpgroup - 2)] = 0;
    return;
  }
  // The background: batches of work until both consumers have finished their chains.
  const int local = thread - 2 * kWarpgroup;  // 0..255
  uint32_t x[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = uint32_t(thread * 8 + i) * 0x9E3779B1u;
  long long batches = 0;
  const long long start = clock64();
  // split: warpgroup 2 the integer chains alone, warpgroup 3 the stores alone.
  const bool integer_only = kBackground == kAlu || (kBackground == kSplit && warpgroup == 2);
  float f[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = 1.0f + 1e-3f * float(x[i] & 0xFFu);
  while (ld_volatile_shared_u32(flag) < 2u) {
    if constexpr (single_kind(kBackground)) {
      // Each op takes another chain's value too, so that no chain folds into fewer instructions.
      constexpr int kStores = kAluPerStore > 0 ? kStoresPerBatch : 1;
      constexpr int kRounds = kAluPerStore > 0 ? kAluPerStore / 8 : 8;
#pragma unroll
      for (int st = 0; st < kStores; ++st) {
#pragma unroll
      for (int r = 0; r < kRounds; ++r) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const uint32_t other = x[(i + 1) & 7];
          // (plain ifs: i is a constant only after unrolling; each folds away)
          if (kBackground == kImad || (kBackground == kImadQuarter && i % 4 == 0)) {
            x[i] = x[i] * other + uint32_t(r);
          } else if (kBackground == kImadQuarter || kBackground == kLop3) {
            x[i] = (x[i] ^ (other & 0x0F0F0F0Fu)) | uint32_t(r << 4 | i);
          } else if (kBackground == kHmul2) {
            x[i] = cake::cuda::bf16x2_mul(x[i], other);
          } else if (kBackground == kFfma) {
            f[i] = fmaf(f[i], f[(i + 1) & 7], 1e-3f);
          } else {
            x[i] = __byte_perm(x[i], other, 0x5410u + 0x1111u * uint32_t(r % 2));
          }
        }
      }
      if constexpr (kAluPerStore > 0) st_shared_16(b_tile + ((st * 256 + local) * 16) % kTileBytes, x[0], x[1], x[2], x[3]);
      }
    } else if (integer_only) {
#pragma unroll
      for (int r = 0; r < 8; ++r) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          x[i] = (x[i] ^ (x[(i + 1) & 7] & 0x0F0F0F0Fu)) | (x[(i + 3) & 7] >> 7);  // LOP3
          x[i] = x[i] * 0x01000193u + uint32_t(i);                                   // IMAD
          x[i] = __funnelshift_r(x[i], x[i], 13);                                    // SHF
        }
      }
    } else if constexpr (kBackground == kDequantLike) {
      // The dequant's own conversion (e2m1x8_to_bf16x8, its multiply placement: four independent
      // pairs a word) on 16 bytes of codes loaded from the tile, each word's 16 bytes stored back.
      const uint32_t scale = 0x3F803F80u ^ (x[7] & 0x00010001u);
#pragma unroll
      for (int s = 0; s < kStoresPerBatch; ++s) {
        uint32_t codes[4];
        ld_volatile_shared_16(b_tile + ((s * 256 + local) * 16) % kTileBytes, codes);
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          uint32_t out[4];
          cake::cuda::hopper::e2m1x8_to_bf16x8(codes[w] ^ x[w], scale, out);
          st_shared_16(b_tile + (((4 * s + w) * 256 + local) * 16) % kTileBytes, out[0], out[1], out[2], out[3]);
        }
      }
      x[0] += 1u;
    } else if constexpr (kBackground == kAluBurst) {
      // The same work as alu_sts, its 16 stores' data made first and then stored back to back.
      uint32_t data[kStoresPerBatch][4];
#pragma unroll
      for (int s = 0; s < kStoresPerBatch; ++s) {
        store_data<kAluPerStore, true>(x);
#pragma unroll
        for (int i = 0; i < 4; ++i) data[s][i] = x[i];
      }
      // ptxas moves each store up to where its data is ready: an address term made of the last
      // data (zero at run time: the count is at most 2, ptxas cannot know) keeps them all behind it.
      const uint32_t late = (x[0] ^ x[3]) & (ld_volatile_shared_u32(flag) >> 16) & 0xF0u;
#pragma unroll
      for (int s = 0; s < kStoresPerBatch; ++s) {
        st_shared_16(b_tile + late + ((s * 256 + local) * 16) % kTileBytes, data[s][0], data[s][1], data[s][2],
                     data[s][3]);
      }
    } else {
#pragma unroll
      for (int s = 0; s < kStoresPerBatch; ++s) {
        // Warp w's 32 lanes: 512 contiguous bytes; the 256 threads cover 4 KB a step, 64 KB a batch.
        const uint32_t address = b_tile + ((s * 256 + local) * 16) % kTileBytes;
        if constexpr (kBackground == kAluSts || kBackground == kAluLds || kBackground == kAluNoSts) {
          store_data<kAluPerStore, true>(x);
        } else if constexpr (kBackground == kAluLopSts) {
          store_data<kAluPerStore, false>(x);
        }
        if constexpr (kBackground == kLds || kBackground == kAluLds) {
          // alu_lds: the loaded word feeds the next store slot's integer work, as codes feed the conversion.
          uint32_t v[4];
          ld_volatile_shared_16(address, v);
          x[kBackground == kLds ? s & 7 : 4 + s % 4] ^= v[0] ^ v[1] ^ v[2] ^ v[3];
        } else {
          if constexpr (kBackground != kAluNoSts) st_shared_16(address, x[0], x[1], x[2], x[3]);
          if constexpr (kBackground == kStsSleep) __nanosleep(kAluPerStore);  // spaced stores, no ALU work
        }
      }
    }
    ++batches;
  }
  const long long cycles = clock64() - start;
  uint32_t sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) sum ^= x[i] ^ __float_as_uint(f[i]);
  if (local % kWarpgroup == 0) {
    cta_out[2 + (warpgroup - 2)] = sum == 0x12345u ? -1 : batches;
    cta_out[4 + (warpgroup - 2)] = cycles;
  }
}

template <Form kForm, Background kBackground, bool kSoftmax, int kAluPerStore = 0>
double run(long long* out, int ctas, double alone) {
  auto kernel = contention<kForm, kBackground, kSoftmax, kAluPerStore>;
  const size_t count = size_t(ctas) * kOutPerCta;
  const auto launches = probe_launches(kernel, ctas, kThreads, kSmemBytes, 3, out, count, out);
  std::vector<double> chains, work;
  for (const auto& host : launches) {
    for (int c = 0; c < ctas; ++c) {
      const long long* cta = host.data() + size_t(c) * kOutPerCta;
      chains.push_back(double(cta[0]) / kChains);
      if (!solo(kForm)) chains.push_back(double(cta[1]) / kChains);
      // Background work a cycle an SM: both warpgroups' batches over their cycles.
      double per_cycle = 0.0;
      for (int w = 0; w < 2; ++w) {
        const double batches = double(cta[2 + w]), cycles = double(cta[4 + w]);
        if (cycles <= 0 || (kBackground == kSplit && w == 0)) continue;  // split: the stores' warpgroup
        // alu: batches a 1,000 cycles (a batch's instruction count is ptxas's: read it in the SASS);
        // the others: shared-memory bytes a cycle (4 warps x 32 lanes x 16 bytes x 16 accesses a batch).
        // single kinds: warp-instructions a cycle (4 warps x 64 a batch).
        // alu_sts without its stores: warp-instructions a cycle (LOP3 and IMAD an op, 16 x N ops a batch).
        const double per_batch = kBackground == kAlu                                   ? 1000.0
                                 : single_kind(kBackground) && kAluPerStore == 0       ? 4.0 * 64
                                 : kBackground == kAluNoSts                            ? 4.0 * 2 * 16 * kAluPerStore
                                 : kBackground == kDequantLike                         ? 4.0 * 32 * 16 * kDequantStoresPerBatch
                                                                                       : 4.0 * 32 * 16 * kStoresPerBatch;
        per_cycle += batches * per_batch / cycles;
      }
      work.push_back(per_cycle);
    }
  }
  const double chain_cycles = probe_median(chains);
  const char* unit = kBackground == kAlu ? "batches a 1,000 cycles" : kBackground == kNone ? "-"
                     : (single_kind(kBackground) && kAluPerStore == 0) || kBackground == kAluNoSts
                         ? "warp-instructions a cycle"
                         : "bytes a cycle";
  char background[128];
  if (kBackground == kAluSts || kBackground == kAluBurst || kBackground == kAluLds || kBackground == kAluLopSts ||
      kBackground == kAluNoSts || (single_kind(kBackground) && kAluPerStore > 0)) {
    std::snprintf(background, sizeof(background), "%s (%d ops a %s)", background_name(kBackground), kAluPerStore,
                  kBackground == kAluLds ? "load" : "store");
  } else if (kBackground == kStsSleep) {
    std::snprintf(background, sizeof(background), "%s (%d ns a store)", background_name(kBackground), kAluPerStore);
  } else {
    std::snprintf(background, sizeof(background), "%s", background_name(kBackground));
  }
  std::printf("| %s | %s | %s | %.0f | %.3f | %.1f %s |\n", form_name(kForm), kSoftmax ? "yes" : "no", background,
              chain_cycles, alone > 0 ? chain_cycles / alone : 1.0,
              kBackground == kNone ? 0.0 : probe_median(work), unit);
  return chain_cycles;
}

template <Form kForm, bool kSoftmax, bool kStoreRates>
void run_form(long long* out, int ctas) {
  const double alone = run<kForm, kNone, kSoftmax>(out, ctas, 0.0);
  run<kForm, kAlu, kSoftmax>(out, ctas, alone);
  run<kForm, kSts, kSoftmax>(out, ctas, alone);
  if constexpr (kStoreRates) run<kForm, kAluSts, kSoftmax, 8>(out, ctas, alone);
  run<kForm, kAluSts, kSoftmax, 32>(out, ctas, alone);
  if constexpr (kStoreRates) run<kForm, kAluSts, kSoftmax, 128>(out, ctas, alone);
  run<kForm, kLds, kSoftmax>(out, ctas, alone);
  if constexpr (kStoreRates) {
    run<kForm, kStsSleep, kSoftmax, 20>(out, ctas, alone);
    run<kForm, kStsSleep, kSoftmax, 100>(out, ctas, alone);
    run<kForm, kAluBurst, kSoftmax, 32>(out, ctas, alone);
  }
}

}  // namespace

int main() {
  const int sms = probe_sm_count();
  long long* d_out = nullptr;
  CHECK_CUDA(cudaMalloc(&d_out, size_t(sms) * kOutPerCta * sizeof(long long)));
  std::printf("contention probe: %d CTAs, 2 consumer warpgroups x %d chains of %d wgmma, 2 background warpgroups\n\n",
              sms, kChains, kStepsPerChain);
  std::printf("| consumer form | softmax-like pass | background | cycles a chain (a consumer's) | over the chain alone "
              "| background work an SM |\n");
  std::printf("|---|---|---|---|---|---|\n");
  run_form<kQk, false, true>(d_out, sms);
  run_form<kQk, true, false>(d_out, sms);
  run_form<kPv, false, true>(d_out, sms);
  run_form<kQkRs, false, false>(d_out, sms);
  run_form<kQkLdsm8, false, false>(d_out, sms);
  run_form<kQkLdsm4, false, false>(d_out, sms);
  run_form<kQkLdsm2, false, false>(d_out, sms);
  run_form<kQkLdsm1, false, false>(d_out, sms);
  run_form<kPv16, false, false>(d_out, sms);
  // Which part of the integer-and-store mix slows the shared-memory QK^T: loads instead of stores,
  // no IMAD, the two in separate warpgroups; and the 64-head kernel's ss-form PV beside it.
  const double qk_alone = run<kQk, kNone, false>(d_out, sms, 0.0);
  run<kQk, kAluLds, false, 32>(d_out, sms, qk_alone);
  run<kQk, kAluLopSts, false, 32>(d_out, sms, qk_alone);
  run<kQk, kAluLopSts, false, 128>(d_out, sms, qk_alone);
  run<kQk, kAluLopSts, false, 512>(d_out, sms, qk_alone);
  run<kQk, kAluSts, false, 512>(d_out, sms, qk_alone);
  run<kQk, kSplit, false>(d_out, sms, qk_alone);
  run_form<kPvSs, false, false>(d_out, sms);
  // One instruction kind at a time beside the shared-memory QK^T (no shared-memory access).
  run<kQk, kImad, false>(d_out, sms, qk_alone);
  run<kQk, kImadQuarter, false>(d_out, sms, qk_alone);
  run<kQk, kHmul2, false>(d_out, sms, qk_alone);
  run<kQk, kFfma, false>(d_out, sms, qk_alone);  // issue-bound: starves the consumers' warps
  run<kQk, kPrmt, false>(d_out, sms, qk_alone);
  run<kQk, kLop3, false>(d_out, sms, qk_alone);
  run<kPv, kImad, false>(d_out, sms, run<kPv, kNone, false>(d_out, sms, 0.0));
  // Which instruction beside the stores: alu_sts's work without them, and each kind with a store
  // after every 32 of it.
  run<kQk, kAluNoSts, false, 32>(d_out, sms, qk_alone);
  run<kQk, kImad, false, 32>(d_out, sms, qk_alone);
  run<kQk, kHmul2, false, 32>(d_out, sms, qk_alone);
  run<kQk, kPrmt, false, 32>(d_out, sms, qk_alone);
  run<kQk, kLop3, false, 32>(d_out, sms, qk_alone);
  // The same QK^T issued as the kernel issues it, beside the rows that slowed kQk.
  const double offsets_alone = run<kQkOffsets, kNone, false>(d_out, sms, 0.0);
  run<kQkOffsets, kAlu, false>(d_out, sms, offsets_alone);
  run<kQkOffsets, kAluSts, false, 32>(d_out, sms, offsets_alone);
  run<kQkOffsets, kAluNoSts, false, 32>(d_out, sms, offsets_alone);
  run<kQkOffsets, kAluLds, false, 32>(d_out, sms, offsets_alone);
  run<kQkOffsets, kImad, false>(d_out, sms, offsets_alone);
  run<kQkOffsets, kFfma, false>(d_out, sms, offsets_alone);
  // With the softmax-like pass after each chain: issue-bound work of the consumers' own.
  const double offsets_softmax_alone = run<kQkOffsets, kNone, true>(d_out, sms, 0.0);
  run<kQkOffsets, kAluSts, true, 32>(d_out, sms, offsets_softmax_alone);
  run<kQkOffsets, kAluNoSts, true, 32>(d_out, sms, offsets_softmax_alone);
  run<kQkOffsets, kImad, true>(d_out, sms, offsets_softmax_alone);
  // The dequant's own conversion beside the kernel's QK^T, and the leader's weights stored and
  // fenced after each chain (work: bytes stored a cycle, the background's tile stores).
  run<kQkOffsets, kDequantLike, false>(d_out, sms, offsets_alone);
  run<kQkOffsets, kDequantLike, true>(d_out, sms, offsets_softmax_alone);
  const double leader_alone = run<kQkLeaderSteps, kNone, true>(d_out, sms, 0.0);
  run<kQkLeaderSteps, kSts, true>(d_out, sms, leader_alone);
  run<kQkLeaderSteps, kAluSts, true, 32>(d_out, sms, leader_alone);
  run<kQkLeaderSteps, kAluNoSts, true, 32>(d_out, sms, leader_alone);
  run<kQkLeaderSteps, kDequantLike, true>(d_out, sms, leader_alone);
  // The weights' stores and fence with no other consumer's QK^T streaming beside them.
  run<kQkOffsetsSolo, kNone, true>(d_out, sms, 0.0);
  const double solo_alone = run<kQkLeaderStepsSolo, kNone, true>(d_out, sms, 0.0);
  run<kQkLeaderStepsSolo, kDequantLike, true>(d_out, sms, solo_alone);
  CHECK_CUDA(cudaFree(d_out));
  return 0;
}
