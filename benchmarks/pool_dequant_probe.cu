// How long does converting a whole NVFP4 cache view into a bf16 workspace take on the GPU? A
// prefill that gathers every row many times (T = 4096, topk 1024: ~4 million row reads of a
// 65,536-row pool) could convert each row once into [slots, 512] bf16 and then gather 1 KB rows
// by cp.async, as a bf16 kernel's producer does (docs/hopper_kernel.md, item 7, way (a)); this
// probe measures that pass alone: one warp a slot, lane g < 28 decodes NoPE group g (8 code
// bytes and its E4M3 scale -> 16 bf16), lanes 28..31 copy 16 RoPE dims each, two 16-byte stores
// a lane. L2 is flushed before each timed run; every output word is checked against a host
// decode of the same bytes (the products are exact in bf16, so the check is for equality).
//   nvcc -std=c++17 -O3 -arch=sm_90a -Icsrc -o pool_dequant_probe benchmarks/pool_dequant_probe.cu
//   ./pool_dequant_probe 65536        # slots (pages of 64); prints us, GB/s read + written
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/common/nvfp4_dequant.cuh"
#include "probe_check.h"

namespace {

using cake::nvfp4::CacheGeometry;
using cake::nvfp4::kHeadDim;
using cake::nvfp4::kNopeBytes;
using cake::nvfp4::kNumGroups;
using cake::nvfp4::kTokenBytes;

constexpr int kPageSize = 64;
constexpr int kPageBytes = kPageSize * kTokenBytes;  // an unpadded page: data rows, then scale rows

// Slot s -> out[s * 512 ..]: NoPE dims 16 g .. 16 g + 15 from lane g, RoPE dims 448 + 16 (l - 28)
// .. from lane l >= 28.
__global__ void pool_to_bf16(const uint8_t* __restrict__ cache, CacheGeometry geometry, uint4* __restrict__ out) {
  const int lane = threadIdx.x % 32;
  const int warps = gridDim.x * blockDim.x / 32;
  for (int64_t slot = (blockIdx.x * blockDim.x + threadIdx.x) / 32; slot < geometry.num_slots(); slot += warps) {
    const uint8_t* data = cache + geometry.data_offset(slot);
    uint4* dst = out + slot * (kHeadDim * 2 / 16) + 2 * lane;
    if (lane < kNumGroups) {
      const uint2 codes = *reinterpret_cast<const uint2*>(data + 8 * lane);
      const uint8_t scale = cache[geometry.scale_offset(slot) + lane];
      uint32_t words[8];
      cake::cuda::dequantize_group(codes, scale, words);
      dst[0] = make_uint4(words[0], words[1], words[2], words[3]);
      dst[1] = make_uint4(words[4], words[5], words[6], words[7]);
    } else {
      const uint4* rope = reinterpret_cast<const uint4*>(data + kNopeBytes) + 2 * (lane - kNumGroups);
      dst[0] = rope[0];
      dst[1] = rope[1];
    }
  }
}

uint16_t float_to_bf16_bits(float value) { return uint16_t(cake::nvfp4::float_to_bits(value) >> 16); }

}  // namespace

int main(int argc, char** argv) {
  const int num_slots = argc > 1 ? std::atoi(argv[1]) : 65536;
  if (num_slots <= 0 || num_slots % kPageSize != 0) {
    std::fprintf(stderr, "slots must be a positive multiple of %d\n", kPageSize);
    return 2;
  }
  const CacheGeometry geometry{kPageSize, kPageBytes, num_slots / kPageSize};
  std::vector<uint8_t> cache(size_t(geometry.num_pages) * kPageBytes, 0);
  std::mt19937 rng(1234);
  for (int slot = 0; slot < num_slots; ++slot) {
    uint8_t* data = cache.data() + geometry.data_offset(slot);
    for (int b = 0; b < kNopeBytes; ++b) data[b] = uint8_t(rng());
    for (int d = 0; d < 64; ++d) {  // RoPE: normal bf16 values
      const uint16_t bits = float_to_bf16_bits(std::normal_distribution<float>(0.f, 1.f)(rng));
      std::memcpy(data + kNopeBytes + 2 * d, &bits, 2);
    }
    uint8_t* scales = cache.data() + geometry.scale_offset(slot);
    for (int g = 0; g < kNumGroups; ++g) scales[g] = uint8_t(0x20 + rng() % 0x40);  // 2^-3 .. 2^4 + mantissa
  }

  uint8_t* d_cache = nullptr;
  uint4* d_out = nullptr;
  uint8_t* d_flush = nullptr;
  const size_t out_bytes = size_t(num_slots) * kHeadDim * 2;
  const size_t flush_bytes = size_t(256) << 20;
  CHECK_CUDA(cudaMalloc(&d_cache, cache.size()));
  CHECK_CUDA(cudaMalloc(&d_out, out_bytes));
  CHECK_CUDA(cudaMalloc(&d_flush, flush_bytes));
  CHECK_CUDA(cudaMemcpy(d_cache, cache.data(), cache.size(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemset(d_out, 0xFF, out_bytes));  // NaN everywhere until written

  int sms = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int threads = 256;
  const int blocks = std::min((num_slots + threads / 32 - 1) / (threads / 32), sms * 8);
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int run = 0; run < 23; ++run) {
    CHECK_CUDA(cudaMemset(d_flush, run, flush_bytes));
    CHECK_CUDA(cudaEventRecord(start));
    pool_to_bf16<<<blocks, threads>>>(d_cache, geometry, d_out);
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    CHECK_CUDA(cudaGetLastError());
    float ms = 0.f;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (run >= 3) times.push_back(ms * 1000.f);  // three warm-up runs
  }
  std::sort(times.begin(), times.end());
  const float median_us = times[times.size() / 2];

  std::vector<uint16_t> out(out_bytes / 2);
  CHECK_CUDA(cudaMemcpy(out.data(), d_out, out_bytes, cudaMemcpyDeviceToHost));
  size_t mismatches = 0;
  for (int slot = 0; slot < num_slots; ++slot) {
    const uint8_t* data = cache.data() + geometry.data_offset(slot);
    const uint8_t* scales = cache.data() + geometry.scale_offset(slot);
    for (int d = 0; d < kHeadDim; ++d) {
      uint16_t expected;
      if (d < cake::nvfp4::kNopeDim) {
        const uint32_t nibble = (data[d / 2] >> (4 * (d % 2))) & 0xFu;
        expected = float_to_bf16_bits(cake::nvfp4::e2m1_to_float(nibble) * cake::nvfp4::e4m3_to_float(scales[d / 16]));
      } else {
        std::memcpy(&expected, data + kNopeBytes + 2 * (d - cake::nvfp4::kNopeDim), 2);
      }
      mismatches += out[size_t(slot) * kHeadDim + d] != expected;
    }
  }
  const double gb = (double(num_slots) * kTokenBytes + double(out_bytes)) / 1e9;
  std::printf("slots %d: %.1f us (median of %zu, L2 flushed), %.0f GB/s read + written, %zu mismatched values of %zu\n",
              num_slots, median_us, times.size(), gb / (median_us * 1e-6), mismatches, out.size());
  CHECK_CUDA(cudaFree(d_cache));
  CHECK_CUDA(cudaFree(d_out));
  CHECK_CUDA(cudaFree(d_flush));
  return mismatches == 0 ? 0 : 1;
}
