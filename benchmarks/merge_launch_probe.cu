// What a decode's merge costs as a second launch, against merging in the split kernel's own launch.
// A short decode (8 x 16 x 1024: 64 split CTAs of two chunks each) takes ~15 us by CUDA events,
// where one empty kernel timed the same way takes ~3.3 us and two back to back ~5.7
// (docs/benchmarks.md, "The decode's small rows at every split count ..."). The library launches
// its merge as a programmatic dependent of the split kernel (PDL). Merging inside the split
// launch needs every split of a row finished before its merge starts: a grid-wide barrier
// (cooperative launch, cooperative_groups' grid sync) or arrival counters per row group.
//
// Each CTA (one an SM: the dynamic shared memory allows no second) "splits": it spins for
// kWorkCycles, staggered by its index, and writes kPartialBytes of partial values; a "merge" then
// reads the partials of the kGroup CTAs of its group and writes their sum. The ways timed, each
// the median of many calls by CUDA events with the L2 flushed (a 256 MB memset) before each:
//   empty one / two / two PDL   launches that do nothing (the timing method's floor)
//   split + merge                the merge as a second kernel, plain or PDL (the library's way)
//   fused grid sync              one cooperative launch: split, grid sync, merge
//   fused group counters         one launch: split, then per group an atomic arrival count and
//                                a spin until all kGroup have arrived (the counters zeroed by a
//                                memset before the start event: a library form would reset them)
// and whether a cooperative launch can be captured in a CUDA graph and replayed. Every merged
// value is checked against the host's sum (the partials are functions of the CTA and position).
// A second table asks whether the SMs' split between shared memory and L1 (the carve-out) costs
// time where it changes from one kernel to the next: the split needs nearly all of the shared
// memory, while a kernel that asks for none (the flush, the merge) may be given a larger L1, and
// an SM can only change it while empty. It times the same launches with the merge (or an empty
// kernel) asking the driver for the largest shared-memory carve-out, which the split gets through
// its dynamic shared memory.
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o merge_launch_probe \
//       benchmarks/merge_launch_probe.cu && ./merge_launch_probe
// (bash benchmarks/device_suite.sh merge-launch-probe builds and runs it).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../csrc/cuda/common/ptx_primitives.cuh"  // launch_dependent_grids, wait_for_prerequisite_grids
#include "probe_check.h"
#include "probe_pool.h"  // probe_median

namespace cg = cooperative_groups;
using cake::cuda::launch_dependent_grids;
using cake::cuda::wait_for_prerequisite_grids;

