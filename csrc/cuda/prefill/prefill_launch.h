#pragma once

#include <cuda_runtime.h>

#include "prefill_params.h"

namespace cake::cuda {

// The pipeline shape of one kernel instance.
struct PrefillVariant {
  int head_tiles;
  int stages;   // raw-row buffers (gather lead = stages - 1 subtiles, or stages - 2 with 2 K tiles)
  int k_tiles;  // dequantized bf16 tiles (2: the dequant of the next subtile overlaps the MMAs)
};
// The instance the library launches for `head_tiles`.
PrefillVariant prefill_default_variant(int head_tiles);
// Shared memory one CTA of the portable kernel needs.
int prefill_smem_bytes(const PrefillVariant& variant);
// Launches the instance for `variant`; false when no such instance is compiled.
bool launch_sparse_mla_prefill(const PrefillVariant& variant, const PrefillParams& params, cudaStream_t stream);

// One declaration per instance; each is defined in its own prefill_ht<N>_s<S>_k<K>.cu.
template <int kHeadTiles, int kStages, int kKTiles>
void launch_sparse_mla_prefill(const PrefillParams& params, cudaStream_t stream);

}  // namespace cake::cuda
