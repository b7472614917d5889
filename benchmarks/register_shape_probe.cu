// A whole 16-head chunk in the register shape, loads and conversion included: how many cycles a
// 64-candidate chunk would take an SM if the small-heads prefill (docs/hopper_small_kernel.md)
// kept K in registers instead of a shared-memory tile. operand_path_probe.cu timed only that
// shape's MMAs and transposes (994-1,140 cycles a chunk); the present kernel's chunk takes ~2,900.
//
// Groups of four warps (a warp per 128 dims); a group walks its units (a token's 16 heads) in steps
// of 16 candidates. Per step each warp:
//   - has the step's row offsets from indices loaded two steps ahead (lane l: candidate l % 16),
//     and loads its 64 code bytes of each candidate one step ahead (thread (g, q) of a quad: 16 bytes
//     of candidates g and g + 8) with their two scale bytes;
//   - decodes them (the library's bit-placement decode): the mma.sync B fragments of K^T for its
//     8 k-steps x 2 candidate n-tiles (32 registers);
//   - S partial = Q K^T over its dims (16 mma.sync m16n8k16, Q's A fragments in registers per unit);
//   - sums the four warps' partials through shared memory (1 KB a warp, double-buffered by step
//     parity, one named barrier a step);
//   - the softmax of the 16 x 16 scores (row max by two shuffles, the lazy reference moved by a warp
//     vote, exp2, sums), the weights packed as PV's A fragments (no data movement);
//   - transposes its K fragments into V's B fragments (32 movmatrix);
//   - O[16 heads x 128 dims] += P V (16 mma.sync), O in 64 registers;
// and at a unit's end normalises O and stores it (bf16, 4-byte stores). Random bytes, random
// candidates from a 65,536-row pool (256-byte rows, L2-resident); the values mean nothing, the
// time does. Prints per group count the median over CTAs of the slowest warp's cycles a chunk.
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Icsrc -o register_shape_probe \
//       benchmarks/register_shape_probe.cu && ./register_shape_probe
// (bash benchmarks/device_suite.sh register-probe builds and runs it).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../csrc/cuda/common/ptx_primitives.cuh"
#include "../csrc/cuda/hopper/nvfp4_bit_decode.cuh"
#include "../csrc/cuda/portable/sm80_primitives.cuh"  // mma_bf16_16x8x16
#include "probe_check.h"
#include "probe_pool.h"

namespace {

using cake::cuda::fast_exp2_ftz;
using cake::cuda::mma_bf16_16x8x16;
using cake::cuda::pack_bf16x2;
using cake::cuda::quad_max;
using cake::cuda::quad_sum;

constexpr int kHeads = 16;
constexpr int kDims = 512;
constexpr int kStep = 16;            // candidates a step
constexpr int kWarpsPerGroup = 4;    // a warp per 128 dims
constexpr int kUnitsPerGroup = 8;    // units a group walks in one launch

__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t a) {
  uint32_t d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
  return d;
}
__device__ __forceinline__ void group_barrier(int group) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(1 + group), "n"(kWarpsPerGroup * 32) : "memory");
}

struct Shared {
  float partial[2][kWarpsPerGroup][32][8];  // a group's S partials, by step parity
};

template <int kGroups>
__global__ void __launch_bounds__(kGroups * kWarpsPerGroup * 32, 1)
    register_shape(const uint8_t* __restrict__ pool, const int* __restrict__ indices, const uint16_t* __restrict__ q,
                   uint16_t* __restrict__ out, int topk, long long* __restrict__ cycles) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  Shared* smem = reinterpret_cast<Shared*>(smem_raw);
  const int thread = threadIdx.x;
  const int warp = thread / 32, lane = thread % 32;
  const int group = warp / kWarpsPerGroup, wi = warp % kWarpsPerGroup;
  const int g = lane / 4, qd = lane % 4;
  const int steps = topk / kStep;
  const float score_scale = 0.0625f * 1.4426950408889634f;
  const long long start = clock64();

