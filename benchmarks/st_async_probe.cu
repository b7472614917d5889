// Does st.async (the asynchronous store into a cluster CTA's shared memory, completing its bytes
// on an mbarrier) work into the executing CTA's own shared memory? The 64-head kernel's
// development branch that stored its K tiles this way needed the answer (docs/hopper_kernel.md,
// item 7; docs/benchmarks.md has the H200's output). Modes: 0 a plain launch, own CTA; 1 a cluster
// of 1, own CTA; 2 a cluster of 2, own CTA through mapa of its own rank; 3 a cluster of 2, the
// peer CTA through mapa; 4 a cluster of 2, own CTA by its shared::cta address (no mapa).
//   nvcc -arch=sm_90a -o st_async_probe benchmarks/st_async_probe.cu
//   for m in 0 1 2 3 4; do ./st_async_probe $m; done
// It prints the four words each CTA's buffer received: 1, 2, 3 and 4 + the rank of the CTA that
// stored them (mode 0 stops at an illegal instruction on the H200; the others work).
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cuda_runtime.h>

__global__ void probe(int mode, uint32_t* out) {
  __shared__ alignas(16) uint32_t buf[4];
  __shared__ alignas(8) uint64_t bar;
  uint32_t rank = 0;
  if (mode >= 2) asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  const uint32_t buf_a = static_cast<uint32_t>(__cvta_generic_to_shared(buf));
  const uint32_t bar_a = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  if (threadIdx.x == 0) {
    buf[0] = buf[1] = buf[2] = buf[3] = 0;
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_a));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (mode >= 2) {
    asm volatile("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;" ::: "memory");
  } else {
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    uint32_t dst = buf_a, dbar = bar_a;
    if (mode == 2 || mode == 3) {
      const uint32_t target = mode == 2 ? rank : rank ^ 1u;
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(dst) : "r"(buf_a), "r"(target));
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(dbar) : "r"(bar_a), "r"(target));
    }
    // Each CTA's own barrier expects the 16 bytes some CTA stores into it.
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 16;" ::"r"(bar_a) : "memory");
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];"
                 ::"r"(dst), "r"(1u), "r"(2u), "r"(3u), "r"(4u + rank), "r"(dbar) : "memory");
    uint32_t done = 0;
    while (!done) {
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done) : "r"(bar_a) : "memory");
    }
    out[4 * blockIdx.x + 0] = buf[0]; out[4 * blockIdx.x + 1] = buf[1];
    out[4 * blockIdx.x + 2] = buf[2]; out[4 * blockIdx.x + 3] = buf[3];
  }
  if (mode >= 2) asm volatile("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

int main(int argc, char** argv) {
  const int mode = argc > 1 ? atoi(argv[1]) : 0;
  uint32_t* out;
  cudaMalloc(&out, 8 * sizeof(uint32_t));
  cudaMemset(out, 0xff, 8 * sizeof(uint32_t));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(2, 1, 1);
  config.blockDim = dim3(32, 1, 1);
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = mode == 1 ? 1 : 2;
  attribute.val.clusterDim.y = attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = mode == 0 ? 0 : 1;
  cudaError_t e = cudaLaunchKernelEx(&config, probe, mode, out);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  uint32_t h[8] = {};
  if (e == cudaSuccess) cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost);
  printf("st.async probe mode %d (%s): %s; CTA 0 got %u %u %u %u, CTA 1 got %u %u %u %u\n", mode,
         mode == 0 ? "no cluster, own CTA" : mode == 1 ? "cluster of 1, own CTA" : mode == 2 ? "cluster of 2, own CTA by mapa" : mode == 3 ? "cluster of 2, peer CTA" : "cluster of 2, own CTA, no mapa",
         cudaGetErrorString(e), h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
  return e == cudaSuccess ? 0 : 1;
}
