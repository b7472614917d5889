// What a 16-head chunk's tensor work costs an SM by where its operands come from. The small-heads
// Hopper prefill (docs/hopper_small_kernel.md) converts a chunk's 64 rows into a bf16 K tile in
// shared memory (64 KB of stores) that PV then reads back as V^T through wgmma (64 KB of reads);
// at 16 heads those two passes alone are ~1,000 of the shared-memory pipe's cycles a chunk. The
// other shape keeps the rows in the converters' registers: each warp owns 64 dims of all 64
// candidates, computes its share of S with mma.sync (Q in registers), transposes its fragments
// in registers (movmatrix) and runs PV with V^T as wgmma's register operand. This probe times the
// pieces of both on every SM at once, one CTA an SM (384 threads = 3 warpgroups, like the kernel),
// each piece a loop of `kIterations` chunks; a chunk is:
//   pv_ss_1wg     warpgroup 0: the kernel's PV now, 8 m-tiles x 4 k-steps of wgmma m64n16k16,
//                 V^T MN-major and P^T from shared memory (32 instructions), then a wait
//   pv_ss_2wg     the same 32 split over warpgroups 0 and 1 (4 m-tiles each)
//   pv_rs_2wg     warpgroups 0 and 1: 4 m-tiles x 4 k-steps each, V^T from registers (ptxas puts
//                 5 more warpgroup arrives among its 16 wgmmas here; reg_chunk's have one)
//   movmatrix     warps 0..7: 64 movmatrix.trans each (one warp's 64 dims x 64 candidates)
//   mma_qk        warps 0..7: 32 mma.sync m16n8k16 each (S over the warp's 64 dims: 16 heads x 64
//                 candidates, Q as the A operand in registers)
//   stores        warpgroup 2: a 64 KB tile of 16-byte shared stores (conflict-free)
//   stores+pv_ss  warpgroup 2's stores beside warpgroup 0's PV (the present kernel's shared pipe)
//   stores+mov    warpgroup 2's stores beside warps 0..7's movmatrix (do they share a pipe?)
//   reg_chunk     warps 0..7: mma_qk, movmatrix, then PV with register V^T (pv_rs_2wg): the
//                 register shape's tensor work and transposes for one chunk, in order
//   reg_chunk_mma the same with PV by mma.sync too (32 a warp, P^T fragments kept in registers)
//   qk_rs_2wg     warpgroups 0 and 1: the present QK^T, 16 wgmma m64n16k16 each (K from registers,
//                 Q from shared memory)
//   present_chunk warpgroups 0 and 1: qk_rs_2wg, then the K tile's 64 KB of stores (32 KB each);
//                 warpgroup 2 beside them: pv_ss_1wg (the present kernel's tensor work and shared
//                 traffic for a chunk, without the loads, the conversion and the softmax)
// Prints, per piece and group of warps, the median over CTAs of the slowest warp's cycles a chunk.
// The values are garbage (uninitialised shared memory, registers from the thread index); only the
// time means anything. The present kernel's chunk takes ~2,900 cycles at 16 heads, topk 512.
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o operand_path_probe benchmarks/operand_path_probe.cu && ./operand_path_probe
// (bash benchmarks/device_suite.sh operand-probe builds and runs it).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../csrc/cuda/common/ptx_primitives.cuh"
#include "../csrc/cuda/hopper/sm90_primitives.cuh"
#include "../csrc/cuda/hopper_small/sm90_small_primitives.cuh"
#include "../csrc/cuda/portable/sm80_primitives.cuh"  // mma_bf16_16x8x16
#include "probe_check.h"

namespace {

using cake::cuda::mma_bf16_16x8x16;
using cake::cuda::smem_address;
using namespace cake::cuda::sm90;

constexpr int kThreads = 384;
constexpr int kWarps = kThreads / 32;
constexpr int kIterations = 256;
constexpr int kTileBytes = 64 * 1024;      // the K tile: 64 rows x 512 bf16 dims, 8 column blocks of 8 KB
constexpr int kColumnBlockBytes = 8192;
constexpr int kPBytes = 2048;              // P^T: 16 heads x 64 candidates bf16
constexpr int kQHalfBytes = 8192;          // a converter's Q half: 16 heads x 256 dims bf16, 4 column blocks of 2 KB
constexpr int kSmemBytes = kTileBytes + kPBytes + 2 * kQHalfBytes + 1024;  // + alignment

enum Piece : int {
  kPvSs1 = 0, kPvSs2, kPvRs2, kMovmatrix, kMmaQk, kStores, kStoresPvSs, kStoresMov, kRegChunk, kRegChunkMma,
  kQkRs2, kPresentChunk, kPieces
};
const char* const kPieceNames[] = {"pv_ss_1wg", "pv_ss_2wg", "pv_rs_2wg", "movmatrix", "mma_qk", "stores",
                                   "stores+pv_ss", "stores+mov", "reg_chunk", "reg_chunk_mma",
                                   "qk_rs_2wg", "present_chunk"};

__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t a) {
  uint32_t d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
  return d;
}

