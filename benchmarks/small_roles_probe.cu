// A 16-head chunk with the roles split as in the 64-head kernel: converters that only convert and
// store (no wgmma), the attend warpgroup multiplying both products from shared memory. The
// small-heads prefill (docs/hopper_small_kernel.md) has its converters multiply S^T = K Q^T with
// the fresh fragments as the register A operand, which keeps QK^T's shared-memory reads to Q but
// puts each converter's wgmma on its conversion's path (benchmarks/converter_stream_probe.cu: a
// converter does not overlap its conversion with its own register-A wgmma). Here the converters'
// only work is the conversion, so more of them fit (their registers need no S accumulators), and
// three K tiles fit beside a 16-head Q tile. The question: how many cycles a chunk, against the
// present kernel's ~2,900?
//
// A CTA a SM walks kChunks chunks of 64 random rows of an L2-resident pool (65,536 rows of 256
// bytes: 224 code bytes, 28 scale bytes, padding). Per chunk:
//   - a converter pair (two warpgroups, four threads a row, each thread 7 of the row's 28 groups of
//     16 values: groups p, p + 4, ..) waits for its K tile, decodes each group's two code words (the
//     library's bit-placement decode, four byte permutes a word into dim order) and stores them
//     (two 16-byte stores, 128-byte swizzle), reloading the group's code bytes with its next
//     chunk's; then arrives on the tile's barrier. With two pairs they take alternate chunks;
//   - the attend warpgroup, once the tile is full: S^T = K Q^T (32 wgmma m64n16k16, both operands in
//     shared memory), then the weights (exp2 against a fixed reference, the lazy reference's common
//     case; a warp vote; sums) into a P tile (one stmatrix.trans a thread), then O^T += V^T P^T (32
//     wgmma m64n16k16, V^T the K tile read MN-major); the next chunk's QK^T is issued before it
//     waits for this chunk's PV, after which the tile is freed.
// The RoPE dims (column block 7) are not copied (filled once); no masks, lengths or unit ends.
// Random bytes and random Q; the values mean nothing, the time does. Prints per variant the median
// over CTAs of the cycles a chunk (the whole walk), the attend's wait for a full tile and a
// converter's wait for a free one, a chunk (chunks after the first 8).
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o small_roles_probe \
//       benchmarks/small_roles_probe.cu && ./small_roles_probe
// (bash benchmarks/device_suite.sh small-roles-probe builds and runs it).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../csrc/cuda/common/ptx_primitives.cuh"
#include "../csrc/cuda/hopper/nvfp4_bit_decode.cuh"
#include "../csrc/cuda/hopper/sm90_primitives.cuh"
#include "../csrc/cuda/hopper_fused/fused_primitives.cuh"        // stmatrix_x4_trans
#include "../csrc/cuda/hopper_small/sm90_small_primitives.cuh"  // wgmma_m64n16k16_ss_ta
#include "probe_check.h"
#include "probe_pool.h"
#include "probe_wgmma.cuh"

