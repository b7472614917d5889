// Variant table: which instances exist, their shared memory, and the default per head tile.
#include "prefill_kernel.cuh"
#include "prefill_launch.h"

namespace cake::cuda {

// Measured on the H200 (docs/benchmarks.md, "variant sweep"): a deeper raw pipeline or a second
// K tile costs CTAs per SM for 1 and 2 head tiles and loses; with 4 head tiles (one CTA per SM
// anyway) the second K tile gains a little.
PrefillVariant prefill_default_variant(int head_tiles) {
  switch (head_tiles) {
    case 1: return {1, 2, 1};
    case 2: return {2, 2, 1};
    default: return {4, 3, 2};
  }
}

int prefill_smem_bytes(const PrefillVariant& v) { return PrefillTile::smem_bytes(v.head_tiles, v.stages, v.k_tiles); }

bool launch_sparse_mla_prefill(const PrefillVariant& v, const PrefillParams& params, cudaStream_t stream) {
  if (v.head_tiles == 1 && v.stages == 2 && v.k_tiles == 1) return launch_sparse_mla_prefill<1, 2, 1>(params, stream), true;
  if (v.head_tiles == 2 && v.stages == 2 && v.k_tiles == 1) return launch_sparse_mla_prefill<2, 2, 1>(params, stream), true;
  if (v.head_tiles == 4 && v.stages == 3 && v.k_tiles == 2) return launch_sparse_mla_prefill<4, 3, 2>(params, stream), true;
  return false;
}

}  // namespace cake::cuda