// A warp's chunk of data in registers: k[s][n][h] is the mma.sync B fragment of k-step s (16 of
// the warp's dims) and n-block n (8 candidates), h the low / high 8 dims; after movmatrix each
// register holds the transposed 8 x 8 block, which are the wgmma / mma.sync A fragments of V^T.
struct WarpRows {
  uint32_t k[4][8][2];
};

// Q over the warp's 64 dims as the mma.sync A fragments of 4 k-steps.
__device__ __forceinline__ void mma_qk(float (&s)[8][4], const uint32_t (&q)[4][4], const WarpRows& rows) {
#pragma unroll
  for (int step = 0; step < 4; ++step) {
#pragma unroll
    for (int n = 0; n < 8; ++n) mma_bf16_16x8x16(s[n], q[step], rows.k[step][n][0], rows.k[step][n][1]);
  }
}

__device__ __forceinline__ void transpose(WarpRows& rows) {
#pragma unroll
  for (int step = 0; step < 4; ++step) {
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      rows.k[step][n][0] = movmatrix_trans(rows.k[step][n][0]);
      rows.k[step][n][1] = movmatrix_trans(rows.k[step][n][1]);
    }
  }
}

// Calls multiply(tile, step, a) for each m-tile `tile` (the warp's dims 16 tile ..) and k-step
// `step` (candidates 16 step ..) with V^T's A fragment `a`, from the transposed blocks.
template <typename Multiply>
__device__ __forceinline__ void for_each_v_fragment(const WarpRows& rows, Multiply&& multiply) {
#pragma unroll
  for (int step = 0; step < 4; ++step) {
#pragma unroll
    for (int tile = 0; tile < 4; ++tile) {
      const uint32_t a[4] = {rows.k[tile][2 * step][0], rows.k[tile][2 * step][1], rows.k[tile][2 * step + 1][0],
                             rows.k[tile][2 * step + 1][1]};
      multiply(tile, step, a);
    }
  }
}

__device__ __forceinline__ void pv_rs(float (&o)[4][8], const WarpRows& rows, uint32_t p_address) {
  const uint64_t p_desc = smem_descriptor(p_address, 16, 1024);
  wgmma_fence();
  for_each_v_fragment(rows, [&](int tile, int step, const uint32_t (&a)[4]) {
    wgmma_m64n16k16_rs(o[tile], a, p_desc + ((step * 32) >> 4), true);
  });
  wgmma_commit();
  wgmma_wait<0>();
#pragma unroll
  for (int tile = 0; tile < 4; ++tile) pin_registers(o[tile]);
}

// PV by mma.sync: O^T[warp's 64 dims x 16 heads] with P^T's B fragments held in registers.
__device__ __forceinline__ void pv_mma(float (&o)[4][2][4], const WarpRows& rows, const uint32_t (&p)[4][2][2]) {
  for_each_v_fragment(rows, [&](int tile, int step, const uint32_t (&a)[4]) {
#pragma unroll
    for (int n = 0; n < 2; ++n) mma_bf16_16x8x16(o[tile][n], a, p[step][n][0], p[step][n][1]);
  });
}

// Warpgroup `first_tile / 4`'s share of the present PV: m-tiles first_tile .. first_tile + tiles - 1.
template <int kTiles>
__device__ __forceinline__ void pv_ss(float (&o)[kTiles][8], int first_tile, uint32_t v_address, uint32_t p_address) {
  const uint64_t v_desc = smem_descriptor(v_address, kColumnBlockBytes, 1024);
  const uint64_t p_desc = smem_descriptor(p_address, 16, 1024);
  wgmma_fence();
#pragma unroll
  for (int step = 0; step < 4; ++step) {
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      const uint32_t v_offset = (first_tile + t) * kColumnBlockBytes + step * 16 * 128;
      wgmma_m64n16k16_ss_ta(o[t], v_desc + (v_offset >> 4), p_desc + ((step * 32) >> 4));
    }
  }
  wgmma_commit();
  wgmma_wait<0>();
#pragma unroll
  for (int t = 0; t < kTiles; ++t) pin_registers(o[t]);
}

