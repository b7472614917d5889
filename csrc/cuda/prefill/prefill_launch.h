#pragma once

#include <cuda_runtime.h>

#include "prefill_params.h"

namespace cake::cuda {

// Shared memory one CTA of the portable kernel needs for `head_tiles`.
int prefill_smem_bytes(int head_tiles);

// One declaration per instance; each is defined in its own prefill_ht<N>.cu.
template <int kHeadTiles>
void launch_sparse_mla_prefill(const PrefillParams& params, cudaStream_t stream);

}  // namespace cake::cuda
