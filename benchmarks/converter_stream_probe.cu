// How fast one 64-candidate block goes through the fused 64-head design's schedule when a single
// converter warpgroup with 184 registers converts and multiplies every block, against two
// converters at 96 registers on alternate blocks (the development kernel's split,
// csrc/cuda/hopper_fused/, whose converters' NoPE stream waited on each wgmma group in turn:
// docs/hopper_kernel.md, "What would close the gap", item 4). The question it answers: does a
// converter with the registers to keep more QK^T work in flight convert and multiply a block in
// fewer cycles than the present kernel's steady-state block (~4,300-4,400 cycles in its traces)?
//
// A CTA a SM walks kBlocks blocks of 64 random rows of an L2-resident pool (65,536 rows of 256
// bytes: 224 code bytes, scale bytes after them). Per block:
//   - a converter (the block's, by parity when there are two) waits for the block's tiles, then for
//     each of 14 groups of two k-steps decodes its two rows' code words (the library's bit-placement
//     decode) and reloads the code slot with the next block's rows; every kBatch groups it stores
//     the batch's A fragments into the K tile (stmatrix: V for PV) and issues S^T += K Q^T for them
//     (wgmma m64n64k16, A from registers, Q from shared memory; one fence and one commit group a
//     batch), leaving kGroups batches in flight; then 4 RoPE k-steps from the tile (ldmatrix); then
//     it stores S^T (fp32, 16 KB) into the block's S/P tile and hands it over;
//   - two PV warpgroups (160 registers, O[64 x 256] fp32 each) read the logits, run a softmax's
//     arithmetic (max, two shuffles, exp2, sums; no reference hand-over, no O rescale), write P
//     (bf16) over the logits, meet, and run O += P V (4 k-steps of two m64n128k16, A and B from
//     shared memory), then free the block's tiles.
// kAblate leaves parts out (timing only): 1 the K tile stores, 2 the converter's wgmma, 4 the
// decode, 8 the PV wgmma; 16 changes one: the converter's wgmma reads A from the K tile it has just
// stored (fence and warpgroup barrier first) instead of from its registers. Random bytes and random Q; the values mean nothing, the time does.
// Prints per variant the median over CTAs of the cycles a block (the whole walk), the converter's
// busy and waiting cycles a block and the PV side's wait for the logits (blocks after the first 8).
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o converter_stream_probe \
//       benchmarks/converter_stream_probe.cu && ./converter_stream_probe
// (bash benchmarks/device_suite.sh converter-probe builds and runs it).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../csrc/cuda/common/ptx_primitives.cuh"
#include "../csrc/cuda/hopper/nvfp4_bit_decode.cuh"
#include "../csrc/cuda/hopper/sm90_primitives.cuh"
#include "../csrc/cuda/hopper_fused/fused_primitives.cuh"
#include "../csrc/cuda/portable/sm80_primitives.cuh"  // ldmatrix_x4
#include "probe_check.h"
#include "probe_pool.h"

