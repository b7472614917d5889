// CAKE_HOPPER_FOLLOWER_HIGH (development): the follower converts the NoPE dims 256..447 of its own
// block of each pair (every odd block of an item), which the dequant warpgroups then leave out
// (they still write the block's low half, its flags and its RoPE dims). The dequant converts
// one and a half blocks a pair instead of two, during time the follower spends waiting for its
// block (docs/hopper_kernel.md, "What would close the gap", item 9).
//
// Thread t of the follower's warpgroup converts part t % 4 of rows t / 4 and t / 4 + 32 of the
// block: each the part's third full unit (dims 32 (part + 8) ..) and its half of units 12, 13,
// the same words into the same tile chunks as a dequant thread's high half (prefill_hopper_tile_words.cuh).
// Its rows come straight from the lists and the cache (index, then codes and scale bytes): the
// dequant's staged copies of them may be rewritten for a later block before the follower is done.
// With CAKE_HOPPER_FOLLOWER_HIGH=2 the follower loads the next pair's indices right after this
// pair's rows, at the top of each pair of an item (ConsumerRole::write_own_high_half), so a pair's
// top after the item's first waits for one global load, not two in a row.
#pragma once

#include <cstdint>

#include "../common/candidate_gather.cuh"
#include "../common/ptx_primitives.cuh"
#include "prefill_hopper_layout.h"
#include "prefill_hopper_tile_words.cuh"
#include "prefill_hopper_work.cuh"

namespace cake::cuda::hopper {

constexpr int kFollowerRowsPerThread = kBlockRows * kPartsPerRow / kWarpgroupThreads;  // 2
static_assert(kFollowerRowsPerThread * kHalfRows == kBlockRows, "row k of a thread is in the block's half k");

template <bool kSplitItems>
class FollowerHighHalf {
 public:
  explicit __device__ FollowerHighHalf(int thread) : row_(thread / kPartsPerRow), part_(thread % kPartsPerRow) {}

  // The cache slots of this thread's two rows of block `block` of item w (-1: masked, or past the
  // list's length), from the list.
  struct RowIndices {
    int32_t slot[kFollowerRowsPerThread];
  };
  __device__ __forceinline__ RowIndices load_indices(const DecodeParams& params, const WorkItem<kSplitItems>& w,
                                                     int block) const {
    RowIndices indices;
#pragma unroll
    for (int k = 0; k < kFollowerRowsPerThread; ++k) {
      const int32_t* address = block_row_index_address(params, w, block, k * kHalfRows, row_);
      indices.slot[k] = address != nullptr ? __ldg(address) : -1;
    }
    return indices;
  }

  // The codes and scale bytes of those rows' two row-parts (zeros for a masked row, whose tile
  // chunks then hold zeros as the dequant's do).
  __device__ __forceinline__ void load_rows(const DecodeParams& params, const WorkItem<kSplitItems>& w, int block,
                                            const RowIndices& indices) {
    const CandidateListParams& list = params.lists[w.in_main(block) ? 0 : 1];
#pragma unroll
    for (int k = 0; k < kFollowerRowsPerThread; ++k) {
      const CandidateRows row = candidate_rows_of_index(list, indices.slot[k]);
      const int unit = part_ + kPartsPerRow * kLowUnitsPerPart;
      unit_codes_[k] = row.valid ? ld_global_nc_16_no_l1(row.data + 16 * unit) : make_uint4(0, 0, 0, 0);
      half_codes_[k] = row.valid ? ld_global_nc_8_no_l1(row.data + kHalfUnitFirstByte + 8 * part_) : make_uint2(0, 0);
      const uint32_t scale_pair = row.valid ? __ldg(reinterpret_cast<const uint16_t*>(row.scale + 2 * unit)) : 0u;
      const uint32_t half_scale = row.valid ? __ldg(row.scale + kHalfUnitFirstScale + part_) : 0u;
      scales_[k] = scale_pair | (half_scale << 16);
    }
  }

  // Converts them into K tile `tile` (a shared-memory address): rows t / 4 + 32 k in the tile's
  // half k.
  __device__ __forceinline__ void store(uint32_t tile) const {
    const uint32_t unit_offset = unit_store_offset(row_, part_);
    const uint32_t tail_offset = tail_store_offset(row_, part_);
#pragma unroll
    for (int k = 0; k < kFollowerRowsPerThread; ++k) {
      const uint32_t half_tile = tile + k * kHalfTileBytes;
      store_unit_words(half_tile + unit_offset, unit_step(kLowUnitsPerPart), unit_codes_[k], uint16_t(scales_[k]));
      store_tail_words(half_tile + tail_offset, half_codes_[k], uint8_t(scales_[k] >> 16));
    }
  }

 private:
  const int row_;   // rows row_ and row_ + 32 of the block
  const int part_;  // the quarter of their dims (kFullUnitsPerPart units and a half unit)
  uint4 unit_codes_[kFollowerRowsPerThread];  // code unit part + 8 of each row
  uint2 half_codes_[kFollowerRowsPerThread];  // the part's half of units 12, 13
  uint32_t scales_[kFollowerRowsPerThread];   // the unit's two scale bytes, the half unit's byte << 16
};

}  // namespace cake::cuda::hopper