#pragma unroll 1
  for (int n_unit = 0; n_unit < kUnitsPerGroup; ++n_unit) {
    const int unit = (n_unit * gridDim.x + blockIdx.x) * kGroups + group;
    const int* list = indices + size_t(unit) * topk;
    // Q's A fragments over this warp's 8 k-steps: rows g, g + 8, k-positions 2q, 2q + 8 (+1).
    uint32_t qf[8][4];
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) {
      const uint32_t* row0 = reinterpret_cast<const uint32_t*>(q + (size_t(unit) * kHeads + g) * kDims + wi * 128 + ks * 16);
      const uint32_t* row8 = row0 + 8 * kDims / 2;
      qf[ks][0] = row0[qd];
      qf[ks][1] = row8[qd];
      qf[ks][2] = row0[qd + 4];
      qf[ks][3] = row8[qd + 4];
    }
    float o[8][2][4] = {};
    float reference[2] = {-1e30f, -1e30f};
    float sums[2] = {0.f, 0.f};
    // Two steps of indices and one of codes in flight.
    int index_next = list[kStep + lane % kStep < topk ? kStep + lane % kStep : 0];
    uint32_t row_now = uint32_t(list[lane % kStep]) * kProbeRowBytes;
    uint4 codes_next[2];
    uint16_t scales_next[2];
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      const uint32_t row = __shfl_sync(0xffffffffu, row_now, g + 8 * n);
      codes_next[n] = *reinterpret_cast<const uint4*>(pool + row + wi * 64 + qd * 16);
      scales_next[n] = *reinterpret_cast<const uint16_t*>(pool + row + kProbeScaleOffset + wi * 8 + qd * 2);
    }
    row_now = uint32_t(index_next) * kProbeRowBytes;
#pragma unroll 1
    for (int s = 0; s < steps; ++s) {
      const uint4 codes[2] = {codes_next[0], codes_next[1]};
      const uint16_t scales[2] = {scales_next[0], scales_next[1]};
      if (s + 1 < steps) {
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          const uint32_t row = __shfl_sync(0xffffffffu, row_now, g + 8 * n);
          codes_next[n] = *reinterpret_cast<const uint4*>(pool + row + wi * 64 + qd * 16);
          scales_next[n] = *reinterpret_cast<const uint16_t*>(pool + row + kProbeScaleOffset + wi * 8 + qd * 2);
        }
      }
      if (s + 2 < steps) index_next = list[(s + 2) * kStep + lane % kStep];
      row_now = uint32_t(index_next) * kProbeRowBytes;

      // K^T's B fragments: kf[n][word][pair], word w = dims 8 w .. of the thread's 32, pair k =
      // (element k, element k + 4); k-step ks takes word ks / 2, pairs 2 (ks % 2) and 2 (ks % 2) + 1.
      uint32_t kf[2][4][4];
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        const uint32_t words[4] = {codes[n].x, codes[n].y, codes[n].z, codes[n].w};
        const uint32_t scale_lo = cake::cuda::hopper::e4m3_to_decode_scale(uint8_t(scales[n] & 0xff));
        const uint32_t scale_hi = cake::cuda::hopper::e4m3_to_decode_scale(uint8_t(scales[n] >> 8));
#pragma unroll
        for (int w = 0; w < 4; ++w) cake::cuda::hopper::e2m1x8_to_bf16_pairs(words[w], w < 2 ? scale_lo : scale_hi, kf[n][w]);
      }
      float sp[2][4] = {};
#pragma unroll
      for (int ks = 0; ks < 8; ++ks)
#pragma unroll
        for (int n = 0; n < 2; ++n)
          mma_bf16_16x8x16(sp[n], qf[ks], kf[n][ks / 2][2 * (ks % 2)], kf[n][ks / 2][2 * (ks % 2) + 1]);

      // The four warps' partials summed (each warp adds all four in warp order).
      float4* mine = reinterpret_cast<float4*>(smem->partial[s & 1][wi][lane]);
      mine[0] = make_float4(sp[0][0], sp[0][1], sp[0][2], sp[0][3]);
      mine[1] = make_float4(sp[1][0], sp[1][1], sp[1][2], sp[1][3]);
      group_barrier(group);
      float sc[2][4] = {};