namespace {

using namespace cake::cuda::sm90;
using cake::cuda::byte_perm;
using cake::cuda::fast_exp2_ftz;
using cake::cuda::ld_global_nc_8_no_l1;
using cake::cuda::named_barrier;
using cake::cuda::pack_bf16x2;
using cake::cuda::smem_address;

constexpr int kChunks = 96;      // chunks a CTA walks
constexpr int kWarmChunks = 8;   // not counted
constexpr int kWarpgroup = 128;
constexpr int kHeads = 16;
constexpr int kTileRowBytes = 128;
constexpr int kKColumnBlockBytes = 64 * kTileRowBytes;      // 8 KB: 64 rows x 64 bf16
constexpr int kQColumnBlockBytes = kHeads * kTileRowBytes;  // 2 KB
constexpr int kGroups = 7;                                  // 16-value groups a converter thread, a row
constexpr int kMaxTiles = 3;

struct __align__(1024) Shared {
  uint8_t k[kMaxTiles][8][kKColumnBlockBytes];  // K tiles: 64 rows x 512 dims
  uint8_t q[8][kQColumnBlockBytes];             // 16 heads x 512 dims
  uint8_t p[2][kQColumnBlockBytes];             // P[head][candidate] bf16, by chunk parity
  uint64_t full[kMaxTiles];                     // a pair's 256 threads stored the chunk
  uint64_t empty[kMaxTiles];                    // the attend's PV of the tile's chunk retired
  long long attend_wait, convert_wait;
};

template <int kPairs>
struct Config {
  static constexpr int kThreads = (1 + 2 * kPairs) * kWarpgroup;
  // setmaxnreg moves registers only within the CTA's launch allocation: 384 x 168 (one pair) or
  // 640 x 96 (two).
  static constexpr int kLaunchRegisters = kPairs == 1 ? 168 : 96;
  static constexpr int kAttendRegisters = 128;
  static constexpr int kConvertRegisters = kPairs == 1 ? 184 : 88;
  static_assert(kWarpgroup * (kAttendRegisters + 2 * kPairs * kConvertRegisters) <= kThreads * kLaunchRegisters,
                "within the launch allocation");
};

// Converter pair `pair`, thread `thread` (0..255): chunks pair, pair + kPairs, ..
template <int kPairs, int kTiles>
__device__ void convert(Shared& s, const uint8_t* __restrict__ pool, const int* __restrict__ rows, int pair,
                        int thread) {
  const int row = thread / 4, part = thread % 4;
  uint2 codes[kGroups];
  uint4 scale_words[2];
  auto load = [&](int c) {
    const uint8_t* r = pool + size_t(rows[min(c, kChunks - 1) * 64 + row]) * kProbeRowBytes;
#pragma unroll
    for (int i = 0; i < kGroups; ++i) codes[i] = ld_global_nc_8_no_l1(r + 8 * (part + 4 * i));
    scale_words[0] = ld_global_nc_16(r + kProbeScaleOffset);
    scale_words[1] = ld_global_nc_16(r + kProbeScaleOffset + 16);
  };
  load(pair);
  long long waited = 0;
  for (int c = pair; c < kChunks; c += kPairs) {
    const int t = c % kTiles;
    const long long t0 = clock64();
    if (c >= kTiles) mbarrier_wait(smem_address(&s.empty[t]), ((c / kTiles) - 1) & 1);
    if (c >= kWarmChunks) waited += clock64() - t0;
    const uint32_t tile = smem_address(s.k[t]);
    const int next = c + kPairs;
    const uint8_t* next_row = pool + size_t(rows[min(next, kChunks - 1) * 64 + row]) * kProbeRowBytes;
    const uint32_t scale_bytes[8] = {scale_words[0].x, scale_words[0].y, scale_words[0].z, scale_words[0].w,
                                     scale_words[1].x, scale_words[1].y, scale_words[1].z, scale_words[1].w};
#pragma unroll
    for (int i = 0; i < kGroups; ++i) {
      const int group = part + 4 * i;  // dims 16 group ..
      const uint32_t scale = cake::cuda::hopper::e4m3_to_decode_scale(
          uint8_t(scale_bytes[group / 4] >> (8 * (group % 4))) & 0x3F);
      uint32_t lo[4], hi[4];
      cake::cuda::hopper::e2m1x8_to_bf16_pairs(codes[i].x, scale, lo);
      cake::cuda::hopper::e2m1x8_to_bf16_pairs(codes[i].y, scale, hi);
      // Pairs (e0, e4), (e1, e5), .. into dim order, as the 64-head dequant does.
      const uint32_t column = smem_address(s.k[t]) + (group / 4) * kKColumnBlockBytes + row * kTileRowBytes;
      const int chunk = 2 * (group % 4);
      st_shared_16(column + ((chunk ^ (row % 8)) * 16), byte_perm(lo[0], lo[1], 0x5410u),
                   byte_perm(lo[2], lo[3], 0x5410u), byte_perm(lo[0], lo[1], 0x7632u),
                   byte_perm(lo[2], lo[3], 0x7632u));
      st_shared_16(column + (((chunk + 1) ^ (row % 8)) * 16), byte_perm(hi[0], hi[1], 0x5410u),
                   byte_perm(hi[2], hi[3], 0x5410u), byte_perm(hi[0], hi[1], 0x7632u),
                   byte_perm(hi[2], hi[3], 0x7632u));
      if (next < kChunks) codes[i] = ld_global_nc_8_no_l1(next_row + 8 * group);
    }
    (void)tile;
    if (next < kChunks) {
      scale_words[0] = ld_global_nc_16(next_row + kProbeScaleOffset);
      scale_words[1] = ld_global_nc_16(next_row + kProbeScaleOffset + 16);
    }
    mbarrier_arrive(smem_address(&s.full[t]));
  }
  if (thread == 0 && pair == 0) s.convert_wait = waited;
}

// The attend warpgroup: QK^T, the weights, PV for every chunk in order.
template <int kTiles>
__device__ void attend(Shared& s, int thread) {
  const int warp = thread / 32, lane = thread % 32;
  float o[8][8];
#pragma unroll
  for (int m = 0; m < 8; ++m)
#pragma unroll
    for (int i = 0; i < 8; ++i) o[m][i] = 0.0f;
  float sums[8] = {};
  long long waited = 0;
  auto qk = [&](int c, float (&acc)[8]) {
    const int t = c % kTiles;
    const long long t0 = clock64();
    mbarrier_wait(smem_address(&s.full[t]), (c / kTiles) & 1);
    if (c >= kWarmChunks) waited += clock64() - t0;
    fence_proxy_async();  // the converters' generic stores, read by wgmma
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < 32; ++step) {
      const uint32_t a = smem_address(s.k[t]) + (step / 4) * kKColumnBlockBytes + (step % 4) * 32;
      const uint32_t b = smem_address(s.q[step / 4]) + (step % 4) * 32;
      wgmma_m64n16k16_ss(acc, smem_descriptor(a, 16, 1024), smem_descriptor(b, 16, 1024), step != 0);
    }
    wgmma_commit();
  };
  auto pv = [&](int c) {
    const int t = c % kTiles;
    const uint64_t v_desc = smem_descriptor(smem_address(s.k[t]), kKColumnBlockBytes, 1024);
    const uint64_t p_desc = smem_descriptor(smem_address(s.p[c % 2]), 16, 1024);
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
#pragma unroll
      for (int m = 0; m < 8; ++m) {
        const uint32_t v_offset = m * kKColumnBlockBytes + k * 16 * kTileRowBytes;
        wgmma_m64n16k16_ss_ta(o[m], v_desc + (v_offset >> 4), p_desc + ((k * 32) >> 4));
      }
    }
    wgmma_commit();
  };
  auto weights = [&](int c, float (&acc)[8]) {
    // s_acc[2 h + e + 4 n]: candidate 16 warp + lane / 4 + 8 h, head 8 n + 2 (lane % 4) + e.
    bool moves = false;
    uint32_t packed[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float w0 = fast_exp2_ftz(acc[2 * j] * 0.01f), w1 = fast_exp2_ftz(acc[2 * j + 1] * 0.01f);
      moves = moves || acc[2 * j] > 1e30f || acc[2 * j + 1] > 1e30f;
      sums[2 * j] += w0;
      sums[2 * j + 1] += w1;
      packed[j] = pack_bf16x2(w0, w1);
    }
    if (__any_sync(0xffffffffu, moves)) sums[0] += 1.0f;  // the lazy reference: almost never
    // Matrix i of the stmatrix: candidates 16 warp + 8 (i % 2) .., heads 8 (i / 2) ..; transposed
    // into P[head][candidate]. packed[j]: h = j % 2 (candidate +8), n = j / 2 (head +8).
    const int i = lane / 8;
    const int head = 8 * (i / 2) + lane % 8;
    const int block = 2 * warp + i % 2;
    const uint32_t regs[4] = {packed[0], packed[1], packed[2], packed[3]};
    stmatrix_x4_trans(smem_address(s.p[c % 2]) + head * kTileRowBytes + ((block ^ (head % 8)) * 16), regs);
    fence_proxy_async();  // P is read by wgmma
    named_barrier<1, kWarpgroup>();
  };
  float acc[8];
  qk(0, acc);
  wgmma_wait<0>();
  pin_registers(acc);
  weights(0, acc);
  pv(0);
  for (int c = 1; c < kChunks; ++c) {
    qk(c, acc);
    wgmma_wait<1>();  // PV of chunk c - 1
#pragma unroll
    for (int m = 0; m < 8; ++m) pin_registers(o[m]);
    mbarrier_arrive(smem_address(&s.empty[(c - 1) % kTiles]));
    wgmma_wait<0>();
    pin_registers(acc);
    weights(c, acc);
    pv(c);
  }
  wgmma_wait<0>();
  float total = 0.0f;
