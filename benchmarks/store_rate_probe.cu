// How fast does one SM write a 64 KB output tile (64 heads x 512 bf16 dims, 1 KB rows), and does
// the answer depend on the store pattern or on how many SMs write at once? The Hopper prefill
// kernel writes such a tile at the end of every work item, and its trace counts ~5,200 cycles for
// it (~13 bytes a cycle an SM) whether the tile goes out by TMA or from registers
// (docs/hopper_kernel.md, "Where an item's time goes"). Each CTA (256 threads: the two consumer
// warpgroups) writes `tiles` tiles one after the other, timing each with clock64 between two
// __syncthreads, in one of four ways:
//   rows8x64   16-byte stores, a warp instruction covering 64 bytes of each of 8 rows (the
//              kernel's register epilogue after its quad transposes)
//   rows4x128  the same, 128 bytes of each of 4 rows (whole cache lines)
//   rows1x512  the same, 512 contiguous bytes of one row
//   bulk       one thread sends the tile from shared memory in eight 8 KB bulk copies and waits
//              until they have read it (what the TMA epilogue waited for)
//   rows8x64+reads  rows8x64 while 256 more threads of the CTA read 112 KB (a 64 KB Q tile and
//              two blocks' gather: the kernel's own loads at the same moment) with 16-byte loads
// for 1, 16, 66 and all SMs' worth of CTAs. Prints, per pattern and CTA count, the median over CTAs
// of the cycles a tile took (the reads included where there are), the tile's bytes a cycle an SM
// that makes, and the whole launch's GB/s of tile writes.
//   nvcc -O3 -arch=sm_90a -o store_rate_probe benchmarks/store_rate_probe.cu && ./store_rate_probe
// (bash benchmarks/device_suite.sh store-probe builds and runs it).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../csrc/cuda/common/ptx_primitives.cuh"  // st_global_16, ld_global_nc_16_no_l1: the kernels' own
#include "probe_check.h"

