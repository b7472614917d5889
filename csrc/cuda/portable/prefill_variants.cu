// Dispatch from a run-time variant to its compiled instance.
#include "prefill_launch.h"

namespace cake::cuda {

bool launch_sparse_mla_prefill(const PrefillVariant& v, const PrefillParams& params, cudaStream_t stream) {
  if (v.head_tiles == 1 && v.stages == 2 && v.k_tiles == 1) return launch_sparse_mla_prefill<1, 2, 1>(params, stream), true;
  if (v.head_tiles == 2 && v.stages == 2 && v.k_tiles == 1) return launch_sparse_mla_prefill<2, 2, 1>(params, stream), true;
  if (v.head_tiles == 4 && v.stages == 3 && v.k_tiles == 2) return launch_sparse_mla_prefill<4, 3, 2>(params, stream), true;
  if (v.head_tiles == 4 && v.stages == 2 && v.k_tiles == 1) return launch_sparse_mla_prefill<4, 2, 1>(params, stream), true;
  return false;
}

}  // namespace cake::cuda