#pragma unroll
  for (int m = 0; m < 8; ++m)
#pragma unroll
    for (int i = 0; i < 8; ++i) total += o[m][i];
#pragma unroll
  for (int i = 0; i < 8; ++i) total += sums[i];
  if (total == 12345.0f) s.attend_wait = -1;  // keeps O live
  if (thread == 0) s.attend_wait = waited;
}

template <int kPairs, int kTiles>
__global__ void __launch_bounds__(Config<kPairs>::kThreads, 1)
    small_roles(const uint8_t* __restrict__ pool, const int* __restrict__ indices, long long* __restrict__ out) {
  using C = Config<kPairs>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  Shared& s = *reinterpret_cast<Shared*>(smem_raw);
  const int thread = threadIdx.x;
  const int warpgroup = thread / kWarpgroup;
  // Random Q (bf16 in [-2, 2)) and the K tiles' RoPE column blocks.
  for (int i = thread; i < 8 * kQColumnBlockBytes / 4; i += C::kThreads) {
    const uint32_t h = (uint32_t(i) * 2654435761u) ^ (blockIdx.x * 40503u);
    reinterpret_cast<uint32_t*>(s.q)[i] = (h & 0x807F807Fu) | 0x3F003F00u;
  }
  for (int i = thread; i < kMaxTiles * kKColumnBlockBytes / 4; i += C::kThreads) {
    const uint32_t h = (uint32_t(i) * 2246822519u) ^ (blockIdx.x * 977u);
    reinterpret_cast<uint32_t*>(s.k[i / (kKColumnBlockBytes / 4)][7])[i % (kKColumnBlockBytes / 4)] =
        (h & 0x807F807Fu) | 0x3F003F00u;
  }
  if (thread == 0) {
    for (int t = 0; t < kMaxTiles; ++t) {
      mbarrier_init(smem_address(&s.full[t]), 2 * kWarpgroup);
      mbarrier_init(smem_address(&s.empty[t]), kWarpgroup);
    }
  }
  fence_proxy_async();
  __syncthreads();
  const int* rows = indices + size_t(blockIdx.x) * kChunks * 64;
  const long long start = clock64();
  if (warpgroup == 0) {
    if constexpr (C::kAttendRegisters < C::kLaunchRegisters) {
      release_registers<C::kAttendRegisters>();
    } else {
      claim_registers<C::kAttendRegisters>();
    }
    attend<kTiles>(s, thread);
  } else {
    if constexpr (C::kConvertRegisters < C::kLaunchRegisters) {
      release_registers<C::kConvertRegisters>();
    } else {
      claim_registers<C::kConvertRegisters>();
    }
    const int pair = (warpgroup - 1) / 2;
    convert<kPairs, kTiles>(s, pool, rows, pair, thread - kWarpgroup * (1 + 2 * pair));
  }
  __syncthreads();
  if (thread == 0) {
    long long* o = out + 3 * blockIdx.x;
    o[0] = clock64() - start;
    o[1] = s.attend_wait;
    o[2] = s.convert_wait;
  }
}

