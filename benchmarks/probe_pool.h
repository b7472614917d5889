// The host side the timing probes share (converter_stream_probe.cu, small_roles_probe.cu, contention_probe.cu, merge_launch_probe.cu,
// wgmma_rate_probe.cu, register_shape_probe.cu): the SM count, a pool of random bytes on the device (small enough to stay in
// L2) with random row indices into it, the launches whose per-CTA figures they read back, and the
// median of those. Each probe is still one nvcc command (header only).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

#include "probe_check.h"

// The pool's rows: 224 code bytes (448 NoPE dims), 28 scale bytes, padding; 16 MB in all.
constexpr int kProbePoolRows = 65536;
constexpr int kProbeRowBytes = 256;
constexpr int kProbeScaleOffset = 224;

struct ProbePool {
  uint8_t* rows = nullptr;  // kProbePoolRows x kProbeRowBytes random bytes
  int* indices = nullptr;   // index_count random rows of the pool
};

// Fills both with a fixed linear congruential sequence: every run draws the same rows.
inline ProbePool make_probe_pool(size_t index_count) {
  std::vector<uint8_t> bytes(size_t(kProbePoolRows) * kProbeRowBytes);
  uint32_t x = 12345u;
  for (auto& byte : bytes) {
    x = x * 1664525u + 1013904223u;
    byte = uint8_t(x >> 24);
  }
  std::vector<int> indices(index_count);
  for (auto& i : indices) {
    x = x * 1664525u + 1013904223u;
    i = int((x >> 8) % uint32_t(kProbePoolRows));
  }
  ProbePool pool;
  CHECK_CUDA(cudaMalloc(&pool.rows, bytes.size()));
  CHECK_CUDA(cudaMalloc(&pool.indices, indices.size() * sizeof(int)));
  CHECK_CUDA(cudaMemcpy(pool.rows, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(pool.indices, indices.data(), indices.size() * sizeof(int), cudaMemcpyHostToDevice));
  return pool;
}

inline void free_probe_pool(ProbePool& pool) {
  CHECK_CUDA(cudaFree(pool.rows));
  CHECK_CUDA(cudaFree(pool.indices));
  pool = ProbePool{};
}

// The device's SM count (one CTA a SM in every probe); stdout unbuffered, so that a probe that
// stops part-way (a hang under a time limit) has printed its rows so far.
inline int probe_sm_count() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  int device = 0, sms = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// Launches `kernel` on `ctas` CTAs launches + 1 times, the first a warm-up (the pool into L2), and
// returns what each counted launch left in out[0 .. out_count).
template <typename... Params, typename... Args>
std::vector<std::vector<long long>> probe_launches(void (*kernel)(Params...), int ctas, int threads, int smem_bytes,
                                                   int launches, long long* out, size_t out_count, Args... args) {
  CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  std::vector<std::vector<long long>> results;
  for (int launch = 0; launch <= launches; ++launch) {
    kernel<<<ctas, threads, smem_bytes>>>(args...);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize());
    if (launch == 0) continue;
    std::vector<long long> host(out_count);
    CHECK_CUDA(cudaMemcpy(host.data(), out, out_count * sizeof(long long), cudaMemcpyDeviceToHost));
    results.push_back(std::move(host));
  }
  return results;
}

inline double probe_median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}