namespace {

using namespace cake::cuda::sm90;
using cake::cuda::fast_exp2_ftz;
using cake::cuda::ld_global_nc_8_no_l1;
using cake::cuda::named_barrier;
using cake::cuda::pack_bf16x2;
using cake::cuda::smem_address;

constexpr int kBlocks = 96;        // blocks a CTA walks
constexpr int kWarmBlocks = 8;     // not counted
constexpr int kWarpgroup = 128;
constexpr int kTileRowBytes = 128;
constexpr int kColumnBlockBytes = 64 * kTileRowBytes;  // 8 KB: 64 rows x 64 bf16
constexpr int kGroupsPerBlock = 14;                     // NoPE: 28 k-steps in pairs
constexpr int kSlots = 7;                               // 8-byte code slots a row a thread
constexpr int kRopeColumnBlock = 7;

struct __align__(1024) Shared {
  uint8_t q[8][kColumnBlockBytes];        // 64 heads x 512 dims, 8 column blocks
  uint8_t k[2][8][kColumnBlockBytes];     // K tiles by block parity
  uint8_t sp[2][64 * 64 * 4];             // logits (fp32), then P (bf16) over them, by parity
  uint64_t full[2];                       // the block's K tile and logits written (converter threads)
  uint64_t empty[2];                      // the block's PV retired (PV threads)
  long long conv_busy, conv_wait, pv_wait;
};

template <int kConverters, int kGroups>
struct Config {
  static constexpr int kThreads = (2 + kConverters) * kWarpgroup;
  static constexpr int kPvRegisters = 160;
  // setmaxnreg moves registers only within the CTA's launch allocation: 384 x 168 = 64,512
  // (one converter) or 512 x 128 = 65,536 (two).
  static constexpr int kConverterRegisters = kConverters == 1 ? 184 : 96;
  static_assert(kWarpgroup * (2 * kPvRegisters + kConverters * kConverterRegisters) <=
                    kThreads * (kConverters == 1 ? 168 : 128),
                "within the launch allocation");
};

// The converter of blocks b = first, first + step, ...: 14 NoPE groups and 4 RoPE k-steps a block.
// Ablations (timing only; bits): 1 no K tile stores, 2 no QK^T wgmma, 4 no decode (the code words
// are the fragments), 8 no PV wgmma; 16 QK^T with A from the K tile (both operands in shared memory).
template <int kConverters, int kGroups, int kAblate, int kBatch>
__device__ void convert(Shared& s, const uint8_t* __restrict__ pool, const int* __restrict__ rows, int first,
                        int thread) {
  constexpr int kStep = kConverters;
  const int warp = thread / 32, lane = thread % 32, quad = lane % 4;
  const int row0 = warp * 16 + lane / 4;
  const uint32_t lane_offset = fragment_x4_lane_offset(thread);
  uint2 codes[2][kSlots];
  uint2 scale_bytes[2];
  auto load_block = [&](int b) {
    const int bb = min(b, kBlocks - 1);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint8_t* row = pool + size_t(rows[bb * 64 + row0 + 8 * r]) * kProbeRowBytes;
#pragma unroll
      for (int slot = 0; slot < kSlots; ++slot) codes[r][slot] = ld_global_nc_8_no_l1(row + 8 * (quad + 4 * slot));
      scale_bytes[r] = ld_global_nc_8_no_l1(row + kProbeScaleOffset + 8 * (quad % 3));
    }
  };
  load_block(first);
  long long busy = 0, waited = 0;
  for (int b = first; b < kBlocks; b += kStep) {
    const int t = b % 2;
    const long long t0 = clock64();
    if (b >= 2) mbarrier_wait(smem_address(&s.empty[t]), ((b >> 1) - 1) & 1);
    const long long t1 = clock64();
    const uint32_t k_tile = smem_address(s.k[t]);
    float acc[32];
    const int next = b + kStep;
    const int* next_rows = rows + min(next, kBlocks - 1) * 64;
    const int next_row[2] = {next_rows[row0], next_rows[row0 + 8]};
    // Fragments of kBatch groups are decoded before that batch's wgmmas are issued (one fence a
    // batch); kGroups batches stay in flight.
    constexpr int kRing = (kGroups + 1) * kBatch;
    uint32_t frag[kRing][8];
#pragma unroll
    for (int g = 0; g < kGroupsPerBlock; ++g) {
      const int slot = g / 2, word = g % 2;
      uint32_t(&f)[8] = frag[g % kRing];
      uint32_t scale[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t bytes = slot < 4 ? scale_bytes[r].x : scale_bytes[r].y;
        scale[r] = cake::cuda::hopper::e4m3_to_decode_scale(uint8_t(bytes >> (8 * (slot % 4))) & 0x3F);
      }
      uint32_t p0[4], p1[4];
      if constexpr ((kAblate & 4) != 0) {
        const uint32_t c0 = word == 0 ? codes[0][slot].x : codes[0][slot].y;
        const uint32_t c1 = word == 0 ? codes[1][slot].x : codes[1][slot].y;
#pragma unroll
        for (int i = 0; i < 4; ++i) p0[i] = c0 ^ (scale[0] << i), p1[i] = c1 ^ (scale[1] << i);
      } else {
        cake::cuda::hopper::e2m1x8_to_bf16_pairs(word == 0 ? codes[0][slot].x : codes[0][slot].y, scale[0], p0);
        cake::cuda::hopper::e2m1x8_to_bf16_pairs(word == 0 ? codes[1][slot].x : codes[1][slot].y, scale[1], p1);
      }
      f[0] = p0[0], f[1] = p1[0], f[2] = p0[1], f[3] = p1[1];
      f[4] = p0[2], f[5] = p1[2], f[6] = p0[3], f[7] = p1[3];
      if (word == 1 && next < kBlocks) {  // the slot is decoded: the next block's codes into it
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          codes[r][slot] = ld_global_nc_8_no_l1(pool + size_t(next_row[r]) * kProbeRowBytes + 8 * (quad + 4 * slot));
        }
      }
      if (g % kBatch != kBatch - 1 && g != kGroupsPerBlock - 1) continue;
      const int g_first = g - g % kBatch;
      if constexpr ((kAblate & 16) != 0) {
        // A from the fragments just stored (both operands in shared memory): the warp's registers
        // are free once stored; the batch's stores fenced for the async proxy, the warpgroup met.
#pragma unroll
        for (int gi = g_first; gi <= g; ++gi) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int step = 2 * gi + h;
            const uint32_t(&fi)[8] = frag[gi % kRing];
            const uint32_t a[4] = {fi[4 * h], fi[4 * h + 1], fi[4 * h + 2], fi[4 * h + 3]};
            stmatrix_x4(k_tile + (step / 4) * kColumnBlockBytes + (lane_offset ^ (32 * (step % 4))), a);
          }
        }
        fence_proxy_async();
        named_barrier<2, kWarpgroup>();
        wgmma_fence();
#pragma unroll
        for (int gi = g_first; gi <= g; ++gi) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int step = 2 * gi + h;
            const uint64_t q_desc = smem_descriptor(smem_address(s.q[step / 4]) + (step % 4) * 32, 16, 1024);
            const uint32_t k_step = k_tile + (step / 4) * kColumnBlockBytes + (step % 4) * 32;
            wgmma_m64n64k16_ss(acc, smem_descriptor(k_step, 16, 1024), q_desc, !(gi == 0 && h == 0));
          }
        }
      } else {
        wgmma_fence();
#pragma unroll
        for (int gi = g_first; gi <= g; ++gi) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int step = 2 * gi + h;  // 0..27
            const uint32_t(&fi)[8] = frag[gi % kRing];
            const uint32_t a[4] = {fi[4 * h], fi[4 * h + 1], fi[4 * h + 2], fi[4 * h + 3]};
            if constexpr ((kAblate & 1) == 0) {
              stmatrix_x4(k_tile + (step / 4) * kColumnBlockBytes + (lane_offset ^ (32 * (step % 4))), a);
            }
            const uint64_t q_desc = smem_descriptor(smem_address(s.q[step / 4]) + (step % 4) * 32, 16, 1024);
            if constexpr ((kAblate & 2) == 0) {
              wgmma_m64n64k16_rs(acc, a, q_desc, !(gi == 0 && h == 0));
            } else {
              keep_registers(a);
              if (gi == 0 && h == 0) {
#pragma unroll
                for (int i = 0; i < 32; ++i) acc[i] = __uint_as_float(a[i % 4]);
              }
            }
          }
        }
      }
      wgmma_commit();
      wgmma_wait<kGroups>();
      if (g_first >= kGroups * kBatch) {
#pragma unroll
        for (int gi = g_first - kGroups * kBatch; gi < g_first - (kGroups - 1) * kBatch; ++gi) {
          uint32_t(&retired)[1][8] = reinterpret_cast<uint32_t(&)[1][8]>(frag[gi % kRing]);
          pin_registers(retired);
        }
      }
    }
    if (next < kBlocks) {
#pragma unroll
      for (int r = 0; r < 2; ++r) scale_bytes[r] = ld_global_nc_8_no_l1(pool + size_t(next_row[r]) * kProbeRowBytes + kProbeScaleOffset + 8 * (quad % 3));
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // RoPE k-steps: fragments from the tile's RoPE column block
      uint32_t a[4];
      cake::cuda::ldmatrix_x4(a, k_tile + kRopeColumnBlock * kColumnBlockBytes + (lane_offset ^ (32 * i)));
      wgmma_fence();
      const uint64_t q_desc = smem_descriptor(smem_address(s.q[kRopeColumnBlock]) + i * 32, 16, 1024);
      if constexpr ((kAblate & 2) == 0) {
        wgmma_m64n64k16_rs(acc, a, q_desc, true);
      } else {
        keep_registers(a);
      }
      wgmma_commit();
      wgmma_wait<1>();
    }
    wgmma_wait<0>();
    pin_registers(acc);
    // The logits into the block's S/P tile (16-byte stores, consecutive threads consecutive chunks).
    float4* logits = reinterpret_cast<float4*>(s.sp[t]);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      logits[i * kWarpgroup + thread] = make_float4(acc[4 * i] * 0.0625f, acc[4 * i + 1] * 0.0625f,
                                                    acc[4 * i + 2] * 0.0625f, acc[4 * i + 3] * 0.0625f);
    }
    fence_proxy_async();  // the K tile is read by PV's wgmma
    mbarrier_arrive(smem_address(&s.full[t]));
    const long long t2 = clock64();
    if (b >= kWarmBlocks) busy += t2 - t1, waited += t1 - t0;
  }
  if (thread == 0 && first == 0) s.conv_busy = busy, s.conv_wait = waited;
}