namespace {

constexpr int kThreads = 384;                     // the small-heads kernel's CTA
constexpr int kSmemBytes = 200 * 1024;            // one CTA an SM
constexpr int kPartialBytes = 32 * 1024;          // a 16-head split's fp32 partial (16 x 512 x 4)
constexpr int kPartialWords = kPartialBytes / 4;  // floats a CTA writes
constexpr int kGroup = 8;                         // splits a row group merges (8 x 16 x 1024: 8 splits)
constexpr int kRepeats = 60;

__device__ __forceinline__ float partial_value(int cta, int i) { return float((cta * 131 + i) % 1024) * 0.25f; }

// The split's work: spin, then write this CTA's partial.
__device__ __forceinline__ void split_work(float* __restrict__ partials, long long work_cycles) {
  extern __shared__ unsigned char smem[];
  const long long start = clock64();
  const long long until = work_cycles + (blockIdx.x % kGroup) * (work_cycles / 16);  // staggered ends
  while (clock64() - start < until) {
  }
  if (threadIdx.x == 0) smem[0] = 1;  // the dynamic shared memory is used (keeps one CTA an SM)
  float4* out = reinterpret_cast<float4*>(partials + size_t(blockIdx.x) * kPartialWords);
  for (int v = threadIdx.x; v < kPartialWords / 4; v += kThreads) {
    out[v] = make_float4(partial_value(blockIdx.x, 4 * v), partial_value(blockIdx.x, 4 * v + 1),
                         partial_value(blockIdx.x, 4 * v + 2), partial_value(blockIdx.x, 4 * v + 3));
  }
}

// The merge of CTA `cta`'s share of its group: words [cta % kGroup] of kGroup slices, summed over
// the group's CTAs in CTA order (by this CTA's threads, whatever their number).
__device__ __forceinline__ void merge_share(const float* __restrict__ partials, float* __restrict__ merged, int cta) {
  const int group = cta / kGroup;
  const int slice_words = kPartialWords / kGroup;
  const int first = (cta % kGroup) * slice_words;
  for (int i = threadIdx.x; i < slice_words; i += blockDim.x) {
    float sum = 0.f;
#pragma unroll
    for (int s = 0; s < kGroup; ++s) sum += __ldcg(partials + size_t(group * kGroup + s) * kPartialWords + first + i);
    merged[size_t(group) * kPartialWords + first + i] = sum;
  }
}

__global__ void __launch_bounds__(kThreads, 1) empty_kernel(int) {
  extern __shared__ unsigned char smem[];
  if (threadIdx.x == 0 && blockIdx.x > (1 << 30)) smem[0] = 1;
}
// Launched without dynamic shared memory; kMaxSharedCarveout as for merge_kernel.
template <bool kMaxSharedCarveout>
__global__ void __launch_bounds__(kThreads, 1) empty_no_smem(int* sink) {
  if (threadIdx.x == 0 && blockIdx.x > (1 << 30)) *sink = 1;
}
__global__ void __launch_bounds__(kThreads, 1) empty_pdl_first(int) {
  extern __shared__ unsigned char smem[];
  launch_dependent_grids();
  if (threadIdx.x == 0 && blockIdx.x > (1 << 30)) smem[0] = 1;
}
__global__ void __launch_bounds__(kThreads, 1) empty_pdl_second(int) {
  extern __shared__ unsigned char smem[];
  wait_for_prerequisite_grids();
  if (threadIdx.x == 0 && blockIdx.x > (1 << 30)) smem[0] = 1;
}

__global__ void __launch_bounds__(kThreads, 1) split_kernel(float* partials, long long work_cycles) {
  launch_dependent_grids();  // no effect without the PDL attribute on the next launch
  split_work(partials, work_cycles);
}
// kMaxSharedCarveout: this instance asks for the largest shared-memory carve-out (set in main), so
// an SM a split CTA leaves needs no new carve-out for it.
template <bool kMaxSharedCarveout>
__global__ void __launch_bounds__(128) merge_kernel(const float* partials, float* merged) {
  wait_for_prerequisite_grids();  // returns at once without the PDL attribute
  merge_share(partials, merged, blockIdx.x);  // one merge CTA per split CTA's share, 128 threads
}

// One cooperative launch: split, grid sync (its own fences order the partials), merge. `sync_ns`:
// per CTA, the globaltimer from its arrival to its leaving the sync.
__global__ void __launch_bounds__(kThreads, 1)
    fused_grid_sync(float* partials, float* merged, long long work_cycles, long long* sync_ns) {
  split_work(partials, work_cycles);
  uint64_t before = 0, after = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(before));
  cg::this_grid().sync();
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(after));
  if (threadIdx.x == 0) {
    sync_ns[2 * blockIdx.x] = (long long)before;
    sync_ns[2 * blockIdx.x + 1] = (long long)after;
  }
  merge_share(partials, merged, blockIdx.x);
}