// The present QK^T of one converter warpgroup: S^T[64 candidates x 16 heads] over its 256 dims,
// 16 wgmma m64n16k16 with K from registers (the rows' 64 registers as 16 A fragments) and Q
// K-major from shared memory.
__device__ __forceinline__ void qk_rs(float (&s_acc)[8], const WarpRows& rows, uint32_t q_address) {
  const uint64_t q_desc = smem_descriptor(q_address, 16, 1024);
  wgmma_fence();
#pragma unroll
  for (int step = 0; step < 16; ++step) {
    const uint32_t q_offset = (step / 4) * 2048 + (step % 4) * 32;
    uint32_t a[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) a[j] = rows.k[step / 4][(4 * step + j) / 2 % 8][j % 2];
    wgmma_m64n16k16_rs(s_acc, a, q_desc + (q_offset >> 4), step > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  pin_registers(s_acc);
}

// A 64 KB tile stored by kStoreThreads threads (`thread` 0..kStoreThreads - 1): 16-byte stores,
// consecutive threads on consecutive 16 bytes.
template <int kStoreThreads>
__device__ __forceinline__ void store_tile(uint32_t tile_address, int thread, uint32_t value) {
#pragma unroll 8
  for (int j = 0; j < kTileBytes / 16 / kStoreThreads; ++j)
    st_shared_16(tile_address + 16 * (kStoreThreads * j + thread), value, value + 1, value + 2, value + 3);
}

template <int kPiece>
__device__ __forceinline__ bool warp_takes_part(int warp) {
  switch (kPiece) {
    case kPvSs1: return warp < 4;
    case kStores: return warp >= 8;
    case kStoresPvSs: return warp < 4 || warp >= 8;
    case kStoresMov: return true;
    case kPresentChunk: return true;
    default: return warp < 8;
  }
}

// The sum of a piece's results (what keeps them live).
template <int kRows, int kCols>
__device__ __forceinline__ float total(const float (&v)[kRows][kCols]) {
  float sum = 0.0f;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int c = 0; c < kCols; ++c) sum += v[r][c];
  return sum;
}

template <int kPiece>
__global__ void __launch_bounds__(kThreads, 1) run_piece(long long* cycles, float* sink, int write_sink) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_address(smem_raw) + 1023) & ~1023u;
  const uint32_t tile_address = base;
  const uint32_t p_address = base + kTileBytes;
  // The warp index broadcast from lane 0, so that ptxas sees the branches below as warp-uniform
  // (otherwise it serialises the wgmmas in them, ptxas info C7520).
  const int thread = threadIdx.x, warp = __shfl_sync(0xffffffffu, thread / 32, 0), lane = thread % 32;
  const uint32_t q_address = p_address + kPBytes + (warp / 4 == 1 ? kQHalfBytes : 0);
  WarpRows rows;
  uint32_t q[4][4];
  uint32_t p[4][2][2];
#pragma unroll
  for (int s = 0; s < 4; ++s) {
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      rows.k[s][n][0] = 0x3f803f80u ^ (thread * 7 + s * 8 + n);
      rows.k[s][n][1] = 0x3f803f80u ^ (thread * 5 + s * 8 + n);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) q[s][i] = 0x3c003c00u ^ (thread + 4 * s + i);