// PV warpgroup p: every block in order.
template <int kAblate>
__device__ void accumulate(Shared& s, int p, int thread) {
  const int u = p * kWarpgroup + thread;  // 0..255 over both PV warpgroups
  float o[2][64];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < 64; ++i) o[h][i] = 0.0f;
  long long waited = 0;
  for (int b = 0; b < kBlocks; ++b) {
    const int t = b % 2;
    const long long t0 = clock64();
    mbarrier_wait(smem_address(&s.full[t]), (b >> 1) & 1);
    if (b >= kWarmBlocks) waited += clock64() - t0;
    const float4* logits = reinterpret_cast<const float4*>(s.sp[t]);
    float v[16];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float4 x = logits[u + 256 * k];
      v[4 * k] = x.x, v[4 * k + 1] = x.y, v[4 * k + 2] = x.z, v[4 * k + 3] = x.w;
    }
    named_barrier<1, 256>();  // every logit read before P goes over them
    float m = v[0];
#pragma unroll
    for (int i = 1; i < 16; ++i) m = fmaxf(m, v[i]);
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
    uint32_t packed[8];
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float w0 = fast_exp2_ftz(v[2 * i] - m), w1 = fast_exp2_ftz(v[2 * i + 1] - m);
      sum += w0 + w1;
      packed[i] = pack_bf16x2(w0, w1);
    }
    // P[head][candidate], K-major with the 128-byte swizzle: head u / 4, candidates 16 (u % 4) ..
    const int head = u / 4, chunk = 2 * (u % 4);
    const uint32_t p_row = smem_address(s.sp[t]) + head * kTileRowBytes;
    st_shared_16(p_row + ((chunk ^ (head % 8)) * 16), packed[0], packed[1], packed[2], packed[3]);
    st_shared_16(p_row + (((chunk + 1) ^ (head % 8)) * 16), packed[4], packed[5], packed[6], packed[7]);
    if (sum < 0.0f) o[0][0] += sum;  // never: keeps the arithmetic
    fence_proxy_async();
    named_barrier<1, 256>();
    const uint64_t p_desc = smem_descriptor(smem_address(s.sp[t]), 16, 1024);
    wgmma_fence();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint32_t vt = smem_address(s.k[t]) + (4 * p + 2 * h) * kColumnBlockBytes + kk * 16 * kTileRowBytes;
        if constexpr ((kAblate & 8) == 0) {
          wgmma_m64n128k16_ss_bt(o[h], p_desc + ((kk * 32) >> 4), smem_descriptor(vt, kColumnBlockBytes, 1024), true);
        } else {
          o[h][kk] += __uint_as_float(vt);
        }
      }
    }
    wgmma_commit();
    wgmma_wait<0>();
    pin_registers(o[0]);
    pin_registers(o[1]);
    mbarrier_arrive(smem_address(&s.empty[t]));
  }
  float total = 0.0f;
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < 64; ++i) total += o[h][i];
  if (total == 12345.0f) s.pv_wait = -1;  // keeps O live
  if (u == 0) s.pv_wait = waited;
}

