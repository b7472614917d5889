// The portable prefill instance for head_tiles = 4, 2 raw stages, 1 K tile (fits 163 KB).
#include "kernel_instance.cuh"

template void cake::cuda::launch_sparse_mla_prefill<4, 2, 1>(const PrefillParams&, cudaStream_t);
