// Whether a hand-over waits for the handing thread's global loads still in flight. The Hopper
// kernels hand work from one warpgroup to another by mbarrier arrivals and named barriers, often
// right after issuing the next rows' loads (so that those land while the other side works). A
// proxy fence before kPReady with such a load in flight was thought to cost its whole latency
// (docs/hopper_small_kernel.md, "Not done yet": the row table's index a chunk ahead; this probe
// says it does not, docs/data/arrive_probe_h200_b387386.md). This probe
// asks the same of each way to hand over, on every SM at once (one CTA an SM, two warps): warp 0
// (the producer) issues 8 loads of 16 bytes a lane, the kernels' code loads, from a cold 1 GB
// buffer (random lines: L2 misses), writes 512 bytes of shared memory, reads the clock (t0), hands
// over, reads it again (t1), then adds up its loaded words (t_loaded: the loads have landed);
// warp 1 (the consumer) waits for the hand-over and reads the clock when it passes (t_seen), then
// lets the producer start the next round. Hand-overs:
//   arrive          mbarrier.arrive (release, CTA scope) by each producer lane
//   arrive_relaxed  mbarrier.arrive.relaxed: no ordering of the producer's earlier accesses (ptxas
//                   of CUDA 13.0 gives it the same SASS instruction as arrive)
//   fence_arrive    fence.proxy.async.shared::cta, then mbarrier.arrive (the kernels' P tiles)
//   bar_arrive      bar.arrive on a named barrier that the consumer bar.syncs on
//   async_arrive    the loads as cp.async copies into shared memory instead (committed, not
//                   waited for), then mbarrier.arrive (the 64-head dequant's scales and RoPE)
//   arrive_landed   mbarrier.arrive after the loads have landed (their sum taken before t0): the
//                   hand-over alone
// Prints, per hand-over, the medians over rounds and CTAs of t_seen - t0 (when the consumer sees
// the hand-over), t_loaded - t0 (when the producer's loads had landed) and t1 - t0 (what the
// producer's hand-over instruction itself took). If t_seen follows t_loaded, the hand-over waited
// for the loads. The loaded values are summed into a result nobody reads; only times mean anything.
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o arrive_probe benchmarks/arrive_probe.cu && ./arrive_probe
// (bash benchmarks/device_suite.sh arrive-probe builds and runs it).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../csrc/cuda/common/ptx_primitives.cuh"
#include "../csrc/cuda/hopper/sm90_primitives.cuh"
#include "probe_check.h"