template <int kConverters, int kGroups, int kAblate, int kBatch>
__global__ void __launch_bounds__(Config<kConverters, kGroups>::kThreads, 1)
    converter_stream(const uint8_t* __restrict__ pool, const int* __restrict__ indices, long long* __restrict__ out) {
  using C = Config<kConverters, kGroups>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  Shared& s = *reinterpret_cast<Shared*>(smem_raw);
  const int thread = threadIdx.x;
  const int warpgroup = thread / kWarpgroup;
  // Random Q (bf16 in [-1, 1)), the K tiles' RoPE column blocks too.
  for (int i = thread; i < 8 * kColumnBlockBytes / 4; i += C::kThreads) {
    const uint32_t h = (uint32_t(i) * 2654435761u) ^ (blockIdx.x * 40503u);
    reinterpret_cast<uint32_t*>(s.q)[i] = (h & 0x807F807Fu) | 0x3F003F00u;
  }
  for (int i = thread; i < 2 * kColumnBlockBytes / 4; i += C::kThreads) {
    const uint32_t h = (uint32_t(i) * 2246822519u) ^ (blockIdx.x * 977u);
    reinterpret_cast<uint32_t*>(s.k[i / (kColumnBlockBytes / 4)][kRopeColumnBlock])[i % (kColumnBlockBytes / 4)] =
        (h & 0x807F807Fu) | 0x3F003F00u;
  }
  if (thread == 0) {
    for (int t = 0; t < 2; ++t) {
      mbarrier_init(smem_address(&s.full[t]), kWarpgroup);
      mbarrier_init(smem_address(&s.empty[t]), 2 * kWarpgroup);
    }
  }
  fence_proxy_async();
  __syncthreads();
  const int* rows = indices + size_t(blockIdx.x) * kBlocks * 64;
  const long long start = clock64();
  if (warpgroup < 2) {
    if constexpr (kConverters == 1) {
      release_registers<C::kPvRegisters>();
    } else {
      claim_registers<C::kPvRegisters>();
    }
    accumulate<kAblate>(s, warpgroup, thread % kWarpgroup);
  } else {
    if constexpr (kConverters == 1) {
      claim_registers<C::kConverterRegisters>();
    } else {
      release_registers<C::kConverterRegisters>();
    }
    convert<kConverters, kGroups, kAblate, kBatch>(s, pool, rows, warpgroup - 2, thread % kWarpgroup);
  }
  __syncthreads();
  if (thread == 0) {
    long long* o = out + 4 * blockIdx.x;
    o[0] = clock64() - start;
    o[1] = s.conv_busy;
    o[2] = s.conv_wait;
    o[3] = s.pv_wait;
  }
}

