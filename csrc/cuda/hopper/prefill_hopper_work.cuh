// The Hopper kernel's unit of work and tile addressing: a (token, 64 heads, split) item, its
// candidate blocks of 64 (list chunks, each held as one 64-row K tile), and byte offsets in the
// swizzled tiles. The prefill has one split (the whole lists); a decode split takes its chunk
// range (csrc/common/decode_splits.h). Items are walked by a persistent grid: CTA c takes c,
// c + gridDim.x, ...
#pragma once

#include <type_traits>

#include "../common/candidate_lists.cuh"
#include "../common/decode_params.h"
#include "prefill_hopper_layout.h"

namespace cake::cuda::hopper {

// An item's blocks (one list chunk each): main-list chunks [first0, first0 + chunks0), then
// extra-list chunks [first1, first1 + num_chunks - chunks0), each cut at the token's length
// (../common/work_unit.h). kSplitItems is false for the prefill and a decode that does not split:
// one split, the whole lists, both firsts 0 at compile time (that instance's block addressing is
// the plain prefill's).
template <bool kSplitItems>
struct WorkItem : WorkUnit<kSplitItems> {
  // Block k of the item: its list (0 main, 1 extra) and chunk.
  __device__ __forceinline__ bool in_main(int k) const { return k < this->chunks0; }
  __device__ __forceinline__ int chunk(int k) const {
    if constexpr (kSplitItems) {
      return in_main(k) ? this->first0 + k : this->first1 + k - this->chunks0;
    } else {
      return in_main(k) ? k : k - this->chunks0;
    }
  }
  __device__ __forceinline__ int length(int k) const { return in_main(k) ? this->length0 : this->length1; }
};

// Items of a launch: tokens x head blocks x splits (num_work_units, ../common/candidate_lists.cuh; the
// whole-list instance runs one split). Item = (token * num_head_blocks + head block) * num_splits
// + split.
template <bool kSplitItems>
__device__ __forceinline__ WorkItem<kSplitItems> work_item(const DecodeParams& params, int item) {
  static_assert(kBlockRows == nvfp4::kChunkSize, "a block is one list chunk");
  WorkItem<kSplitItems> w;
  static_cast<WorkUnit<kSplitItems>&>(w) = work_unit<kHeads, kSplitItems>(params, item);
  return w;
}

// A place in the CTA's blocks, in order over its items with candidates (the dequant's walk, any role
// that walks the blocks).
template <bool kSplitItems>
struct BlockCursor {
  int item;  // >= the item count: past the end
  int block;
  WorkItem<kSplitItems> w;
};
// The cursor at item `item` or the first one after it (gridDim.x apart) with candidates, block 0.
template <bool kSplitItems>
__device__ __forceinline__ void seek_item(const DecodeParams& params, int num_items, BlockCursor<kSplitItems>& cursor,
                                          int item) {
  for (; item < num_items; item += gridDim.x) {
    cursor.w = work_item<kSplitItems>(params, item);
    if (cursor.w.num_chunks > 0) break;
  }
  cursor.item = item;
  cursor.block = 0;
}
// The cursor at the block after its own (past the end: item >= num_items).
template <bool kSplitItems>
__device__ __forceinline__ void advance(const DecodeParams& params, int num_items, BlockCursor<kSplitItems>& cursor) {
  if (++cursor.block == cursor.w.num_chunks) seek_item(params, num_items, cursor, cursor.item + gridDim.x);
}

// Byte offset of bf16 element (row, column < 64) in the swizzled P tile (one column block).
__device__ __forceinline__ uint32_t p_tile_offset(int row, int column) {
  return row * kTileRowBytes + (((column / 8) ^ (row % 8)) * 16) + (column % 8) * 2;
}

// Byte offset of 16-byte chunk `chunk` (0..63, 8 dims each) of row `row` in a swizzled tile whose
// column blocks are `kColumnBlockBytes` apart (the Q tile's or a K tile's).
template <int kColumnBlockBytes>
__device__ __forceinline__ uint32_t swizzled_chunk_offset(int row, int chunk) {
  return (chunk / 8) * kColumnBlockBytes + row * kTileRowBytes + (((chunk % 8) ^ (row % 8)) * 16);
}

}  // namespace cake::cuda::hopper
