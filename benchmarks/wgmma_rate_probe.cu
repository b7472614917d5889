// Cycles a wgmma takes on the H200 by shape and operand source, the figure the small-heads designs
// turn on (docs/hopper_small_kernel.md: QK^T and PV at N = 16 and 32). One CTA a SM; kWarpgroups
// warpgroups each issue kIssues wgmmas of one shape back to back (one commit group every 8,
// at most two groups in flight), into kAccumulators accumulators in turn (1: each wgmma depends
// on the one before; 2: two chains), A from registers ("rs") or from shared memory ("ss"; "ss_ta":
// A MN-major, as the small-heads PV), B from shared memory. Random bf16 operands (the values mean
// nothing). Prints the median over CTAs of the cycles a wgmma (the warpgroup's whole loop over
// kIssues), and what the multiply-adds need at the peak rate (4,096 bf16 FLOP a cycle an SM); then
// the same for mma.sync m16n8k16 by 4 to 16 warps (the other way to multiply at 16 heads).
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o wgmma_rate_probe \
//       benchmarks/wgmma_rate_probe.cu && ./wgmma_rate_probe
// (bash benchmarks/device_suite.sh wgmma-probe builds and runs it).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../csrc/cuda/common/ptx_primitives.cuh"
#include "../csrc/cuda/hopper/sm90_primitives.cuh"
#include "../csrc/cuda/hopper_fused/fused_primitives.cuh"        // wgmma_m64n64k16_rs
#include "../csrc/cuda/hopper_small/sm90_small_primitives.cuh"  // m64n16 / m64n32: rs, ss_ta
#include "../csrc/cuda/portable/sm80_primitives.cuh"        // mma_bf16_16x8x16
#include "probe_check.h"
#include "probe_pool.h"
#include "probe_wgmma.cuh"

