// The portable prefill instance for head_tiles = 4, 3 raw stages, 2 K tile(s).
#include "kernel_instance.cuh"

template void cake::cuda::launch_sparse_mla_prefill<4, 3, 2>(const PrefillParams&, cudaStream_t);
