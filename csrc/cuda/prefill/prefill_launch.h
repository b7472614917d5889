#pragma once

#include <cuda_runtime.h>

#include "prefill_params.h"

namespace cake::cuda {

// Raw-row pipeline depth of the instance the library launches for `head_tiles`.
int prefill_default_stages(int head_tiles);
// Shared memory one CTA of the portable kernel needs.
int prefill_smem_bytes(int head_tiles, int stages);

// One declaration per instance; each is defined in its own prefill_ht<N>_s<S>.cu.
template <int kHeadTiles, int kStages>
void launch_sparse_mla_prefill(const PrefillParams& params, cudaStream_t stream);

}  // namespace cake::cuda