#pragma unroll
      for (int w = 0; w < kWarpsPerGroup; ++w) {
        const float4* theirs = reinterpret_cast<const float4*>(smem->partial[s & 1][w][lane]);
        const float4 a = theirs[0], b = theirs[1];
        sc[0][0] += a.x; sc[0][1] += a.y; sc[0][2] += a.z; sc[0][3] += a.w;
        sc[1][0] += b.x; sc[1][1] += b.y; sc[1][2] += b.z; sc[1][3] += b.w;
      }
      // Softmax over the step's 16 candidates: rows g (values 0, 1) and g + 8 (values 2, 3).
      float step_max[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        step_max[h] =
            quad_max(fmaxf(fmaxf(sc[0][2 * h], sc[0][2 * h + 1]), fmaxf(sc[1][2 * h], sc[1][2 * h + 1])) * score_scale);
      }
      const bool moves = step_max[0] > reference[0] + 8.f || step_max[1] > reference[1] + 8.f;
      if (__any_sync(0xffffffffu, moves)) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float now = fmaxf(reference[h], step_max[h]);
          const float factor = fast_exp2_ftz(reference[h] - now);
          reference[h] = now;
          sums[h] *= factor;
#pragma unroll
          for (int ks = 0; ks < 8; ++ks)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              o[ks][hh][2 * h] *= factor;
              o[ks][hh][2 * h + 1] *= factor;
            }
        }
      }
      uint32_t p[4];
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float w0 = fast_exp2_ftz(sc[n][2 * h] * score_scale - reference[h]);
          const float w1 = fast_exp2_ftz(sc[n][2 * h + 1] * score_scale - reference[h]);
          sums[h] += w0 + w1;
          p[2 * n + h] = pack_bf16x2(w0, w1);
        }
      // V's B fragments by transposing K^T's, then PV over the warp's 128 dims (16 n-tiles).
#pragma unroll
      for (int ks = 0; ks < 8; ++ks)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const uint32_t v0 = movmatrix_trans(kf[0][ks / 2][2 * (ks % 2) + hh]);
          const uint32_t v1 = movmatrix_trans(kf[1][ks / 2][2 * (ks % 2) + hh]);
          mma_bf16_16x8x16(o[ks][hh], p, v0, v1);
        }
    }
    // The unit's end: row sums over the quad, O normalised and stored as bf16.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      sums[h] = 1.f / quad_sum(sums[h]);
    }
    uint32_t* out_row0 = reinterpret_cast<uint32_t*>(out + (size_t(unit) * kHeads + g) * kDims + wi * 128);
    uint32_t* out_row8 = out_row0 + 8 * kDims / 2;
#pragma unroll
    for (int ks = 0; ks < 8; ++ks)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        out_row0[ks * 8 + hh * 4 + qd] = pack_bf16x2(o[ks][hh][0] * sums[0], o[ks][hh][1] * sums[0]);
        out_row8[ks * 8 + hh * 4 + qd] = pack_bf16x2(o[ks][hh][2] * sums[1], o[ks][hh][3] * sums[1]);
      }
  }
  const long long elapsed = clock64() - start;
  if (lane == 0) cycles[size_t(blockIdx.x) * kGroups * kWarpsPerGroup + warp] = elapsed;
}

uint32_t next_random(uint64_t& state) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return uint32_t(state >> 33);
}