template <int kConverters, int kGroups, int kAblate = 0, int kBatch = 1>
void run(const uint8_t* pool, const int* indices, long long* out, int ctas) {
  using C = Config<kConverters, kGroups>;
  auto kernel = converter_stream<kConverters, kGroups, kAblate, kBatch>;
  const auto launches = probe_launches(kernel, ctas, C::kThreads, int(sizeof(Shared)), 4, out, 4 * size_t(ctas), pool,
                                       indices, out);
  cudaFuncAttributes attributes{};
  CHECK_CUDA(cudaFuncGetAttributes(&attributes, kernel));
  std::vector<double> per_block, busy, conv_wait, pv_wait;
  for (const auto& host : launches) {
    for (int c = 0; c < ctas; ++c) {
      const int counted = (kBlocks - kWarmBlocks) / kConverters;
      per_block.push_back(double(host[4 * c]) / kBlocks);
      busy.push_back(double(host[4 * c + 1]) / counted);
      conv_wait.push_back(double(host[4 * c + 2]) / counted);
      pv_wait.push_back(double(host[4 * c + 3]) / (kBlocks - kWarmBlocks));
    }
  }
  std::printf("| %d x %d registers | %d x %d | %d | %d | %.0f | %.0f | %.0f | %.0f |\n", kConverters, C::kConverterRegisters,
              kGroups, kBatch, kAblate, attributes.numRegs, probe_median(per_block), probe_median(busy), probe_median(conv_wait), probe_median(pv_wait));
}

}  // namespace

