#pragma once

#include <cuda_runtime.h>

#include "common/decode_params.h"

namespace cake::cuda {

// The decode's second kernel: folds the num_splits partials of every (token, head) row, and the
// sink, into output and out_lse (csrc/common/decode_splits.h), on `stream`. Where its image is
// built for sm_90 or later it is launched as a programmatic dependent of the split kernel just
// before it on the stream, which lets it start while that kernel still runs.
void launch_sparse_mla_decode_merge(const DecodeParams& params, cudaStream_t stream);

}  // namespace cake::cuda