template <int kGroups>
void time_groups(int sms, int topk, const uint8_t* pool, int* indices, const uint16_t* q, uint16_t* out,
                 long long* cycles_device) {
  const int threads = kGroups * kWarpsPerGroup * 32;
  const int smem = int(sizeof(Shared)) * kGroups;
  CHECK_CUDA(cudaFuncSetAttribute(register_shape<kGroups>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaFuncAttributes attributes{};
  CHECK_CUDA(cudaFuncGetAttributes(&attributes, register_shape<kGroups>));
  for (int launch = 0; launch < 2; ++launch) {  // the first warms up
    register_shape<kGroups><<<sms, threads, smem>>>(pool, indices, q, out, topk, cycles_device);
    CHECK_CUDA(cudaGetLastError());
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<long long> cycles(size_t(sms) * kGroups * kWarpsPerGroup);
  CHECK_CUDA(cudaMemcpy(cycles.data(), cycles_device, cycles.size() * sizeof(long long), cudaMemcpyDeviceToHost));
  std::vector<double> per_chunk;
  const double chunks = double(kUnitsPerGroup) * kGroups * topk / 64;  // a CTA's chunks
  for (int cta = 0; cta < sms; ++cta) {
    long long worst = 0;
    for (int w = 0; w < kGroups * kWarpsPerGroup; ++w) worst = std::max(worst, cycles[size_t(cta) * kGroups * kWarpsPerGroup + w]);
    per_chunk.push_back(double(worst) / chunks);
  }
  std::printf("| %d | %d | %d | %d | %.0f |\n", kGroups, threads, attributes.numRegs, int(attributes.localSizeBytes),
              probe_median(per_chunk));
}

}  // namespace

int main() {
  const int sms = probe_sm_count();
  const int topk = 512, max_groups = 3;
  const size_t units = size_t(sms) * max_groups * kUnitsPerGroup;
  uint64_t state = 12345;
  std::vector<uint8_t> pool(size_t(kProbePoolRows) * kProbeRowBytes);
  for (auto& b : pool) b = uint8_t(next_random(state));
  for (int r = 0; r < kProbePoolRows; ++r)  // scale bytes below the E4M3 NaN
    for (int i = 0; i < 28; ++i) pool[size_t(r) * kProbeRowBytes + kProbeScaleOffset + i] &= 0x77;
  std::vector<int> indices(units * topk);
  for (auto& i : indices) i = int(next_random(state) % kProbePoolRows);
  std::vector<uint16_t> q(units * kHeads * kDims);
  for (auto& v : q) v = uint16_t(0x3c00 | (next_random(state) & 0x80ff));  // bf16 of magnitude ~2^-7..2^-6
  uint8_t* pool_d = nullptr;
  int* indices_d = nullptr;
  uint16_t *q_d = nullptr, *out_d = nullptr;
  long long* cycles = nullptr;
  CHECK_CUDA(cudaMalloc(&pool_d, pool.size()));
  CHECK_CUDA(cudaMalloc(&indices_d, indices.size() * sizeof(int)));
  CHECK_CUDA(cudaMalloc(&q_d, q.size() * 2));
  CHECK_CUDA(cudaMalloc(&out_d, q.size() * 2));
  CHECK_CUDA(cudaMalloc(&cycles, size_t(sms) * max_groups * kWarpsPerGroup * sizeof(long long)));
  CHECK_CUDA(cudaMemcpy(pool_d, pool.data(), pool.size(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(indices_d, indices.data(), indices.size() * sizeof(int), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(q_d, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
  std::printf("%d CTAs (one an SM), topk %d, %d units a group; cycles a 64-candidate chunk an SM: median over "
              "CTAs of the slowest warp's cycles over the CTA's chunks\n",
              sms, topk, kUnitsPerGroup);
  std::printf("| groups of 4 warps | threads | registers | local bytes | cycles a chunk |\n|---|---|---|---|---|\n");
  time_groups<1>(sms, topk, pool_d, indices_d, q_d, out_d, cycles);
  time_groups<2>(sms, topk, pool_d, indices_d, q_d, out_d, cycles);
  time_groups<3>(sms, topk, pool_d, indices_d, q_d, out_d, cycles);
  CHECK_CUDA(cudaFree(pool_d));
  CHECK_CUDA(cudaFree(indices_d));
  CHECK_CUDA(cudaFree(q_d));
  CHECK_CUDA(cudaFree(out_d));
  CHECK_CUDA(cudaFree(cycles));
  return 0;
}