int main() {
  const int sms = probe_sm_count();
  ProbePool pool = make_probe_pool(size_t(sms) * kBlocks * 64);
  long long* d_out = nullptr;
  CHECK_CUDA(cudaMalloc(&d_out, size_t(sms) * 4 * sizeof(long long)));
  std::printf("Converter stream probe: %d CTAs, %d blocks of 64 rows each, %zu bytes of shared memory\n\n", sms,
              kBlocks, sizeof(Shared));
  std::printf("| converters | QK^T batches in flight x groups a batch | left out (bits) | registers (launch) | cycles a block | converter busy a block | converter waits a block | PV waits a block |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  run<2, 1>(pool.rows, pool.indices, d_out, sms);
  run<2, 2>(pool.rows, pool.indices, d_out, sms);
  run<1, 1>(pool.rows, pool.indices, d_out, sms);
  run<1, 2>(pool.rows, pool.indices, d_out, sms);
  run<1, 3>(pool.rows, pool.indices, d_out, sms);
  run<1, 4>(pool.rows, pool.indices, d_out, sms);
  run<1, 6>(pool.rows, pool.indices, d_out, sms);
  run<1, 2, 1>(pool.rows, pool.indices, d_out, sms);
  run<1, 2, 2>(pool.rows, pool.indices, d_out, sms);
  run<1, 2, 4>(pool.rows, pool.indices, d_out, sms);
  run<1, 2, 8>(pool.rows, pool.indices, d_out, sms);
  run<1, 2, 3>(pool.rows, pool.indices, d_out, sms);
  run<1, 2, 7>(pool.rows, pool.indices, d_out, sms);
  run<1, 2, 15>(pool.rows, pool.indices, d_out, sms);
  run<2, 1, 8>(pool.rows, pool.indices, d_out, sms);
  run<1, 1, 0, 2>(pool.rows, pool.indices, d_out, sms);
  run<1, 1, 0, 4>(pool.rows, pool.indices, d_out, sms);
  run<1, 1, 0, 7>(pool.rows, pool.indices, d_out, sms);
  run<1, 0, 0, 7>(pool.rows, pool.indices, d_out, sms);
  run<1, 0, 0, 14>(pool.rows, pool.indices, d_out, sms);
  run<1, 0, 1, 14>(pool.rows, pool.indices, d_out, sms);
  run<1, 1, 8, 7>(pool.rows, pool.indices, d_out, sms);
  run<1, 2, 10>(pool.rows, pool.indices, d_out, sms);
  run<1, 2, 16>(pool.rows, pool.indices, d_out, sms);
  run<1, 4, 16>(pool.rows, pool.indices, d_out, sms);
  run<1, 1, 16, 7>(pool.rows, pool.indices, d_out, sms);
  run<1, 2, 24>(pool.rows, pool.indices, d_out, sms);
  free_probe_pool(pool);
  CHECK_CUDA(cudaFree(d_out));
  return 0;
}
