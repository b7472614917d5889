// Tensor maps: the descriptors the tensor memory accelerator (TMA, sm_90) copies boxes of a global
// tensor with. Built on the host per call and passed to the kernel as a __grid_constant__
// parameter, so a CUDA graph captures them with the launch.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace cake::cuda {

// Rows of a contiguous [num_tokens, num_heads, 512] bf16 tensor (q, output) as a 3-D map (dims
// 512, num_heads, num_tokens) with a box of 64 dims x 64 heads x 1 token, 128-byte swizzled in
// shared memory: one column block of the Hopper kernel's Q tile (hopper/prefill_hopper_layout.h).
// A box reaching past num_heads loads zeros there and stores nothing there. `data` must be
// 16-byte aligned; num_tokens and num_heads positive.
CUtensorMap head_rows_tensor_map(const void* data, int64_t num_tokens, int64_t num_heads);

}  // namespace cake::cuda
