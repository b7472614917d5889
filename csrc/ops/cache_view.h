// Validation of one NVFP4 cache view (3-D, HND or NHD) into its run-time page geometry.
#pragma once

#include <ATen/core/Tensor.h>

#include "../format/nvfp4_format.h"
#include "tensor_alignment.h"

namespace cake {

// Checks dtype, rank, the three accepted view forms, inner strides, the page stride and the base
// alignment (unless `pointers` skips it); raises ValueError naming `name` otherwise.
nvfp4::CacheGeometry check_cache_view(const at::Tensor& cache, const char* name,
                                      PointerChecks pointers = PointerChecks::kCheck);

}  // namespace cake
