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

// The split fields; the whole-list instance has none (nothing to carry through the block loop).
struct SplitRange {
  int split;
  int main_first, extra_first;
};
struct WholeLists {};

// An item's blocks: main-list chunks [main_first, main_first + main_blocks), then extra-list
// chunks [extra_first, extra_first + num_blocks - main_blocks), each cut at the token's length.
// kSplitItems is false for the prefill and a decode that does not split: one split, the whole
// lists, both firsts 0 at compile time (that instance's block addressing is the plain prefill's).
template <bool kSplitItems>
struct WorkItem : std::conditional_t<kSplitItems, SplitRange, WholeLists> {
  int token;
  int head0;
  int length0, length1;  // valid prefixes of the main and extra lists
  int main_blocks;
  int num_blocks;  // main + extra

  // Block k of the item: its list (0 main, 1 extra) and chunk.
  __device__ __forceinline__ bool in_main(int k) const { return k < main_blocks; }
  __device__ __forceinline__ int chunk(int k) const {
    if constexpr (kSplitItems) {
      return in_main(k) ? this->main_first + k : this->extra_first + k - main_blocks;
    } else {
      return in_main(k) ? k : k - main_blocks;
    }
  }
  __device__ __forceinline__ int length(int k) const { return in_main(k) ? length0 : length1; }
};

// Items of a launch: tokens x head blocks x splits (the whole-list instance runs one split).
template <bool kSplitItems>
__device__ __forceinline__ int num_work_items(const DecodeParams& params) {
  return params.num_tokens * params.num_head_blocks * (kSplitItems ? params.num_splits : 1);
}

// Whose rows item `item` computes: its token, its first head and its split (0 for whole lists).
// Recomputed where needed (the consumers' epilogue, the Q loads) rather than kept in registers
// across an item.
struct ItemRows {
  int token;
  int head0;
  int split;
};
template <bool kSplitItems>
__device__ __forceinline__ ItemRows item_rows(const DecodeParams& params, int item) {
  const int row_item = kSplitItems ? item / params.num_splits : item;
  return {row_item / params.num_head_blocks, (row_item % params.num_head_blocks) * kHeads,
          kSplitItems ? item % params.num_splits : 0};
}

// Item = (token * num_head_blocks + head block) * num_splits + split.
template <bool kSplitItems>
__device__ __forceinline__ WorkItem<kSplitItems> work_item(const DecodeParams& params, int item) {
  static_assert(kBlockRows == nvfp4::kChunkSize, "a block is one list chunk");
  WorkItem<kSplitItems> w;
  const ItemRows rows = item_rows<kSplitItems>(params, item);
  w.token = rows.token;
  w.head0 = rows.head0;
  const UnitChunks c = unit_chunks<kSplitItems>(params, w.token, rows.split);
  w.length0 = c.length0;
  w.length1 = c.length1;
  w.main_blocks = c.chunks0;
  w.num_blocks = c.num_chunks;
  if constexpr (kSplitItems) {
    w.split = rows.split;
    w.main_first = c.first0;
    w.extra_first = c.first1;
  }
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
    if (cursor.w.num_blocks > 0) break;
  }
  cursor.item = item;
  cursor.block = 0;
}
// The cursor at the block after its own (past the end: item >= num_items).
template <bool kSplitItems>
__device__ __forceinline__ void advance(const DecodeParams& params, int num_items, BlockCursor<kSplitItems>& cursor) {
  if (++cursor.block == cursor.w.num_blocks) seek_item(params, num_items, cursor, cursor.item + gridDim.x);
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
