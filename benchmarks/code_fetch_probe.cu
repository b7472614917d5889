// What running code once costs an SM: cycles an instruction of straight-line code on its first pass
// (instruction caches cold, the code's lines in L2 or, after an L2 flush, in device memory) and on
// its second pass (the same code again, in the same launch). A short decode split's CTA runs most
// of its few thousand instructions once, and Nsight Compute put ~39% of such a CTA's stall samples
// on instruction fetch (docs/benchmarks.md, "The decode splits' start ..."); this measures the
// price of one cold instruction against the work around it.
//
// Each kernel is kInstructions independent FFMAs in a row (eight chains, so that their latency
// never paces their issuing; `asm volatile` so that ptxas keeps all of them), run twice by a loop that
// is not unrolled. Every warp of the CTA runs the same code (`shared` rows) or warp w runs its own
// copy, the same instructions at other addresses (`own copy` rows: the roles of a
// warp-specialised kernel each fetch their own lines). One CTA an SM, all SMs; thread 0 of each
// warp records the cycles of each pass. Prints the median over warps of cycles a pass and a
// pass's cycles per instruction; the L2 is flushed (a 256 MB memset) before a launch or not (the
// code then stays in L2 from the launch before). The first rows look for where the nearest
// instruction cache ends and whether warps running their own code share one fill path.
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o code_fetch_probe \
//       benchmarks/code_fetch_probe.cu && ./code_fetch_probe
// (bash benchmarks/device_suite.sh code-fetch-probe builds and runs it).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "probe_check.h"

namespace {

constexpr int kChains = 8;
constexpr int kPasses = 2;
constexpr int kMaxWarps = 8;

template <int kInstructions>
__device__ __forceinline__ void straight_line(float (&chain)[kChains]) {
  static_assert(kInstructions % kChains == 0, "whole rounds of the chains");
#pragma unroll
  for (int i = 0; i < kInstructions / kChains; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) asm volatile("fma.rn.f32 %0, %0, 0f3F7FF000, 0f3A800000;\n" : "+f"(chain[c]));
  }
}

// A kernel's body: `passes` runs of `pass_code` (a warp's own straight code) on the chains, each
// timed by thread 0 of its warp, then the chains summed into `sink` so that none is dead.
template <typename PassCode>
__device__ __forceinline__ void timed_passes(float* __restrict__ sink, long long* __restrict__ cycles, int passes,
                                             int warp, PassCode&& pass_code) {
  float chain[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) chain[c] = float(threadIdx.x + c);
#pragma unroll 1
  for (int pass = 0; pass < passes; ++pass) {
    const long long start = clock64();
    pass_code(chain);
    const long long elapsed = clock64() - start;
    if (threadIdx.x % 32 == 0) cycles[(size_t(blockIdx.x) * kMaxWarps + warp) * kPasses + pass] = elapsed;
  }
  float total = 0.f;
#pragma unroll
  for (int c = 0; c < kChains; ++c) total += chain[c];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = total;
}

// Every warp runs the same code.
template <int kInstructions>
__global__ void __launch_bounds__(kMaxWarps * 32, 1)
    run_code(float* __restrict__ sink, long long* __restrict__ cycles, int passes) {
  timed_passes(sink, cycles, passes, threadIdx.x / 32,
               [](float (&chain)[kChains]) { straight_line<kInstructions>(chain); });
}

