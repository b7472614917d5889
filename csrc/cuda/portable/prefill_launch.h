#pragma once

#include <cuda_runtime.h>

#include "../common/prefill_params.h"
#include "prefill_variants.h"

namespace cake::cuda {

// Launches the instance for `variant`; false when no such instance is compiled.
bool launch_sparse_mla_prefill(const PrefillVariant& variant, const PrefillParams& params, cudaStream_t stream);

// One declaration per instance; each is defined in its own prefill_ht<N>_s<S>_k<K>.cu.
template <int kHeadTiles, int kStages, int kKTiles>
void launch_sparse_mla_prefill(const PrefillParams& params, cudaStream_t stream);

}  // namespace cake::cuda
