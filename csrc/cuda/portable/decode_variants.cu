// Dispatch from a run-time variant to its compiled decode split instance.
#include "decode_launch.h"

namespace cake::cuda {

bool launch_sparse_mla_decode_split(const PrefillVariant& v, const DecodeParams& params, cudaStream_t stream) {
  if (v.head_tiles == 1 && v.stages == 2 && v.k_tiles == 1) return launch_sparse_mla_decode_split<1, 2, 1>(params, stream), true;
  if (v.head_tiles == 2 && v.stages == 2 && v.k_tiles == 1) return launch_sparse_mla_decode_split<2, 2, 1>(params, stream), true;
  if (v.head_tiles == 4 && v.stages == 2 && v.k_tiles == 1) return launch_sparse_mla_decode_split<4, 2, 1>(params, stream), true;
  return false;
}

}  // namespace cake::cuda
