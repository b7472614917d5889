// The portable prefill instance for head_tiles = 1 (one instance per file: parallel builds).
#include "prefill_instance.cuh"

template void cake::cuda::launch_sparse_mla_prefill<1>(const PrefillParams&, cudaStream_t);