template <int kPairs, int kTiles>
void run(const uint8_t* pool, const int* indices, long long* out, int ctas) {
  using C = Config<kPairs>;
  auto kernel = small_roles<kPairs, kTiles>;
  const auto launches = probe_launches(kernel, ctas, C::kThreads, int(sizeof(Shared)), 4, out, 3 * size_t(ctas), pool,
                                       indices, out);
  std::vector<double> per_chunk, attend_wait, convert_wait;
  for (const auto& host : launches) {
    for (int c = 0; c < ctas; ++c) {
      per_chunk.push_back(double(host[3 * c]) / kChunks);
      attend_wait.push_back(double(host[3 * c + 1]) / (kChunks - kWarmChunks));
      convert_wait.push_back(double(host[3 * c + 2]) / ((kChunks - kWarmChunks) / kPairs));
    }
  }
  std::printf("| %d (%d registers) | %d | %.0f | %.0f | %.0f |\n", kPairs, C::kConvertRegisters, kTiles,
              probe_median(per_chunk), probe_median(attend_wait), probe_median(convert_wait));
}

}  // namespace

int main() {
  const int sms = probe_sm_count();
  ProbePool pool = make_probe_pool(size_t(sms) * kChunks * 64);
  long long* d_out = nullptr;
  CHECK_CUDA(cudaMalloc(&d_out, size_t(sms) * 3 * sizeof(long long)));
  std::printf("Small-heads roles probe: %d CTAs, %d chunks of 64 rows each, %zu bytes of shared memory\n\n", sms,
              kChunks, sizeof(Shared));
  std::printf("| converter pairs (registers) | K tiles | cycles a chunk | attend waits a chunk | converter waits a chunk |\n");
  std::printf("|---|---|---|---|---|\n");
  run<1, 2>(pool.rows, pool.indices, d_out, sms);
  run<1, 3>(pool.rows, pool.indices, d_out, sms);
  run<2, 2>(pool.rows, pool.indices, d_out, sms);
  run<2, 3>(pool.rows, pool.indices, d_out, sms);
  free_probe_pool(pool);
  CHECK_CUDA(cudaFree(d_out));
  return 0;
}
