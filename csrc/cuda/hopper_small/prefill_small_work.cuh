// The small-heads Hopper prefill's units of work and tile addressing: a (token, group of heads)
// unit and its chunks of 64 candidates, byte offsets in the swizzled tiles, and the order in which
// the converters feed a row's dims to QK^T (which fixes where Q's dims go and where the epilogue
// finds each output dim). Units are walked by a persistent grid: CTA c takes c, c + gridDim.x, ...
#pragma once

#include "../common/candidate_lists.cuh"
#include "../common/prefill_params.h"
#include "nvfp4_pair_decode.cuh"
#include "prefill_small_layout.h"

namespace cake::cuda::hopper_small {

// params.num_head_blocks is the number of units per token here (num_heads / kGroupHeads).
struct Unit {
  int token;
  int head0;
  int length0, length1;  // valid prefixes of the main and extra lists
  int chunks0;           // 64-candidate chunks of the main list
  int num_chunks;        // main + extra
};

template <int kGroupHeads>
__device__ __forceinline__ Unit unit_at(const PrefillParams& params, int unit) {
  Unit u;
  u.token = unit / params.num_head_blocks;
  u.head0 = (unit % params.num_head_blocks) * kGroupHeads;
  u.length0 = list_length(params.lists[0], u.token);
  u.length1 = list_length(params.lists[1], u.token);
  u.chunks0 = (u.length0 + kChunkRows - 1) / kChunkRows;
  u.num_chunks = u.chunks0 + (u.length1 + kChunkRows - 1) / kChunkRows;
  return u;
}

// Byte offset of 16-byte chunk `chunk` (0..63, 8 dims) of candidate row `row` in a K tile.
__device__ __forceinline__ uint32_t k_chunk_offset(int row, int chunk) {
  return (chunk / 8) * kKColumnBlockBytes + row * kTileRowBytes + (((chunk % 8) ^ (row % 8)) * 16);
}

// Byte offset of bf16 element `column` (0..63) of row `row` in a one-column-block tile (P^T).
__device__ __forceinline__ uint32_t row_tile_offset(int row, int column) {
  return row * kTileRowBytes + (((column / 8) ^ (row % 8)) * 16) + (column % 8) * 2;
}

// ---------------------------------------------------------------------------------------------
// The order of the K dimension (dims) in QK^T.
//
// QK^T is S^T = K Q^T: the 64 candidates of a chunk are the M of the wgmma, each converter's 256
// dims its K (16 k-steps of 16). The A fragment of a k-step gives thread (warp w, lane) the rows
// 16 w + lane / 4 and + 8, and in each the positions 2 q, 2 q + 1 (register a0 / a1) and
// 2 q + 8, 2 q + 9 (a2 / a3), q = lane % 4. Which dim sits at which position is free, as long as
// the Q tile puts Q's dims at the same positions. The conversion fixes it:
//
// - lane q converts, of each of its rows, the 16-value groups first_group + q + 4 i (8 code bytes
//   each, one E4M3 scale: converter 0 groups 0..15, i < 4; converter 1 groups 16..27, i < 3), word
//   b (0, 1) of group g being code word 2 g + b (dims 8 (2 g + b) ..). A word's decode gives the
//   pairs (element k, element k + 4), k < 4; k-step 4 i + 2 b + t takes pair 2 t at position 2 q
//   and pair 2 t + 1 at position 2 q + 8;
// - converter 1's lane q also copies RoPE chunks 2 q + v (v = 0, 1; 8 bf16 dims each, in order):
//   k-step 12 + 2 v + t takes the chunk's dims 4 t, 4 t + 1 at position 2 q and 4 t + 2, 4 t + 3
//   at position 2 q + 8.
//
// Why these groups: at every step the 8 lanes of a quarter warp (two rows, four lanes) store
// their word to chunks 2 q + b (mod 8) of their rows, which the swizzle (chunk ^ row % 8) spreads
// over all 8 bank groups; and four lanes read 32 contiguous code bytes of a row per load.
constexpr int kFirstGroup[kConverters] = {0, 16};
constexpr int kGroupSlots[kConverters] = {4, 3};
constexpr int kRopeKStep = 12;  // converter 1's first RoPE k-step
static_assert(kGroupSlots[0] * 4 == kKStepsPerConverter && kGroupSlots[1] * 4 + 4 == kKStepsPerConverter,
              "each converter feeds 16 k-steps");
static_assert((kFirstGroup[1] + 4 * kGroupSlots[1]) == nvfp4::kNumGroups, "the converters cover the 28 groups");

// Byte offset, in a converter's Q half of a kHeads-row tile, of the bf16 pair at positions
// `position`, `position` + 1 (position even) of k-step `kstep` in row `head`.
template <int kGroupHeads>
__device__ __forceinline__ uint32_t q_pair_offset(int head, int kstep, int position) {
  const int byte_in_row = (kstep % 4) * 32 + 2 * position;
  return (kstep / 4) * Geometry<kGroupHeads>::kQColumnBlockBytes + head * kTileRowBytes +
         ((((byte_in_row / 16) ^ (head % 8)) * 16) | (byte_in_row % 16));
}

// The output dim that row m of the K tile's column block `block` holds in column chunk slot
// `chunk` (0..63): NoPE chunks in the decode's order, RoPE chunks in order.
__device__ __forceinline__ int k_tile_dim(int chunk, int column) {
  return 8 * chunk + (chunk < kRopeFirstChunk ? nope_chunk_element(column) : column);
}

}  // namespace cake::cuda::hopper_small
