// The portable decode split instance for head_tiles = 2, 2 raw stages, 1 K tile.
#include "kernel_instance.cuh"

template void cake::cuda::launch_sparse_mla_decode_split<2, 2, 1>(const DecodeParams&, cudaStream_t);
