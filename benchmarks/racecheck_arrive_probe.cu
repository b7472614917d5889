// Does compute-sanitizer's racecheck follow one-sided named-barrier hand-overs (bar.arrive on one
// side, bar.sync on the other)? Two 128-thread groups pass a tile back and forth and exchange a
// sum the way the Hopper kernel's two consumers do. Every access below is ordered by a barrier,
// so a tool that follows bar.arrive reports nothing. racecheck of CUDA 13.0 reports five hazards
// (all of them), which is why benchmarks/run_sanitizer.sh runs racecheck on a build whose
// hand-overs wait on both sides (-DCAKE_RACECHECK_BUILD). Built and run by run_sanitizer.sh:
//   nvcc -arch=sm_90 -o probe benchmarks/racecheck_arrive_probe.cu
//   compute-sanitizer --tool racecheck ./probe
#include <cstdio>

__device__ __forceinline__ void barrier_sync(int id) { asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory"); }
__device__ __forceinline__ void barrier_arrive(int id) { asm volatile("bar.arrive %0, 256;" ::"r"(id) : "memory"); }

__global__ void ping_pong(float* out, int rounds) {
  __shared__ float to_second[128], to_first[128], sums[2][128];
  const int group = threadIdx.x / 128, t = threadIdx.x % 128;
  float acc = 0.0f;
  for (int i = 0; i < rounds; ++i) {
    if (group == 0) {
      to_second[t] = float(i + t);
      barrier_arrive(1);  // to_second is written
      barrier_sync(2);    // to_first is written
      acc += to_first[(t + 1) % 128];
    } else {
      barrier_sync(1);
      acc += to_second[(t + 1) % 128];
      to_first[t] = float(i * t);
      barrier_arrive(2);
    }
    sums[group][t] = acc;
    barrier_sync(3);  // both sums written
    acc += sums[1 - group][(t + 5) % 128];
    barrier_sync(3);  // both read before the next round rewrites them
  }
  out[threadIdx.x] = acc;
}

int main() {
  float* out = nullptr;
  if (cudaMalloc(&out, 256 * sizeof(float)) != cudaSuccess) return 2;
  ping_pong<<<1, 256>>>(out, 50);
  const cudaError_t status = cudaDeviceSynchronize();
  std::printf("ping_pong: %s\n", cudaGetErrorString(status));
  return status == cudaSuccess ? 0 : 1;
}