namespace {

using namespace cake::cuda::sm90;
using cake::cuda::smem_address;

constexpr int kWarpgroup = 128;
constexpr int kIssues = 512;
constexpr int kTileBytes = 64 * 1024;  // A and B tiles: 64 KB each, 128-byte swizzled rows

enum Shape { kN16Rs, kN16Ss, kN16SsTa, kN32Rs, kN32SsTa, kN64Rs, kN64Ss, kN128Rs, kN128Ss };
constexpr int shape_n(Shape s) {
  return s <= kN16SsTa ? 16 : s <= kN32SsTa ? 32 : s <= kN64Ss ? 64 : 128;
}
constexpr const char* shape_name(Shape s) {
  return s == kN16Rs     ? "m64n16k16 rs"
         : s == kN16Ss   ? "m64n16k16 ss"
         : s == kN16SsTa ? "m64n16k16 ss_ta"
         : s == kN32Rs   ? "m64n32k16 rs"
         : s == kN32SsTa ? "m64n32k16 ss_ta"
         : s == kN64Rs   ? "m64n64k16 rs"
         : s == kN64Ss   ? "m64n64k16 ss"
         : s == kN128Rs  ? "m64n128k16 rs (B MN-major)"
                         : "m64n128k16 ss (B MN-major)";
}

template <Shape kShape>
__device__ __forceinline__ void issue(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (kShape == kN16Rs) {
    wgmma_m64n16k16_rs(reinterpret_cast<float(&)[8]>(d), a, desc_b, true);
  } else if constexpr (kShape == kN16Ss) {
    wgmma_m64n16k16_ss(reinterpret_cast<float(&)[8]>(d), desc_a, desc_b, true);
  } else if constexpr (kShape == kN16SsTa) {
    wgmma_m64n16k16_ss_ta(reinterpret_cast<float(&)[8]>(d), desc_a, desc_b);
  } else if constexpr (kShape == kN32Rs) {
    wgmma_m64n32k16_rs(reinterpret_cast<float(&)[16]>(d), a, desc_b, true);
  } else if constexpr (kShape == kN32SsTa) {
    wgmma_m64n32k16_ss_ta(reinterpret_cast<float(&)[16]>(d), desc_a, desc_b);
  } else if constexpr (kShape == kN64Rs) {
    wgmma_m64n64k16_rs(reinterpret_cast<float(&)[32]>(d), a, desc_b, true);
  } else if constexpr (kShape == kN64Ss) {
    wgmma_m64n64k16_ss(reinterpret_cast<float(&)[32]>(d), desc_a, desc_b, true);
  } else if constexpr (kShape == kN128Rs) {
    wgmma_m64n128k16_rs_bt(d, a, desc_b, true);
  } else {
    wgmma_m64n128k16_ss_bt(d, desc_a, desc_b, true);
  }
}

template <Shape kShape, int kAccumulators, int kWarpgroups>
__global__ void __launch_bounds__(kWarpgroups* kWarpgroup, 1) wgmma_rate(long long* __restrict__ out) {
  extern __shared__ __align__(1024) uint8_t smem[];
  const int thread = threadIdx.x;
  for (int i = thread; i < 2 * kTileBytes / 4; i += kWarpgroups * kWarpgroup) {
    const uint32_t h = (uint32_t(i) * 2654435761u) ^ (blockIdx.x * 40503u);
    reinterpret_cast<uint32_t*>(smem)[i] = (h & 0x807F807Fu) | 0x3C003C00u;
  }
  fence_proxy_async();
  __syncthreads();
  const uint32_t a_tile = smem_address(smem), b_tile = a_tile + kTileBytes;
  const uint32_t a[4] = {0x3C003C00u ^ uint32_t(thread), 0x3C003C00u, 0x3C003C00u, 0x3C003C00u};
  float d[kAccumulators][64];
#pragma unroll
  for (int k = 0; k < kAccumulators; ++k)
#pragma unroll
    for (int i = 0; i < 64; ++i) d[k][i] = 0.0f;
  const long long start = clock64();
  wgmma_fence();
#pragma unroll 1
  for (int g = 0; g < kIssues / 8; ++g) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      // Walks the tiles' k-steps: K-major operands a 32-byte slice of a column block's rows,
      // MN-major ones 16 rows (2 KB) of the first column blocks.
      const int step = (8 * g + j) % 32;
      const uint32_t k_major = (step / 4) * 8192 + (step % 4) * 32;
      const uint32_t mn_major = (step % 4) * 2048;
      constexpr bool kAMnMajor = kShape == kN16SsTa || kShape == kN32SsTa;
      constexpr bool kBMnMajor = kShape == kN128Rs || kShape == kN128Ss;
      const uint64_t desc_a = smem_descriptor(a_tile + (kAMnMajor ? mn_major : k_major), kAMnMajor ? 8192 : 16, 1024);
      const uint64_t desc_b = smem_descriptor(b_tile + (kBMnMajor ? mn_major : k_major), kBMnMajor ? 8192 : 16, 1024);
      issue<kShape>(d[j % kAccumulators], a, desc_a, desc_b);
    }
    wgmma_commit();
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
#pragma unroll
  for (int k = 0; k < kAccumulators; ++k) pin_registers(d[k]);
  const long long cycles = clock64() - start;
  float total = 0.0f;
#pragma unroll
  for (int k = 0; k < kAccumulators; ++k)
#pragma unroll
    for (int i = 0; i < 64; ++i) total += d[k][i];
  if (thread % kWarpgroup == 0) out[blockIdx.x * kWarpgroups + thread / kWarpgroup] = total == 12345.0f ? -1 : cycles;
}

template <Shape kShape, int kAccumulators, int kWarpgroups>
void run(long long* out, int ctas) {
  auto kernel = wgmma_rate<kShape, kAccumulators, kWarpgroups>;
  const size_t out_count = size_t(ctas) * kWarpgroups;
  const auto launches = probe_launches(kernel, ctas, kWarpgroups * kWarpgroup, 2 * kTileBytes, 3, out, out_count, out);
  std::vector<double> per;
  for (const auto& host : launches) {
    for (long long c : host) per.push_back(double(c) / kIssues);
  }
  const double peak = 64.0 * shape_n(kShape) * 16 * 2 / 4096.0 * kWarpgroups;
  std::printf("| %s | %d | %d | %.1f | %.1f |\n", shape_name(kShape), kAccumulators, kWarpgroups, probe_median(per),
              peak);
}

// The same for mma.sync m16n8k16 (bf16, fp32 accumulators, operands in registers): kWarps warps a
// CTA, each issuing kIssues into kChains accumulators in turn (independent chains hide the
// instruction's latency). Prints the cycles an mma of each warp and of the SM (over all warps).
// m16n8k16 is 2,048 multiply-adds: one cycle of an SM's tensor cores at the dense bf16 peak.
constexpr double kMmaSyncPeakCycles = 1.0;
// The most warps a CTA of the mma.sync rows holds (32: 1,024 threads); `out` holds one count each.
constexpr int kMaxProbeWarps = 32;