namespace {

using cake::cuda::ld_global_nc_16_no_l1;
using cake::cuda::st_global_16;

constexpr int kRowBytes = 1024;
constexpr int kRows = 64;
constexpr int kTileBytes = kRows * kRowBytes;
constexpr int kThreads = 256;
constexpr int kStoresPerThread = kTileBytes / 16 / kThreads;  // 16
constexpr int kBulkChunkBytes = 8192;

enum Pattern : int { kRows8x64 = 0, kRows4x128 = 1, kRows1x512 = 2, kBulk = 3, kRows8x64WithReads = 4 };
const char* const kPatternNames[] = {"rows8x64", "rows4x128", "rows1x512", "bulk", "rows8x64+reads"};
constexpr int kReadBytes = 112 * 1024;
constexpr int kLoadsPerReader = kReadBytes / 16 / kThreads;  // 28
template <int kPattern>
constexpr int block_threads() { return kPattern == kRows8x64WithReads ? 2 * kThreads : kThreads; }

// Byte offset in the tile of store j of this thread: warp w covers rows 8 w .. 8 w + 7.
template <int kPattern>
__device__ __forceinline__ int store_offset(int warp, int lane, int j) {
  if (kPattern == kRows8x64 || kPattern == kRows8x64WithReads) {  // segment j (64 bytes) of 8 rows; lane: row lane / 4, chunk lane % 4
    return (8 * warp + lane / 4) * kRowBytes + 64 * j + 16 * (lane % 4);
  } else if (kPattern == kRows4x128) {  // rows 4 (j / 8) .., segment j % 8 (128 bytes)
    return (8 * warp + 4 * (j / 8) + lane / 8) * kRowBytes + 128 * (j % 8) + 16 * (lane % 8);
  } else {  // row j / 2, half j % 2 (512 bytes)
    return (8 * warp + j / 2) * kRowBytes + 512 * (j % 2) + 16 * lane;
  }
}

template <int kPattern>
__global__ void __launch_bounds__(block_threads<kPattern>(), 1)
    store_tiles(uint8_t* out, const uint8_t* in, int tiles, long long* cycles, uint32_t* sink) {
  extern __shared__ __align__(128) uint8_t staging[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (kPattern == kBulk) {
    for (int i = threadIdx.x; i < kTileBytes / 4; i += kThreads) reinterpret_cast<uint32_t*>(staging)[i] = i;
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  const uint32_t value[4] = {threadIdx.x, blockIdx.x, 0x3F803F80u, 0x40004000u};
  uint32_t read_sum = 0;
  long long total = 0;
  for (int t = 0; t < tiles; ++t) {
    uint8_t* tile = out + (size_t(t) * gridDim.x + blockIdx.x) * kTileBytes;
    __syncthreads();
    const long long start = clock64();
    if (kPattern == kBulk) {
      if (threadIdx.x == 0) {
        const uint32_t source = uint32_t(__cvta_generic_to_shared(staging));
        for (int c = 0; c < kTileBytes / kBulkChunkBytes; ++c) {
          asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(tile + c * kBulkChunkBytes),
                       "r"(source + c * kBulkChunkBytes), "n"(kBulkChunkBytes)
                       : "memory");
        }
        asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
        asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
      }
    } else if (threadIdx.x < kThreads) {
#pragma unroll
      for (int j = 0; j < kStoresPerThread; ++j) st_global_16(tile + store_offset<kPattern>(warp, lane, j), value);
    } else {  // the readers (kRows8x64WithReads)
      const uint8_t* source = in + (size_t(t) * gridDim.x + blockIdx.x) * kReadBytes + 16 * (threadIdx.x - kThreads);
      uint4 v[kLoadsPerReader];
#pragma unroll
      for (int j = 0; j < kLoadsPerReader; ++j) v[j] = ld_global_nc_16_no_l1(source + j * 16 * kThreads);
#pragma unroll
      for (int j = 0; j < kLoadsPerReader; ++j) read_sum ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
    }
    __syncthreads();
    total += clock64() - start;
  }
  if (kPattern == kBulk && threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  if (threadIdx.x == 0) cycles[blockIdx.x] = total;
  if (read_sum == 0x12345678u) *sink = read_sum;  // keeps the loads
}

template <int kPattern>
void run(uint8_t* out, const uint8_t* in, long long* cycles_device, uint32_t* sink, int ctas, int tiles) {
  const int smem = kPattern == kBulk ? kTileBytes : 0;
  CHECK_CUDA(cudaFuncSetAttribute(store_tiles<kPattern>, cudaFuncAttributeMaxDynamicSharedMemorySize, kTileBytes));
  store_tiles<kPattern><<<ctas, block_threads<kPattern>(), smem>>>(out, in, tiles, cycles_device, sink);  // warm-up
  CHECK_CUDA(cudaGetLastError());
  cudaEvent_t begin, end;
  CHECK_CUDA(cudaEventCreate(&begin));
  CHECK_CUDA(cudaEventCreate(&end));
  CHECK_CUDA(cudaEventRecord(begin));
  store_tiles<kPattern><<<ctas, block_threads<kPattern>(), smem>>>(out, in, tiles, cycles_device, sink);
  CHECK_CUDA(cudaEventRecord(end));
  CHECK_CUDA(cudaEventSynchronize(end));
  float ms = 0.0f;
  CHECK_CUDA(cudaEventElapsedTime(&ms, begin, end));
  std::vector<long long> cycles(ctas);
  CHECK_CUDA(cudaMemcpy(cycles.data(), cycles_device, ctas * sizeof(long long), cudaMemcpyDeviceToHost));
  std::sort(cycles.begin(), cycles.end());
  const double per_tile = double(cycles[ctas / 2]) / tiles;
  const double bytes = double(kTileBytes) * tiles * ctas;
  std::printf("| %s | %d | %.0f | %.1f | %.0f | %.3f |\n", kPatternNames[kPattern], ctas, per_tile,
              kTileBytes / per_tile, bytes / (ms * 1e-3) / 1e9, ms);
  CHECK_CUDA(cudaEventDestroy(begin));
  CHECK_CUDA(cudaEventDestroy(end));
}

}  // namespace

int main() {
  int device = 0, sms = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  constexpr int kTiles = 32;
  uint8_t *out = nullptr, *in = nullptr;
  long long* cycles = nullptr;
  uint32_t* sink = nullptr;
  CHECK_CUDA(cudaMalloc(&out, size_t(kTileBytes) * kTiles * sms));
  CHECK_CUDA(cudaMalloc(&in, size_t(kReadBytes) * kTiles * sms));
  CHECK_CUDA(cudaMemset(in, 1, size_t(kReadBytes) * kTiles * sms));
  CHECK_CUDA(cudaMalloc(&cycles, sms * sizeof(long long)));
  CHECK_CUDA(cudaMalloc(&sink, sizeof(uint32_t)));
  std::printf("%d SMs; %d tiles of %d bytes a CTA, 256 threads; cycles a tile: median over CTAs\n", sms, kTiles,
              kTileBytes);
  std::printf("| pattern | CTAs | cycles a tile | bytes a cycle an SM | GB/s (launch) | ms |\n|---|---|---|---|---|---|\n");
  const int counts[] = {1, 16, sms / 2, sms};
  for (const int ctas : counts) {
    run<kRows8x64>(out, in, cycles, sink, ctas, kTiles);
    run<kRows4x128>(out, in, cycles, sink, ctas, kTiles);
    run<kRows1x512>(out, in, cycles, sink, ctas, kTiles);
    run<kBulk>(out, in, cycles, sink, ctas, kTiles);
    run<kRows8x64WithReads>(out, in, cycles, sink, ctas, kTiles);
  }
  CHECK_CUDA(cudaFree(out));
  CHECK_CUDA(cudaFree(in));
  CHECK_CUDA(cudaFree(cycles));
  CHECK_CUDA(cudaFree(sink));
  return 0;
}