#pragma unroll
    for (int n = 0; n < 2; ++n) p[s][n][0] = p[s][n][1] = 0x3c003c00u ^ (thread + s + n);
  }
  // Each piece's results go into `live` at the end (the sink is never written at run time), so
  // the compiler keeps the work and only the registers the piece uses.
  float live = 0.0f;
  __syncthreads();
  const long long start = clock64();
  if (warp_takes_part<kPiece>(warp)) {
    if constexpr (kPiece == kPvSs1 || kPiece == kStoresPvSs) {
      float d[8][8] = {};
#pragma unroll 1
      for (int it = 0; it < kIterations; ++it) {
        if (warp >= 8) store_tile<128>(tile_address, thread - 256, uint32_t(it));
        else pv_ss<8>(d, 0, tile_address, p_address);
      }
      live += total(d);
    } else if constexpr (kPiece == kPvSs2 || kPiece == kPvRs2) {
      float o[4][8] = {};
#pragma unroll 1
      for (int it = 0; it < kIterations; ++it) {
        if constexpr (kPiece == kPvSs2) {
          pv_ss<4>(o, 4 * (warp / 4), tile_address, p_address);
        } else {
          pv_rs(o, rows, p_address);
        }
      }
      live += total(o);
    } else if constexpr (kPiece == kMovmatrix || kPiece == kStoresMov) {
#pragma unroll 1
      for (int it = 0; it < kIterations; ++it) {
        if (warp >= 8) store_tile<128>(tile_address, thread - 256, uint32_t(it));
        else transpose(rows);
      }
    } else if constexpr (kPiece == kMmaQk) {
      float acc[8][4] = {};
#pragma unroll 1
      for (int it = 0; it < kIterations; ++it) mma_qk(acc, q, rows);
      live += total(acc);
    } else if constexpr (kPiece == kStores) {
#pragma unroll 1
      for (int it = 0; it < kIterations; ++it) store_tile<128>(tile_address, thread - 256, uint32_t(it));
    } else if constexpr (kPiece == kRegChunk || kPiece == kRegChunkMma) {
      float acc[8][4] = {};
      float o[4][8] = {};  // PV by wgmma: 4 m-tiles x 8; by mma.sync: [tile][n block][4] in the same registers
#pragma unroll 1
      for (int it = 0; it < kIterations; ++it) {
        mma_qk(acc, q, rows);
        transpose(rows);
        if constexpr (kPiece == kRegChunk) {
          pv_rs(o, rows, p_address);
        } else {
          pv_mma(reinterpret_cast<float(&)[4][2][4]>(o), rows, p);
        }
      }
      live += total(acc) + total(o);
    } else if constexpr (kPiece == kQkRs2) {
      float s_acc[8] = {};
#pragma unroll 1
      for (int it = 0; it < kIterations; ++it) qk_rs(s_acc, rows, q_address);
#pragma unroll
      for (int i = 0; i < 8; ++i) live += s_acc[i];
    } else if constexpr (kPiece == kPresentChunk) {
      float s_acc[8] = {};
      float d[8][8] = {};
#pragma unroll 1
      for (int it = 0; it < kIterations; ++it) {
        if (warp >= 8) {
          pv_ss<8>(d, 0, tile_address, p_address);
        } else {
          qk_rs(s_acc, rows, q_address);
          store_tile<256>(tile_address, thread, uint32_t(it));
        }
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) live += s_acc[i] + d[i][i];
    }
  }
  const long long elapsed = clock64() - start;
  if (lane == 0) cycles[blockIdx.x * kWarps + warp] = warp_takes_part<kPiece>(warp) ? elapsed : -1;
  if (write_sink) {
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
      for (int n = 0; n < 8; ++n) live += __uint_as_float(rows.k[s][n][0] ^ rows.k[s][n][1]);
    sink[blockIdx.x * kThreads + thread] = live;
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return -1.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <int kPiece>
void time_piece(int sms, long long* cycles_device, float* sink) {
  CHECK_CUDA(cudaFuncSetAttribute(run_piece<kPiece>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  for (int launch = 0; launch < 2; ++launch) {  // the first warms up
    run_piece<kPiece><<<sms, kThreads, kSmemBytes>>>(cycles_device, sink, 0);
    CHECK_CUDA(cudaGetLastError());
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<long long> cycles(size_t(sms) * kWarps);
  CHECK_CUDA(cudaMemcpy(cycles.data(), cycles_device, cycles.size() * sizeof(long long), cudaMemcpyDeviceToHost));
  // Groups: warpgroups 0 + 1 (warps 0..7) and warpgroup 2 (warps 8..11); each the slowest warp of a CTA.
  std::vector<double> group01, group2;
  for (int cta = 0; cta < sms; ++cta) {
    long long worst01 = -1, worst2 = -1;
    for (int w = 0; w < kWarps; ++w) {
      const long long c = cycles[size_t(cta) * kWarps + w];
      if (w < 8) worst01 = std::max(worst01, c);
      else worst2 = std::max(worst2, c);
    }
    if (worst01 >= 0) group01.push_back(double(worst01) / kIterations);
    if (worst2 >= 0) group2.push_back(double(worst2) / kIterations);
  }
  const double g01 = median(group01), g2 = median(group2);
  char a[32] = "-", b[32] = "-";
  if (g01 >= 0) std::snprintf(a, sizeof(a), "%.0f", g01);
  if (g2 >= 0) std::snprintf(b, sizeof(b), "%.0f", g2);
  std::printf("| %s | %s | %s |\n", kPieceNames[kPiece], a, b);
}

template <int... kPiece>
void time_all(int sms, long long* cycles, float* sink, std::integer_sequence<int, kPiece...>) {
  (time_piece<kPiece>(sms, cycles, sink), ...);
}

}  // namespace

int main() {
  int device = 0, sms = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  long long* cycles = nullptr;
  float* sink = nullptr;
  CHECK_CUDA(cudaMalloc(&cycles, size_t(sms) * kWarps * sizeof(long long)));
  CHECK_CUDA(cudaMalloc(&sink, size_t(sms) * kThreads * sizeof(float)));
  std::printf("%d CTAs (one an SM), %d threads, %d chunks each; cycles a chunk: median over CTAs of the slowest warp\n",
              sms, kThreads, kIterations);
  std::printf("| piece | warps 0..7 | warps 8..11 |\n|---|---|---|\n");
  time_all(sms, cycles, sink, std::make_integer_sequence<int, kPieces>{});
  CHECK_CUDA(cudaFree(cycles));
  CHECK_CUDA(cudaFree(sink));
  return 0;
}
