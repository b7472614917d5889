// The standalone probes' CUDA error check (each probe is one nvcc command, no library build):
// a failed runtime call prints where and what, and exits with status 1.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(call)                                                                              \
  do {                                                                                                \
    const cudaError_t status_ = (call);                                                               \
    if (status_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(status_)); \
      std::exit(1);                                                                                   \
    }                                                                                                 \
  } while (0)
