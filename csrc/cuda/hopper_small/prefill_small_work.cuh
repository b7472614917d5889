// The small-heads Hopper kernel's units of work and tile addressing: a (token, group of heads)
// unit (and, in the decode's instance, a split) and its chunks of 64 candidates, byte offsets in the swizzled tiles, and the order in which
// the converters feed a row's dims to QK^T (which fixes where Q's dims go and where the epilogue
// finds each output dim). Units are walked by a persistent grid: CTA c takes c, c + gridDim.x, ...
#pragma once

#include "../common/candidate_gather.cuh"
#include "../common/candidate_lists.cuh"
#include "../common/decode_params.h"
#include "../common/ptx_primitives.cuh"
#include "../hopper/nvfp4_bit_decode.cuh"
#include "../hopper/sm90_primitives.cuh"
#include "prefill_small_layout.h"

namespace cake::cuda::hopper_small {

// params.num_head_blocks is the number of units per token here (num_heads / kGroupHeads, rounded
// up in the decode). Units: (token * num_head_blocks + head group) * num_splits + split, where
// the prefill's instance has one split, the whole lists (num_work_units, ../common/candidate_lists.cuh).

// The list (0 main, 1 extra) of the unit's chunk `chunk`, and the list position of its row `row`.
template <bool kSplitItems>
__device__ __forceinline__ bool in_main_list(const Unit<kSplitItems>& u, int chunk) {
  return chunk < u.chunks0;
}
template <bool kSplitItems>
__device__ __forceinline__ int list_position(const Unit<kSplitItems>& u, int chunk, int row) {
  const bool in_main = in_main_list(u, chunk);
  int list_chunk = in_main ? chunk : chunk - u.chunks0;
  if constexpr (kSplitItems) list_chunk += in_main ? u.first0 : u.first1;
  return list_chunk * kChunkRows + row;
}

// Whether head `head` of the call is a real one: the decode's units of 16 heads may pass the last
// head (H = 8, 24, ...: the padding rows get zero Q and are not stored). A launch that runs a
// range of heads given apart (params_from_head: H = 80, 96 in the prefill) has whole units, and
// params.num_heads (the row stride) lies past them.
__device__ __forceinline__ bool real_head(const DecodeParams& params, int head) { return head < params.num_heads; }

// Byte offset of 16-byte chunk `chunk` (0..63, 8 dims) of candidate row `row` in a K tile.
__device__ __forceinline__ uint32_t k_chunk_offset(int row, int chunk) {
  return (chunk / 8) * kKColumnBlockBytes + row * kTileRowBytes + (((chunk % 8) ^ (row % 8)) * 16);
}

// Byte offset of bf16 element `column` (0..63) of row `row` in a one-column-block tile (P^T).
__device__ __forceinline__ uint32_t row_tile_offset(int row, int column) {
  return row * kTileRowBytes + (((column / 8) ^ (row % 8)) * 16) + (column % 8) * 2;
}

// ---------------------------------------------------------------------------------------------
// The order of the dims.
//
// QK^T is S^T = K Q^T: the 64 candidates of a chunk are the M of the wgmma, each converter's 256
// dims its K (16 k-steps of 16 positions). The A fragment of a k-step gives thread (warp w, lane)
// the rows 16 w + lane / 4 and + 8, and in each the positions 2 q, 2 q + 1 (registers a0 / a1)
// and 2 q + 8, 2 q + 9 (a2 / a3), q = lane % 4. Which dim sits at which position is free, as long
// as the Q tile puts Q's dims at the same positions. The conversion fixes it:
//
// - lane q converts, of each of its rows, the 16-value groups first_group + q + 4 i (8 code bytes
//   and one E4M3 scale each: converter 0 groups 0..15, i < 4; converter 1 groups 16..27, i < 3), so
//   that the four lanes of a row read 32 contiguous code bytes per load. Word b (0, 1) of group g
//   is code word 2 g + b (dims 8 (2 g + b) ..); its decode gives the pairs (element k, element
//   k + 4), k < 4, and k-step 4 i + 2 b + t takes pair 2 t at position 2 q and pair 2 t + 1 at
//   position 2 q + 8;
// - converter 1's lane q also copies RoPE chunks 2 q + v (v = 0, 1; 8 bf16 dims each, in order):
//   k-step 12 + 2 v + t takes the chunk's dims 4 t, 4 t + 1 at position 2 q and 4 t + 2, 4 t + 3
//   at position 2 q + 8.
//
// The K tile keeps the same order: the fragment registers of a k-step are stored as they are
// (stmatrix, no register copies), positions 8 hi .. 8 hi + 7 of converter h's k-step s into 16-byte
// chunk k_tile_chunk(h, s, hi) of the candidate's row. Each of the four matrices of a stmatrix is
// one chunk of 8 rows, which the swizzle (chunk ^ row % 8) spreads over all 8 bank groups. PV's
// O^T then holds, in row m of m-tile t, the dim of chunk 8 t + m / 8, column m % 8
// (k_tile_dim): the epilogue stores it there.
constexpr int first_group(int half) { return half == 0 ? 0 : 16; }
constexpr int group_slots(int half) { return half == 0 ? 4 : 3; }
constexpr int kRopeKStep = 12;  // converter 1's first RoPE k-step

// The group in slot `slot` of lane q's rows of half `half` (the order of the paragraphs above).
__host__ __device__ constexpr int slot_group(int half, int q, int slot) { return first_group(half) + q + 4 * slot; }
// The lane (q) and slot that convert group first_group(half) + local of a row: slot_group inverted.
__host__ __device__ constexpr int group_lane(int, int local) { return local % 4; }
__host__ __device__ constexpr int group_slot(int, int local) { return local / 4; }
constexpr bool slot_groups_invert() {
  for (int half = 0; half < 2; ++half) {
    for (int q = 0; q < 4; ++q) {
      for (int slot = 0; slot < group_slots(half); ++slot) {
        const int local = slot_group(half, q, slot) - first_group(half);
        if (local < 0 || local >= 4 * group_slots(half)) return false;
        if (group_lane(half, local) != q || group_slot(half, local) != slot) return false;
      }
    }
  }
  return true;
}
static_assert(slot_groups_invert(), "each group of a half has one lane and slot, and group_lane / group_slot find them");
static_assert(group_slots(0) * 4 == kKStepsPerConverter && group_slots(1) * 4 + 4 == kKStepsPerConverter,
              "each converter feeds 16 k-steps");
static_assert(first_group(1) == 4 * group_slots(0) && first_group(1) + 4 * group_slots(1) == nvfp4::kNumGroups,
              "the converters cover the 28 groups");

// Byte offset, in a converter's Q half of a kHeads-row tile, of the bf16 pair at positions
// `position`, `position` + 1 (position even) of k-step `kstep` in row `head`.
template <int kGroupHeads>
__device__ __forceinline__ uint32_t q_pair_offset(int head, int kstep, int position) {
  const int byte_in_row = (kstep % 4) * 32 + 2 * position;
  return (kstep / 4) * Geometry<kGroupHeads>::kQColumnBlockBytes + head * kTileRowBytes +
         ((((byte_in_row / 16) ^ (head % 8)) * 16) | (byte_in_row % 16));
}

// The K-tile chunk that holds positions 8 hi .. 8 hi + 7 of converter `half`'s k-step `kstep`.
constexpr int k_tile_chunk(int half, int kstep, int hi) { return 32 * half + 2 * kstep + hi; }

// stmatrix / ldmatrix .x4 of a k-step's A fragment (a warpgroup's 64 candidate rows of the K
// tile): ../hopper/sm90_primitives.cuh. The fused 64-head development kernel's fragments are laid
// out the same way.
using sm90::fragment_x4_lane_offset;
static_assert(kTileRowBytes == sm90::kSwizzleRowBytes, "the K tile's rows are the swizzle's 128 bytes");

// The dim at position `position` (0..15) of converter `half`'s k-step `kstep` (see above).
// constexpr (host and device): the epilogue's assumptions on it are checked at compile time below.
__host__ __device__ constexpr int position_dim(int half, int kstep, int position) {
  const int q = (position % 8) / 2;
  const int element = position % 2;  // low or high half of the pair
  const int hi = position / 8;        // a0 / a1 (0) or a2 / a3 (1)
  const int t = kstep % 2;
  if (half == 1 && kstep >= kRopeKStep) {
    const int chunk = 2 * q + (kstep - kRopeKStep) / 2;
    return nvfp4::kNopeDim + 8 * chunk + 2 * (2 * t + hi) + element;
  }
  const int word = 2 * slot_group(half, q, kstep / 4) + (kstep % 4) / 2;
  return 8 * word + (2 * t + hi) + 4 * element;
}

// The output dim that column `column` (0..7) of K-tile chunk `chunk` (0..63) holds.
__host__ __device__ constexpr int k_tile_dim(int chunk, int column) {
  return position_dim(chunk / 32, (chunk % 32) / 2, 8 * (chunk % 2) + column);
}

// ---------------------------------------------------------------------------------------------
// The output dims a thread of the attend warpgroup holds.
//
// The PV accumulator fragment gives thread (warp w, lane) rows 16 w + lane / 4 + 8 h (h = 0, 1) of
// each m-tile t of O^T, i.e. the dims k_tile_dim(8 t + 2 w + h, lane / 4), for the heads
// 8 n + 2 (lane % 4) + e (e = 0, 1). All dims of m-tile t lie in output column block t (dims
// 64 t ..). In the NoPE m-tiles (t < 7) rows h = 0 and 1 are two adjacent dims, the first even,
// the same for every t: a head's pair is one aligned 4-byte word of its output row. In the RoPE
// m-tile (t = 7) they are d and d + 2, and the lane of the next column (lane + 4, column odd)
// holds d + 1 and d + 3: once the two lanes swap one value, each holds an adjacent pair
// (d, d + 1 and d + 2, d + 3).
constexpr int kWarpsPerWarpgroup = kWarpgroupThreads / 32;
constexpr int kRopeMTile = kPvMTiles - 1;
static_assert(kRopeMTile * 64 == nvfp4::kNopeDim, "the last m-tile holds the RoPE dims");

// The first dim, within its column block, of the pair that thread (warp, column = lane / 4)
// writes of each NoPE m-tile, and of the RoPE m-tile once the lanes have swapped.
__host__ __device__ constexpr int nope_pair_dim(int warp, int column) { return k_tile_dim(2 * warp, column); }
__host__ __device__ constexpr int rope_pair_dim(int warp, int column) {
  return k_tile_dim(8 * kRopeMTile + 2 * warp, column) - nvfp4::kNopeDim + column % 2;
}

// The K tile holds each of the 512 dims once (so Q, placed by the same order, meets every dim of K).
constexpr bool k_tile_dims_permute() {
  bool seen[nvfp4::kHeadDim] = {};
  for (int chunk = 0; chunk < 64; ++chunk) {
    for (int column = 0; column < 8; ++column) {
      const int dim = k_tile_dim(chunk, column);
      if (dim < 0 || dim >= nvfp4::kHeadDim || seen[dim]) return false;
      seen[dim] = true;
    }
  }
  return true;
}
static_assert(k_tile_dims_permute(), "the converters' order is a permutation of the 512 dims");

// Checks the paragraph above over every thread and m-tile.
constexpr bool output_pairs_hold() {
  for (int warp = 0; warp < kWarpsPerWarpgroup; ++warp) {
    for (int column = 0; column < 8; ++column) {
      for (int t = 0; t < kPvMTiles; ++t) {
        const int block = 64 * t;
        const int d0 = k_tile_dim(8 * t + 2 * warp, column);
        const int d1 = k_tile_dim(8 * t + 2 * warp + 1, column);
        const bool in_block = d0 >= block && d0 < block + 64 && d1 >= block && d1 < block + 64;
        if (!in_block) return false;
        if (t < kRopeMTile) {
          if (d0 % 2 != 0 || d1 != d0 + 1 || d0 - block != nope_pair_dim(warp, column)) return false;
        } else if (column % 2 == 0) {
          const int next0 = k_tile_dim(8 * t + 2 * warp, column + 1);
          const int next1 = k_tile_dim(8 * t + 2 * warp + 1, column + 1);
          if (d0 % 2 != 0 || d1 != d0 + 2 || next0 != d0 + 1 || next1 != d0 + 3) return false;
          if (rope_pair_dim(warp, column) != d0 - block || rope_pair_dim(warp, column + 1) != d0 + 2 - block) return false;
        }
      }
    }
  }
  return true;
}
static_assert(output_pairs_hold(), "the epilogue's pairs of adjacent output dims (see above)");

// The cursor at unit `unit` or the first one after it (gridDim.x apart) with candidates, chunk 0.
template <int kGroupHeads, bool kSplitItems>
__device__ __forceinline__ void seek_unit(const DecodeParams& params, int num_units, ChunkCursor<kSplitItems>& cursor,
                                          int unit) {
  for (; unit < num_units; unit += gridDim.x) {
    cursor.u = work_unit<kGroupHeads, kSplitItems, false>(params, unit);
    if (cursor.u.num_chunks > 0) break;
  }
  cursor.unit = unit;
  cursor.chunk = 0;
}
// The cursor at the chunk after its own (not past the end).
template <int kGroupHeads, bool kSplitItems>
__device__ __forceinline__ void advance(const DecodeParams& params, int num_units, ChunkCursor<kSplitItems>& cursor) {
  if (++cursor.chunk == cursor.u.num_chunks) {
    seek_unit<kGroupHeads, kSplitItems>(params, num_units, cursor, cursor.unit + gridDim.x);
  }
}
// advance(), except that a cursor past the end stays there (the row table's writers walk past the
// CTA's chunks, where the entries are masked).
template <int kGroupHeads, bool kSplitItems>
__device__ __forceinline__ void advance_or_stay(const DecodeParams& params, int num_units,
                                                ChunkCursor<kSplitItems>& cursor) {
  if (cursor.unit < num_units) advance<kGroupHeads, kSplitItems>(params, num_units, cursor);
}
// The list of the cursor's chunk (the main list past the end, where nothing is read).
template <bool kSplitItems>
__device__ __forceinline__ const CandidateListParams& chunk_list(const DecodeParams& params, int num_units,
                                                                 const ChunkCursor<kSplitItems>& c) {
  return params.lists[c.unit < num_units && !in_main_list(c.u, c.chunk) ? 1 : 0];
}
// The raw index of row `row` of the cursor's chunk, loaded here: -1 past its list's length or the
// CTA's chunks (candidate_rows_of_index range-checks the rest): the row table's writers' loads (the
// attend warpgroup's or converter 0's).
template <bool kSplitItems>
__device__ __forceinline__ int32_t chunk_row_index(const DecodeParams& params, int num_units,
                                                   const ChunkCursor<kSplitItems>& c, int row) {
  if (c.unit >= num_units) return -1;
  const CandidateListParams& list = chunk_list(params, num_units, c);
  const int position = list_position(c.u, c.chunk, row);
  const int length = in_main_list(c.u, c.chunk) ? c.u.length0 : c.u.length1;
  return position < length ? __ldg(list.indices + int64_t(c.u.token) * list.width + position) : -1;
}
// A row of the cursor's chunk as a row-table entry, from its index (chunk_row_index; -1: masked).
template <bool kSplitItems>
__device__ __forceinline__ RowEntry table_row_entry(const DecodeParams& params, int num_units,
                                                    const ChunkCursor<kSplitItems>& c, int32_t index) {
  const CandidateRows rows = candidate_rows_of_index(chunk_list(params, num_units, c), index);
  return {reinterpret_cast<uint64_t>(rows.data) | uint64_t(rows.valid), reinterpret_cast<uint64_t>(rows.scale)};
}
// Row `row`'s entry of the CTA's chunk c into the row table, and its arrival on the slot's
// table_full (64 arrivals a chunk, one a row): what either writer does for each row.
template <class Storage>
__device__ __forceinline__ void publish_row_entry(Storage& smem, int c, int row, const RowEntry& entry) {
  smem.table.rows[c % kTableSlots][row] = entry;
  sm90::mbarrier_arrive(smem_address(&smem.table_full[c % kTableSlots]));
}

}  // namespace cake::cuda::hopper_small