// A launch where warp w runs copy w (w < 8): one kernel per copy would put them in other launches,
// so the copies are the branches of one kernel.
template <int kInstructions>
__global__ void __launch_bounds__(kMaxWarps * 32, 1)
    run_own_copies(float* __restrict__ sink, long long* __restrict__ cycles, int passes) {
  const int warp = __shfl_sync(0xffffffffu, int(threadIdx.x / 32), 0);
  timed_passes(sink, cycles, passes, warp, [warp](float (&chain)[kChains]) {
    switch (warp) {
      case 0: straight_line<kInstructions>(chain); break;
      case 1: straight_line<kInstructions>(chain); break;
      case 2: straight_line<kInstructions>(chain); break;
      case 3: straight_line<kInstructions>(chain); break;
      case 4: straight_line<kInstructions>(chain); break;
      case 5: straight_line<kInstructions>(chain); break;
      case 6: straight_line<kInstructions>(chain); break;
      default: straight_line<kInstructions>(chain); break;
    }
  });
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  int device = 0, sms = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  float* sink = nullptr;
  long long* cycles_d = nullptr;
  char* flush = nullptr;
  const size_t flush_bytes = size_t(256) << 20;
  CHECK_CUDA(cudaMalloc(&sink, size_t(sms) * kMaxWarps * 32 * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&cycles_d, size_t(sms) * kMaxWarps * kPasses * sizeof(long long)));
  CHECK_CUDA(cudaMalloc(&flush, flush_bytes));

  std::printf("%d CTAs (one an SM); straight-line FFMAs (8 independent chains), two passes in one launch; median "
              "over the running warps of a pass's cycles; the launch measured is the third of three\n",
              sms);
  std::printf("| instructions | warps | code | L2 flushed | first pass cycles | a cycle an instruction | second pass "
              "cycles | a cycle an instruction |\n|---|---|---|---|---|---|---|---|\n");
  auto row = [&](auto kernel, int instructions, int warps, const char* code, bool flushed) {
    CHECK_CUDA(cudaMemset(cycles_d, 0, size_t(sms) * kMaxWarps * kPasses * sizeof(long long)));
    for (int launch = 0; launch < 3; ++launch) {
      if (flushed) CHECK_CUDA(cudaMemset(flush, launch & 0xff, flush_bytes));
      kernel<<<sms, warps * 32>>>(sink, cycles_d, kPasses);
      CHECK_CUDA(cudaGetLastError());
      CHECK_CUDA(cudaDeviceSynchronize());
    }
    std::vector<long long> cycles(size_t(sms) * kMaxWarps * kPasses);
    CHECK_CUDA(cudaMemcpy(cycles.data(), cycles_d, cycles.size() * sizeof(long long), cudaMemcpyDeviceToHost));
    double median[kPasses];
    for (int pass = 0; pass < kPasses; ++pass) {
      std::vector<long long> column;
      for (int cta = 0; cta < sms; ++cta)
        for (int w = 0; w < warps; ++w) column.push_back(cycles[(size_t(cta) * kMaxWarps + w) * kPasses + pass]);
      std::sort(column.begin(), column.end());
      median[pass] = double(column[column.size() / 2]);
    }
    std::printf("| %d | %d | %s | %s | %.0f | %.2f | %.0f | %.2f |\n", instructions, warps, code, flushed ? "yes" : "no",
                median[0], median[0] / instructions, median[1], median[1] / instructions);
  };
  // Where the nearest instruction cache ends (one warp, the second pass) and whether the streams of
  // warps running their own copies share one fill path (64 KB of code run in all, split 2 / 4 / 8
  // ways: a shared path gives each warp's instruction the streams' count times one stream's cost).
  row(run_code<1536>, 1536, 1, "shared", false);
  row(run_code<2048>, 2048, 1, "shared", false);
  row(run_code<3072>, 3072, 1, "shared", false);
  row(run_own_copies<2048>, 2048, 2, "own copy", false);
  row(run_own_copies<1024>, 1024, 4, "own copy", false);
  row(run_own_copies<512>, 512, 8, "own copy", false);
  row(run_own_copies<512>, 512, 4, "own copy", false);
  for (bool flushed : {true, false}) {
    row(run_code<1024>, 1024, 1, "shared", flushed);
    row(run_code<1024>, 1024, 8, "shared", flushed);
    row(run_code<4096>, 4096, 1, "shared", flushed);
    row(run_code<4096>, 4096, 8, "shared", flushed);
    row(run_code<16384>, 16384, 8, "shared", flushed);
    row(run_own_copies<1024>, 1024, 8, "own copy", flushed);
    row(run_own_copies<4096>, 4096, 8, "own copy", flushed);
  }
  CHECK_CUDA(cudaFree(flush));
  CHECK_CUDA(cudaFree(cycles_d));
  CHECK_CUDA(cudaFree(sink));
  return 0;
}