namespace {

using cake::cuda::smem_address;
using namespace cake::cuda::sm90;

constexpr int kRounds = 64;
constexpr int kLoadsPerLane = 8;
constexpr uint64_t kBufferBytes = uint64_t(1) << 30;  // far past the L2
constexpr uint64_t kLines = kBufferBytes / 128;
constexpr int kHandOverBarrier = 1;  // the named barrier of bar_arrive
constexpr int kTimes = 4;            // t0, t1, t_loaded (the producer), t_seen (the consumer)

enum class HandOver { kArrive, kArriveRelaxed, kFenceArrive, kBarArrive, kArriveLanded, kAsyncArrive };
constexpr const char* kNames[] = {"arrive", "arrive_relaxed", "fence_arrive", "bar_arrive", "arrive_landed",
                                  "async_arrive"};

struct Shared {
  uint64_t full;  // producer -> consumer, 32 arrivals
  uint64_t ack;   // consumer -> producer, 32 arrivals
  uint32_t tile[128];
  uint4 copies[kLoadsPerLane][32];  // async_arrive's destinations
};

// The sum through volatile asm, so that neither compiler moves it above the hand-over.
__device__ __forceinline__ void add_words(uint32_t& sum, const uint4& v) {
  asm volatile("add.u32 %0, %0, %1;\nadd.u32 %0, %0, %2;\nadd.u32 %0, %0, %3;\nadd.u32 %0, %0, %4;\n"
               : "+r"(sum)
               : "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}
// clock64 with a memory clobber: it keeps its place among the loads, stores and hand-over around it.
__device__ __forceinline__ uint64_t clock_now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%clock64;\n" : "=l"(t)::"memory");
  return t;
}
__device__ __forceinline__ void arrive_relaxed(uint32_t bar) {
  asm volatile("mbarrier.arrive.relaxed.cta.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// This lane's 16 bytes of a random 128-byte line of the buffer (a hash of `seed`): a quarter warp
// reads one line.
__device__ __forceinline__ const uint8_t* cold_address(const uint8_t* buffer, uint32_t seed, int lane) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return buffer + (x % kLines) * 128 + (lane % 8) * 16;
}

template <HandOver kHow>
__global__ void __launch_bounds__(64) probe(const uint8_t* buffer, unsigned long long* times, uint32_t* sink,
                                            uint32_t salt) {
  __shared__ Shared smem;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t full = smem_address(&smem.full), ack = smem_address(&smem.ack);
  if (threadIdx.x == 0) {
    mbarrier_init(full, 32);
    mbarrier_init(ack, 32);
    fence_mbarrier_init();
  }
  __syncthreads();
  unsigned long long* row = times + (uint64_t(blockIdx.x) * kRounds) * kTimes;
  if (warp == 0) {
    uint32_t sum = 0;
    for (int round = 0; round < kRounds; ++round) {
      uint4 v[kLoadsPerLane];
#pragma unroll
      for (int k = 0; k < kLoadsPerLane; ++k) {
        const uint32_t seed = (((salt * gridDim.x + blockIdx.x) * kRounds + round) * kLoadsPerLane + k) * 4 + lane / 8;
        const uint8_t* address = cold_address(buffer, seed, lane);
        if constexpr (kHow == HandOver::kAsyncArrive) {
          cake::cuda::cp_async_16(smem_address(&smem.copies[k][lane]), address, true);
        } else {
          v[k] = cake::cuda::ld_global_nc_16_no_l1(address);  // the kernels' code loads (asm volatile: kept in place)
        }
      }
      if constexpr (kHow == HandOver::kAsyncArrive) cake::cuda::cp_async_commit();
      if constexpr (kHow == HandOver::kArriveLanded) {
#pragma unroll
        for (int k = 0; k < kLoadsPerLane; ++k) add_words(sum, v[k]);
      }
      // The handed-over writes (the kernels hand over tiles and S halves written just before).
      smem.tile[lane] = sum + round;
      smem.tile[32 + lane] = lane;
      smem.tile[64 + lane] = round;
      smem.tile[96 + lane] = sum;
      const uint64_t t0 = clock_now();
      if constexpr (kHow == HandOver::kArriveRelaxed) {
        arrive_relaxed(full);
      } else if constexpr (kHow == HandOver::kBarArrive) {
        cake::cuda::named_barrier_arrive<kHandOverBarrier, 64>();
      } else {
        if constexpr (kHow == HandOver::kFenceArrive) fence_proxy_async();
        mbarrier_arrive(full);
      }
      const uint64_t t1 = clock_now();
      if constexpr (kHow == HandOver::kAsyncArrive) {
        cake::cuda::cp_async_wait<0>();
        __syncwarp();
#pragma unroll
        for (int k = 0; k < kLoadsPerLane; ++k) add_words(sum, smem.copies[k][lane]);
      } else if constexpr (kHow != HandOver::kArriveLanded) {
#pragma unroll
        for (int k = 0; k < kLoadsPerLane; ++k) add_words(sum, v[k]);
      }
      const uint64_t t_loaded = clock_now();
      if (lane == 0) {
        row[round * kTimes + 0] = t0;
        row[round * kTimes + 1] = t1;
        row[round * kTimes + 2] = t_loaded;
      }
      mbarrier_wait(ack, round & 1);  // the next round starts with nothing of this one pending
    }
    sink[blockIdx.x * 32 + lane] = sum;
  } else {
    for (int round = 0; round < kRounds; ++round) {
      if constexpr (kHow == HandOver::kBarArrive) {
        cake::cuda::named_barrier<kHandOverBarrier, 64>();
      } else {
        mbarrier_wait(full, round & 1);
      }
      const uint64_t t_seen = clock_now();
      if (lane == 0) row[round * kTimes + 3] = t_seen;
      mbarrier_arrive(ack);
    }
  }
}

// Each launch reads lines of its own (`launch_salt`, counted over all launches): the ~35 MB a launch
// touches would otherwise be in the L2 for the next.
uint32_t launch_salt = 0;

template <HandOver kHow>
void run(const uint8_t* buffer, unsigned long long* times, uint32_t* sink, int ctas) {
  probe<kHow><<<ctas, 64>>>(buffer, times, sink, launch_salt++);  // once to warm the code, then timed
  CHECK_CUDA(cudaGetLastError());
  probe<kHow><<<ctas, 64>>>(buffer, times, sink, launch_salt++);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<unsigned long long> host(uint64_t(ctas) * kRounds * kTimes);
  CHECK_CUDA(cudaMemcpy(host.data(), times, host.size() * sizeof(host[0]), cudaMemcpyDeviceToHost));
  std::vector<double> seen, loaded, issue;
  for (int cta = 0; cta < ctas; ++cta) {
    for (int round = 1; round < kRounds; ++round) {  // round 0 starts cold
      const unsigned long long* t = &host[(uint64_t(cta) * kRounds + round) * kTimes];
      seen.push_back(double(int64_t(t[3] - t[0])));
      loaded.push_back(double(int64_t(t[2] - t[0])));
      issue.push_back(double(int64_t(t[1] - t[0])));
    }
  }
  auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  std::printf("| %s | %.0f | %.0f | %.0f |\n", kNames[int(kHow)], median(seen), median(loaded), median(issue));
}

}  // namespace

int main() {
  int device = 0, sms = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  uint8_t* buffer = nullptr;
  unsigned long long* times = nullptr;
  uint32_t* sink = nullptr;
  CHECK_CUDA(cudaMalloc(&buffer, kBufferBytes));
  CHECK_CUDA(cudaMemset(buffer, 1, kBufferBytes));
  CHECK_CUDA(cudaMalloc(&times, uint64_t(sms) * kRounds * kTimes * sizeof(unsigned long long)));
  CHECK_CUDA(cudaMalloc(&sink, uint64_t(sms) * 32 * sizeof(uint32_t)));
  std::printf("%d CTAs of 2 warps, %d rounds each, %d loads of 16 B a producer lane; cycles after t0, medians\n\n",
              sms, kRounds, kLoadsPerLane);
  std::printf("| hand-over | consumer sees it | producer's loads landed | hand-over instruction |\n");
  std::printf("|---|---|---|---|\n");
  run<HandOver::kArriveLanded>(buffer, times, sink, sms);
  run<HandOver::kArrive>(buffer, times, sink, sms);
  run<HandOver::kArriveRelaxed>(buffer, times, sink, sms);
  run<HandOver::kFenceArrive>(buffer, times, sink, sms);
  run<HandOver::kBarArrive>(buffer, times, sink, sms);
  run<HandOver::kAsyncArrive>(buffer, times, sink, sms);
  CHECK_CUDA(cudaFree(buffer));
  CHECK_CUDA(cudaFree(times));
  CHECK_CUDA(cudaFree(sink));
  return 0;
}