// One launch, a counter per group of kGroup CTAs: each CTA's partial is fenced, thread 0 counts it,
// then spins until the group's count is complete (every CTA of the grid is resident: one an SM
// and no more CTAs than SMs).
__global__ void __launch_bounds__(kThreads, 1)
    fused_group_counters(float* partials, float* merged, long long work_cycles, unsigned* counters, long long* sync_ns) {
  split_work(partials, work_cycles);
  uint64_t before = 0, after = 0;
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(before));
    __threadfence();
    unsigned* counter = counters + blockIdx.x / kGroup;
    atomicAdd(counter, 1u);
    unsigned seen = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
    } while (seen < kGroup);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(after));
    sync_ns[2 * blockIdx.x] = (long long)before;
    sync_ns[2 * blockIdx.x + 1] = (long long)after;
  }
  __syncthreads();
  merge_share(partials, merged, blockIdx.x);
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  int device = 0, sms = 0, coop = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CHECK_CUDA(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  for (auto kernel : {(const void*)empty_kernel, (const void*)empty_pdl_first, (const void*)empty_pdl_second,
                      (const void*)split_kernel, (const void*)fused_grid_sync, (const void*)fused_group_counters}) {
    CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  }
  for (auto kernel : {(const void*)merge_kernel<true>, (const void*)empty_no_smem<true>}) {
    CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    int(cudaSharedmemCarveoutMaxShared)));
  }
  const int max_ctas = sms / kGroup * kGroup;
  float *partials = nullptr, *merged = nullptr;
  unsigned* counters = nullptr;
  long long* sync_ns = nullptr;
  char* flush = nullptr;
  const size_t flush_bytes = size_t(256) << 20;
  CHECK_CUDA(cudaMalloc(&partials, size_t(max_ctas) * kPartialBytes));
  CHECK_CUDA(cudaMalloc(&merged, size_t(max_ctas) * kPartialBytes));
  CHECK_CUDA(cudaMalloc(&counters, size_t(max_ctas) * sizeof(unsigned)));
  CHECK_CUDA(cudaMalloc(&sync_ns, size_t(max_ctas) * 2 * sizeof(long long)));
  CHECK_CUDA(cudaMalloc(&flush, flush_bytes));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));

  std::printf("%s, %d SMs, cooperative launch %s; CTAs of %d threads, %d KB of dynamic shared memory (one an SM); "
              "a split writes %d KB; merge groups of %d CTAs; median of %d calls, CUDA events, L2 flushed before each\n",
              prop.name, sms, coop ? "supported" : "NOT supported", kThreads, kSmemBytes / 1024, kPartialBytes / 1024,
              kGroup, kRepeats);

  auto launch_pdl = [&](auto kernel, int ctas, int threads, int smem, auto... args) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(ctas);
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    CHECK_CUDA(cudaLaunchKernelEx(&config, kernel, args...));
  };
  auto launch_coop = [&](int ctas, long long work) {
    void* args[] = {&partials, &merged, &work, &sync_ns};
    CHECK_CUDA(cudaLaunchCooperativeKernel((const void*)fused_grid_sync, dim3(ctas), dim3(kThreads), args, kSmemBytes,
                                           stream));
  };
  // Times `body` (a call's launches on `stream`), after `prepare` (outside the events) and the flush.
  auto time_it = [&](auto&& prepare, auto&& body) {
    std::vector<double> ms;
    for (int r = 0; r < kRepeats + 3; ++r) {
      CHECK_CUDA(cudaMemsetAsync(flush, r & 0xff, flush_bytes, stream));
      prepare();
      CHECK_CUDA(cudaEventRecord(start, stream));
      body();
      CHECK_CUDA(cudaEventRecord(stop, stream));
      CHECK_CUDA(cudaEventSynchronize(stop));
      float t = 0.f;
      CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
      if (r >= 3) ms.push_back(t);
    }
    return 1000.0 * probe_median(ms);
  };
  auto nothing = [] {};
  // Every merged value against the host's sum; returns the number of wrong ones.
  auto check = [&](int ctas) {
    std::vector<float> got(size_t(ctas) * kPartialWords);
    CHECK_CUDA(cudaMemcpy(got.data(), merged, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    long bad = 0;
    for (int g = 0; g < ctas / kGroup; ++g) {
      for (int i = 0; i < kPartialWords; ++i) {
        float sum = 0.f;
        for (int s = 0; s < kGroup; ++s) sum += float(((g * kGroup + s) * 131 + i) % 1024) * 0.25f;
        if (got[size_t(g) * kPartialWords + i] != sum) ++bad;
      }
    }
    return bad;
  };
  auto poison = [&](int ctas) { CHECK_CUDA(cudaMemsetAsync(merged, 0xff, size_t(ctas) * kPartialBytes, stream)); };
  // Median over CTAs of (leave - the group's or grid's last arrival), ns.
  auto sync_latency = [&](int ctas, int group) {
    std::vector<long long> t(size_t(ctas) * 2);
    CHECK_CUDA(cudaMemcpy(t.data(), sync_ns, t.size() * sizeof(long long), cudaMemcpyDeviceToHost));
    std::vector<double> lat;
    for (int c = 0; c < ctas; ++c) {
      const int g0 = c / group * group;
      long long last = 0;
      for (int k = g0; k < g0 + group; ++k) last = std::max(last, t[2 * k]);
      lat.push_back(double(t[2 * c + 1] - last));
    }
    return probe_median(lat);
  };

  std::printf("\n| CTAs | work cycles a split | way | us | merged values wrong | sync: leave - last arrival, ns (median over CTAs) |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (int ctas : {64, max_ctas}) {
    std::printf("| %d | - | empty, one launch | %.2f | - | - |\n", ctas,
                time_it(nothing, [&] { empty_kernel<<<ctas, kThreads, kSmemBytes, stream>>>(0); }));
    std::printf("| %d | - | empty, two launches | %.2f | - | - |\n", ctas, time_it(nothing, [&] {
                  empty_kernel<<<ctas, kThreads, kSmemBytes, stream>>>(0);
                  empty_kernel<<<ctas, kThreads, kSmemBytes, stream>>>(0);
                }));
    std::printf("| %d | - | empty, two launches, the second PDL | %.2f | - | - |\n", ctas, time_it(nothing, [&] {
                  empty_pdl_first<<<ctas, kThreads, kSmemBytes, stream>>>(0);
                  launch_pdl(empty_pdl_second, ctas, kThreads, kSmemBytes, 0);
                }));
    for (long long work : {0LL, 10000LL}) {
      double us = time_it([&] { poison(ctas); }, [&] {
        split_kernel<<<ctas, kThreads, kSmemBytes, stream>>>(partials, work);
        merge_kernel<false><<<ctas, 128, 0, stream>>>(partials, merged);
      });
      std::printf("| %d | %lld | split + merge kernel | %.2f | %ld | - |\n", ctas, work, us, check(ctas));
      us = time_it([&] { poison(ctas); }, [&] {
        split_kernel<<<ctas, kThreads, kSmemBytes, stream>>>(partials, work);
        launch_pdl(merge_kernel<false>, ctas, 128, 0, (const float*)partials, merged);
      });
      std::printf("| %d | %lld | split + merge kernel, PDL | %.2f | %ld | - |\n", ctas, work, us, check(ctas));
      us = time_it([&] { poison(ctas); }, [&] { split_kernel<<<ctas, kThreads, kSmemBytes, stream>>>(partials, work); });
      std::printf("| %d | %lld | split alone | %.2f | - | - |\n", ctas, work, us);
      if (coop) {
        us = time_it([&] { poison(ctas); }, [&] { launch_coop(ctas, work); });
        std::printf("| %d | %lld | fused, grid sync (cooperative) | %.2f | %ld | %.0f |\n", ctas, work, us, check(ctas),
                    sync_latency(ctas, ctas));
      }
      us = time_it([&] {
        poison(ctas);
        CHECK_CUDA(cudaMemsetAsync(counters, 0, size_t(ctas) * sizeof(unsigned), stream));
      }, [&] { fused_group_counters<<<ctas, kThreads, kSmemBytes, stream>>>(partials, merged, work, counters, sync_ns); });
      std::printf("| %d | %lld | fused, group counters | %.2f | %ld | %.0f |\n", ctas, work, us, check(ctas),
                  sync_latency(ctas, kGroup));
    }
  }

  // The carve-out table: the same launches with and without the largest shared-memory carve-out
  // asked for by the kernel that follows the split (or the flush).
  int* sink = reinterpret_cast<int*>(counters);
  const long long carveout_work = 10000;
  std::printf("\n| CTAs | way (after the flush; split: %d KB of shared memory, %lld work cycles) | us | "
              "merged values wrong |\n", kSmemBytes / 1024, carveout_work);
  std::printf("|---|---|---|---|\n");
  for (int ctas : {64, max_ctas}) {
    const long long work = carveout_work;
    std::printf("| %d | empty, %d KB of shared memory | %.2f | - |\n", ctas, kSmemBytes / 1024,
                time_it(nothing, [&] { empty_kernel<<<ctas, kThreads, kSmemBytes, stream>>>(0); }));
    std::printf("| %d | empty, no shared memory, default carve-out | %.2f | - |\n", ctas,
                time_it(nothing, [&] { empty_no_smem<false><<<ctas, kThreads, 0, stream>>>(sink); }));
    std::printf("| %d | empty, no shared memory, largest shared carve-out | %.2f | - |\n", ctas,
                time_it(nothing, [&] { empty_no_smem<true><<<ctas, kThreads, 0, stream>>>(sink); }));
    std::printf("| %d | empty %d KB, then empty without, default carve-out | %.2f | - |\n", ctas, kSmemBytes / 1024,
                time_it(nothing, [&] {
                  empty_kernel<<<ctas, kThreads, kSmemBytes, stream>>>(0);
                  empty_no_smem<false><<<ctas, kThreads, 0, stream>>>(sink);
                }));
    std::printf("| %d | empty %d KB, then empty without, largest shared carve-out | %.2f | - |\n", ctas,
                kSmemBytes / 1024, time_it(nothing, [&] {
                  empty_kernel<<<ctas, kThreads, kSmemBytes, stream>>>(0);
                  empty_no_smem<true><<<ctas, kThreads, 0, stream>>>(sink);
                }));
    for (bool max_shared : {false, true}) {
      const char* carveout = max_shared ? "largest shared carve-out" : "default carve-out";
      auto* merge = max_shared ? merge_kernel<true> : merge_kernel<false>;
      double us = time_it([&] { poison(ctas); }, [&] {
        split_kernel<<<ctas, kThreads, kSmemBytes, stream>>>(partials, work);
        merge<<<ctas, 128, 0, stream>>>(partials, merged);
      });
      std::printf("| %d | split + merge kernel, merge with the %s | %.2f | %ld |\n", ctas, carveout, us, check(ctas));
      us = time_it([&] { poison(ctas); }, [&] {
        split_kernel<<<ctas, kThreads, kSmemBytes, stream>>>(partials, work);
        launch_pdl(merge, ctas, 128, 0, (const float*)partials, merged);
      });
      std::printf("| %d | split + merge kernel, PDL, merge with the %s | %.2f | %ld |\n", ctas, carveout, us,
                  check(ctas));
    }
  }

  // Can a cooperative launch be captured in a CUDA graph and replayed?
  if (coop) {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    const int ctas = 64;
    CHECK_CUDA(cudaStreamSynchronize(stream));
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    long long work = 10000;
    void* args[] = {&partials, &merged, &work, &sync_ns};
    const cudaError_t launched =
        cudaLaunchCooperativeKernel((const void*)fused_grid_sync, dim3(ctas), dim3(kThreads), args, kSmemBytes, stream);
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    bool ok = launched == cudaSuccess && ended == cudaSuccess;
    if (ok) ok = cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    long bad = -1;
    double us = 0;
    if (ok) {
      us = time_it([&] { poison(ctas); }, [&] { CHECK_CUDA(cudaGraphLaunch(exec, stream)); });
      bad = check(ctas);
    }
    (void)cudaGetLastError();
    std::printf("\nCUDA graph with the cooperative launch: capture %s (launch: %s, end: %s)%s", ok ? "ok" : "FAILED",
                cudaGetErrorString(launched), cudaGetErrorString(ended), ok ? "" : "\n");
    if (ok) std::printf(", replay %.2f us, merged values wrong %ld\n", us, bad);
    if (exec) CHECK_CUDA(cudaGraphExecDestroy(exec));
    if (graph) CHECK_CUDA(cudaGraphDestroy(graph));
  }
  CHECK_CUDA(cudaFree(flush));
  CHECK_CUDA(cudaFree(sync_ns));
  CHECK_CUDA(cudaFree(counters));
  CHECK_CUDA(cudaFree(merged));
  CHECK_CUDA(cudaFree(partials));
  return 0;
}
