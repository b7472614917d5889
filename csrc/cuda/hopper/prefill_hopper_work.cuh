// The Hopper prefill's unit of work and tile addressing: a (token, 64 heads) item, its candidate
// blocks taken two at a time (pairs), and byte offsets in the swizzled tiles. Items are walked by
// a persistent grid: CTA c takes c, c + gridDim.x, ...
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
  __device__ int num_pairs() const { return (num_blocks + 1) / 2; }
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

// Byte offset of bf16 element (row, column) in a swizzled [8][64][128 B] tile.
__device__ __forceinline__ uint32_t swizzled_offset(int row, int column) {
  const int chunk = (column % 64) / 8;
  return (column / 64) * kColumnBlockBytes + row * kTileRowBytes + ((chunk ^ (row % 8)) * 16) + (column % 8) * 2;
}

// Byte offset of 16-byte chunk `chunk` (0..63, 8 dims each) of tile row `row`.
__device__ __forceinline__ uint32_t swizzled_chunk_offset(int row, int chunk) {
  return (chunk / 8) * kColumnBlockBytes + row * kTileRowBytes + (((chunk % 8) ^ (row % 8)) * 16);
}

}  // namespace cake::cuda::hopper
