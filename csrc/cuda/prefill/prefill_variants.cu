// Variant table: which instances exist, their shared memory, and the default per head tile.
#include "prefill_kernel.cuh"
#include "prefill_launch.h"

namespace cake::cuda {

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
  if (v.head_tiles == 1 && v.stages == 4 && v.k_tiles == 1) return launch_sparse_mla_prefill<1, 4, 1>(params, stream), true;
  if (v.head_tiles == 1 && v.stages == 3 && v.k_tiles == 2) return launch_sparse_mla_prefill<1, 3, 2>(params, stream), true;
  if (v.head_tiles == 2 && v.stages == 2 && v.k_tiles == 1) return launch_sparse_mla_prefill<2, 2, 1>(params, stream), true;
  if (v.head_tiles == 2 && v.stages == 3 && v.k_tiles == 2) return launch_sparse_mla_prefill<2, 3, 2>(params, stream), true;
  if (v.head_tiles == 4 && v.stages == 2 && v.k_tiles == 1) return launch_sparse_mla_prefill<4, 2, 1>(params, stream), true;
  if (v.head_tiles == 4 && v.stages == 3 && v.k_tiles == 2) return launch_sparse_mla_prefill<4, 3, 2>(params, stream), true;
  if (v.head_tiles == 4 && v.stages == 4 && v.k_tiles == 2) return launch_sparse_mla_prefill<4, 4, 2>(params, stream), true;
  return false;
}

}  // namespace cake::cuda
