// The fused 64-head Hopper kernel's work items and tile addressing: the CTA's walk over its items'
// chunks (the row table's writer keeps the cursor), the order of the dims in the K tile and in Q
// (the NoPE dims in the small-heads kernel's converter order, the RoPE dims as they are), and
// which output dim each accumulator column holds.
#pragma once

#include "../common/candidate_gather.cuh"
#include "../common/candidate_lists.cuh"
#include "../common/decode_params.h"
#include "../common/ptx_primitives.cuh"
#include "../hopper/sm90_primitives.cuh"
#include "../hopper_small/prefill_small_work.cuh"
#include "fused_layout.h"

namespace cake::cuda::hopper_fused {

// ---------------------------------------------------------------------------------------------
// The CTA's walk: items c, c + gridDim.x, ... (token, 64 heads), chunk by chunk, skipping items
// without candidates (their epilogue still runs, in the accumulators' own walk over all items).

__device__ __forceinline__ int num_items(const DecodeParams& params) { return num_work_units<false>(params); }

// The cursor at item `item` or the first one after it (gridDim.x apart) with candidates, chunk 0.
__device__ __forceinline__ void seek_item(const DecodeParams& params, int items, ChunkCursor& cursor, int item) {
  for (; item < items; item += gridDim.x) {
    cursor.u = work_unit<kHeads, false>(params, item);
    if (cursor.u.num_chunks > 0) break;
  }
  cursor.item = item;
  cursor.chunk = 0;
}
// The cursor at the next chunk (an item's last chunk moves it to the next item with candidates,
// one ordinal on); past the end it stays there.
__device__ __forceinline__ void advance(const DecodeParams& params, int items, ChunkCursor& cursor) {
  if (cursor.item >= items) return;
  if (++cursor.chunk == cursor.u.num_chunks) {
    seek_item(params, items, cursor, cursor.item + gridDim.x);
    ++cursor.ordinal;
  }
}
__device__ __forceinline__ const CandidateListParams& chunk_list(const DecodeParams& params, int items,
                                                                 const ChunkCursor& c) {
  return params.lists[c.item < items && c.chunk >= c.u.chunks0 ? 1 : 0];
}
// The raw index of row `row` of the cursor's chunk: -1 past its list's length or the CTA's chunks.
__device__ __forceinline__ int32_t chunk_row_index(const DecodeParams& params, int items, const ChunkCursor& c,
                                                   int row) {
  if (c.item >= items) return -1;
  const bool in_main = c.chunk < c.u.chunks0;
  const CandidateListParams& list = chunk_list(params, items, c);
  const int position = (in_main ? c.chunk : c.chunk - c.u.chunks0) * kChunkRows + row;
  const int length = in_main ? c.u.length0 : c.u.length1;
  return position < length ? __ldg(list.indices + int64_t(c.u.token) * list.width + position) : -1;
}
__device__ __forceinline__ CandidateRows chunk_rows(const DecodeParams& params, int items, const ChunkCursor& c,
                                                   int32_t index) {
  return candidate_rows_of_index(chunk_list(params, items, c), index);
}
__device__ __forceinline__ RowEntry row_entry(const CandidateRows& rows) {
  return reinterpret_cast<uint64_t>(rows.data) | uint64_t(rows.valid);
}
__device__ __forceinline__ const uint8_t* entry_data(RowEntry e) {
  return reinterpret_cast<const uint8_t*>(e & ~uint64_t(1));
}
__device__ __forceinline__ bool entry_valid(RowEntry e) { return (e & 1u) != 0; }
__device__ __forceinline__ ChunkInfo chunk_info(int items, const ChunkCursor& c) {
  if (c.item >= items) return {-1, c.ordinal, 0, 0};
  const int flags = (c.chunk == 0 ? kFirstChunk : 0) | (c.chunk == 1 ? kSecondChunk : 0) |
                    (c.chunk == c.u.num_chunks - 1 ? kLastChunk : 0);
  return {c.item, c.ordinal, flags, 0};
}

// ---------------------------------------------------------------------------------------------
// Positions. A QK^T k-step of half h takes 16 positions; its A fragment gives thread (warp w, lane)
// rows 16 w + lane / 4 (+ 8) and positions 2 q, 2 q + 1 (a0 / a1) and 2 q + 8, 2 q + 9 (a2 / a3),
// q = lane % 4. NoPE: the small-heads kernel's order (hopper_small::position_dim). RoPE (half 1,
// k-steps 12..15): k-step 12 + i holds the RoPE dims 16 i .. 16 i + 15 in order, i.e. K-tile
// chunk 56 + k holds RoPE dims 8 k .. 8 k + 7: the cache's RoPE bytes copied as they are.

// The output dim that column `column` (0..7) of K-tile chunk `chunk` (0..63) holds.
__host__ __device__ constexpr int fused_tile_dim(int chunk, int column) {
  return chunk < 8 * kRopeColumnBlock ? hopper_small::k_tile_dim(chunk, column)
                                      : nvfp4::kNopeDim + 8 * (chunk - 8 * kRopeColumnBlock) + column;
}
constexpr bool fused_tile_dims_permute() {
  bool seen[nvfp4::kHeadDim] = {};
  for (int chunk = 0; chunk < 64; ++chunk) {
    for (int column = 0; column < 8; ++column) {
      const int dim = fused_tile_dim(chunk, column);
      if (dim < 0 || dim >= nvfp4::kHeadDim || seen[dim]) return false;
      seen[dim] = true;
    }
  }
  return true;
}
static_assert(fused_tile_dims_permute(), "the K tile holds each of the 512 dims once");
static_assert(hopper_small::k_tile_chunk(1, kRopeKStep - 1, 1) < 8 * kRopeColumnBlock,
              "the converters' NoPE k-steps stay out of the RoPE column block");

}  // namespace cake::cuda::hopper_fused
