// Tensor maps: the descriptors the tensor memory accelerator (TMA, sm_90) copies boxes of a global
// tensor with. Built on the host per call and passed to the kernel as a __grid_constant__
// parameter, so a CUDA graph captures them with the launch.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace cake::cuda {

// The TMA reads and writes global memory 16 bytes at a time: a tensor's base address must be
// aligned so (an output view only 4-byte aligned, which the ops accept, keeps register stores).
constexpr uintptr_t kTmaAlignment = 16;
inline bool tma_addressable(const void* data) { return reinterpret_cast<uintptr_t>(data) % kTmaAlignment == 0; }

// The box height: the 64 heads of the Hopper kernel's Q tile (hopper/prefill_hopper_layout.h).
constexpr uint32_t kHeadRowsBoxHeads = 64;

// A contiguous [num_tokens, num_heads, 512] bf16 tensor (q) as a 3-D map (dims 512, num_heads,
// num_tokens) with a box of 64 dims x 64 heads x 1 token, 128-byte swizzled in shared memory: one
// column block of a 64-row tile. A box reaching past num_heads loads zeros there. `data` must be
// 16-byte aligned; num_tokens and num_heads positive.
CUtensorMap head_rows_tensor_map(const void* data, int64_t num_tokens, int64_t num_heads);

// The decode's split partials, fp32 rows [num_rows = splits x tokens, num_heads, 512] (mid_out):
// boxes of 32 dims (128 bytes) x 64 heads x 1 row, 128-byte swizzled.
CUtensorMap partial_rows_tensor_map(const float* data, int64_t num_rows, int64_t num_heads);

}  // namespace cake::cuda
