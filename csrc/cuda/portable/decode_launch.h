#pragma once

#include <cuda_runtime.h>

#include "../common/decode_params.h"
#include "prefill_variants.h"

namespace cake::cuda {

// Launches the decode split kernel's instance for `variant` over a grid of (num_tokens *
// num_head_blocks, num_splits) CTAs; false when no such instance is compiled (kDecodeVariants).
bool launch_sparse_mla_decode_split(const PrefillVariant& variant, const DecodeParams& params, cudaStream_t stream);

// One declaration per instance; each is defined in its own decode_ht<N>_s<S>_k<K>.cu.
template <int kHeadTiles, int kStages, int kKTiles>
void launch_sparse_mla_decode_split(const DecodeParams& params, cudaStream_t stream);

}  // namespace cake::cuda
