// The portable prefill instance for head_tiles = 1, 2 raw stages, 1 K tile(s).
#include "kernel_instance.cuh"

template void cake::cuda::launch_sparse_mla_prefill<1, 2, 1>(const PrefillParams&, cudaStream_t);
