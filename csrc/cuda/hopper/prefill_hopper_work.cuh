// The Hopper prefill's unit of work and tile addressing: a (token, 64 heads) item, its candidate
// blocks of 64 (list chunks, each held as two 32-row K slots), and byte offsets in the swizzled
// tiles. Items are walked by a persistent grid: CTA c takes c, c + gridDim.x, ...
#pragma once

#include "../common/candidate_lists.cuh"
#include "../common/prefill_params.h"
#include "prefill_hopper_layout.h"

namespace cake::cuda::hopper {

struct WorkItem {
  int token;
  int head0;
  int length0, length1;  // valid prefixes of the main and extra lists
  int blocks0;           // 64-candidate blocks of the main list
  int num_blocks;        // main + extra
};

__device__ __forceinline__ WorkItem work_item(const PrefillParams& params, int item) {
  WorkItem w;
  w.token = item / params.num_head_blocks;
  w.head0 = (item % params.num_head_blocks) * kHeads;
  w.length0 = list_length(params.lists[0], w.token);
  w.length1 = list_length(params.lists[1], w.token);
  w.blocks0 = (w.length0 + kBlockRows - 1) / kBlockRows;
  w.num_blocks = w.blocks0 + (w.length1 + kBlockRows - 1) / kBlockRows;
  return w;
}

// Byte offset of bf16 element (row, column < 64) in the swizzled P tile (one column block).
__device__ __forceinline__ uint32_t p_tile_offset(int row, int column) {
  return row * kTileRowBytes + (((column / 8) ^ (row % 8)) * 16) + (column % 8) * 2;
}

// Byte offset of 16-byte chunk `chunk` (0..63, 8 dims each) of row `row` in a swizzled tile whose
// column blocks are `kColumnBlockBytes` apart (the Q tile's or a K slot's).
template <int kColumnBlockBytes>
__device__ __forceinline__ uint32_t swizzled_chunk_offset(int row, int chunk) {
  return (chunk / 8) * kColumnBlockBytes + row * kTileRowBytes + (((chunk % 8) ^ (row % 8)) * 16);
}

}  // namespace cake::cuda::hopper
