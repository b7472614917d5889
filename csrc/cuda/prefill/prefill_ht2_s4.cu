// The portable prefill instance for head_tiles = 2, 4 raw stages (one instance per file).
#include "prefill_instance.cuh"

template void cake::cuda::launch_sparse_mla_prefill<2, 4>(const PrefillParams&, cudaStream_t);