template <int kWarps, int kChains>
__global__ void __launch_bounds__(kWarps * 32, 1) mma_sync_rate(long long* __restrict__ out) {
  static_assert(kWarps <= kMaxProbeWarps, "out holds kMaxProbeWarps counts a CTA");
  const int thread = threadIdx.x;
  const uint32_t a[4] = {0x3C003C00u ^ uint32_t(thread), 0x3C003C00u, 0x3C003C00u, 0x3C003C00u};
  const uint32_t b0 = 0x3C003C00u ^ uint32_t(thread >> 3), b1 = 0x3C003C00u;
  float d[kChains][4];
#pragma unroll
  for (int k = 0; k < kChains; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) d[k][i] = 0.0f;
  __syncthreads();
  const long long start = clock64();
#pragma unroll 1
  for (int g = 0; g < kIssues / 8; ++g) {
#pragma unroll
    for (int j = 0; j < 8; ++j) cake::cuda::mma_bf16_16x8x16(d[j % kChains], a, b0, b1);
  }
  float total = 0.0f;
#pragma unroll
  for (int k = 0; k < kChains; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) total += d[k][i];
  const long long cycles = clock64() - start;
  if (thread % 32 == 0) out[blockIdx.x * kWarps + thread / 32] = total == 12345.0f ? -1 : cycles;
}

template <int kWarps, int kChains>
void run_mma_sync(long long* out, int ctas) {
  const auto launches = probe_launches(mma_sync_rate<kWarps, kChains>, ctas, kWarps * 32, 0, 3, out,
                                       size_t(ctas) * kWarps, out);
  std::vector<double> per;
  for (const auto& host : launches) {
    for (long long c : host) per.push_back(double(c) / kIssues);
  }
  const double warp = probe_median(per);
  std::printf("| mma.sync m16n8k16 | %d | %d warps | %.1f | %.2f | %.2f |\n", kChains, kWarps, warp, warp / kWarps,
              kMmaSyncPeakCycles);
}

}  // namespace

int main() {
  const int sms = probe_sm_count();
  long long* d_out = nullptr;
  CHECK_CUDA(cudaMalloc(&d_out, size_t(sms) * kMaxProbeWarps * sizeof(long long)));
  std::printf("wgmma rate probe: %d CTAs, %d wgmma a warpgroup\n\n", sms, kIssues);
  std::printf("| shape, operands | accumulator chains | warpgroups issuing | cycles a wgmma (each warpgroup's) | at the peak rate, all warpgroups' |\n");
  std::printf("|---|---|---|---|---|\n");
  run<kN16Rs, 1, 1>(d_out, sms);
  run<kN16Rs, 2, 1>(d_out, sms);
  run<kN16Ss, 1, 1>(d_out, sms);
  run<kN16Ss, 2, 1>(d_out, sms);
  run<kN16SsTa, 1, 1>(d_out, sms);
  run<kN16SsTa, 2, 1>(d_out, sms);
  run<kN32Rs, 1, 1>(d_out, sms);
  run<kN32SsTa, 1, 1>(d_out, sms);
  run<kN64Rs, 1, 1>(d_out, sms);
  run<kN64Ss, 1, 1>(d_out, sms);
  run<kN128Rs, 1, 1>(d_out, sms);
  run<kN128Ss, 1, 1>(d_out, sms);
  run<kN16Rs, 1, 2>(d_out, sms);
  run<kN16Rs, 1, 3>(d_out, sms);
  run<kN16SsTa, 1, 2>(d_out, sms);
  run<kN16SsTa, 1, 3>(d_out, sms);
  run<kN64Rs, 1, 2>(d_out, sms);
  run<kN64Ss, 1, 2>(d_out, sms);
  run<kN32Rs, 1, 2>(d_out, sms);
  run<kN128Ss, 1, 2>(d_out, sms);
  run<kN16Rs, 1, 4>(d_out, sms);
  run<kN16SsTa, 1, 4>(d_out, sms);
  run<kN16Rs, 1, 8>(d_out, sms);
  std::printf("\n| instruction | accumulator chains | warps issuing | cycles an mma (each warp's) | cycles an mma of the SM | at the peak rate |\n");
  std::printf("|---|---|---|---|---|---|\n");
  run_mma_sync<4, 1>(d_out, sms);
  run_mma_sync<4, 4>(d_out, sms);
  run_mma_sync<4, 8>(d_out, sms);
  run_mma_sync<8, 4>(d_out, sms);
  run_mma_sync<8, 8>(d_out, sms);
  run_mma_sync<16, 4>(d_out, sms);
  run_mma_sync<16, 8>(d_out, sms);
  run_mma_sync<32, 4>(d_out, sms);
  CHECK_CUDA(cudaFree(d_out));
  return 0;
}
