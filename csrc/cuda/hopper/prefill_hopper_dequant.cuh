// The dequant warpgroups of the Hopper prefill: gather the candidate rows of a block straight
// into registers, convert NVFP4 -> bf16 and write the block's K tile (which is also V), a quarter
// of the tile at a time as the consumers free it. Warpgroup d (0 or 1) serves block 2 p + d of
// every pair p, into K tile d; two threads per candidate row. They also load each item's Q.
#pragma once

#include "../common/candidate_gather.cuh"
#include "../common/nvfp4_dequant.cuh"
#include "../common/ptx_primitives.cuh"
#include "nvfp4_bit_decode.cuh"
#include "prefill_hopper_layout.h"
#include "prefill_hopper_work.cuh"
#include "sm90_primitives.cuh"

namespace cake::cuda::hopper {

// 16 bytes from global memory through the read-only path, not kept in L1 (each row is read once).
__device__ __forceinline__ uint4 ld_global_nc_16(const void* pointer) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(pointer));
  return v;
}

// The CTA's pairs in order, over its items with candidates.
struct PairCursor {
  int item;  // >= the item count: past the end
  int pair;
  WorkItem w;
};

class DequantRole {
 public:
  __device__ DequantRole(const PrefillParams& params, SharedStorage& smem, int warpgroup, int thread)
      : params_(params), smem_(smem), warpgroup_(warpgroup), thread_(thread), row_(thread / 2), side_(thread % 2),
        num_items_(params.num_tokens * params.num_head_blocks) {}

  // A software pipeline over the CTA's pairs. During pair p this thread converts pair p's row
  // (codes in registers, scales in shared memory) quarter by quarter as the consumers free the
  // tile, loads pair p + 1's codes into the registers each quarter frees, copies pair p + 1's
  // scales and loads pair p + 2's index: every load has a whole pair to land.
  __device__ void run() {
    PairCursor cursor;
    seek_item(cursor, blockIdx.x);
    if (cursor.item >= num_items_) return;
    const uint32_t tile = smem_address(smem_.k[warpgroup_]);
    int q_items = 0;  // items with candidates so far: the phase of q_full / q_empty
    RowSource source = row_source(cursor.w, 2 * cursor.pair + warpgroup_, cursor_index(cursor));
    load_units<0, kUnitsPerThread>(source);
    copy_scales(source, 0);
    cp_async_commit();
    load_q(cursor.w, q_items++);
    cp_async_commit();
    cp_async_commit();  // the loop expects two groups after each pair's scales
    PairCursor next = cursor;
    advance(next);
    int32_t next_index = cursor_index(next);
    for (int gpair = 0;; ++gpair) {  // pairs over all of this CTA's items: the quarter barriers' phase
      // This pair's scales (copied a pair ago by both threads of the row) are complete: every
      // group is but the two committed since (the last pair's RoPE copies and an item's Q).
      cp_async_wait<2>();
      __syncwarp();
      const bool has_next = next.item < num_items_;
      const RowSource next_source = has_next ? row_source(next.w, 2 * next.pair + warpgroup_, next_index)
                                             : RowSource{params_.lists[0].cache, params_.lists[0].cache, false};
      copy_scales(next_source, gpair + 1);  // into the stage pair - 1 used
      cp_async_commit();
      PairCursor after_next = next;
      if (has_next) advance(after_next);
      const int32_t after_next_index = has_next ? cursor_index(after_next) : -1;

      wait_quarter_free<fill_order(0)>(gpair);
      if (side_ == 0) smem_.valid[warpgroup_][row_] = source.valid;
      fill_quarter<fill_order(0)>(tile, source, next_source, gpair);
      wait_quarter_free<fill_order(1)>(gpair);
      fill_quarter<fill_order(1)>(tile, source, next_source, gpair);
      cp_async_commit();  // the RoPE copies
      wait_quarter_free<fill_order(2)>(gpair);
      fill_quarter<fill_order(2)>(tile, source, next_source, gpair);
      wait_quarter_free<fill_order(3)>(gpair);
      fill_quarter<fill_order(3)>(tile, source, next_source, gpair);
      if (has_next && next.pair == 0) load_q(next.w, q_items++);
      cp_async_commit();
      if (!has_next) break;
      next = after_next;
      next_index = after_next_index;
      source = next_source;
    }
    cp_async_wait<0>();  // nothing in flight at exit
  }

 private:
  // Where this thread's candidate row of one block comes from.
  struct RowSource {
    const uint8_t* data_row;   // the list's cache base when masked (a readable address; nothing is read)
    const uint8_t* scale_row;
    bool valid;
  };

  const PrefillParams& params_;
  SharedStorage& smem_;
  const int warpgroup_;  // 0 or 1: the block of each pair it serves, and the K tile it writes
  const int thread_;     // 0..127
  const int row_;        // candidate row of the block
  const int side_;       // which of the row's two threads: units side, side + 2, ...
  const int num_items_;
  uint4 codes_[kUnitsPerThread];  // the row's codes of one block, waiting for their quarters

  __device__ __forceinline__ void seek_item(PairCursor& cursor, int item) const {
    for (; item < num_items_; item += gridDim.x) {
      cursor.w = work_item(params_, item);
      if (cursor.w.num_blocks > 0) break;
    }
    cursor.item = item;
    cursor.pair = 0;
  }
  __device__ __forceinline__ void advance(PairCursor& cursor) const {
    if (++cursor.pair == cursor.w.num_pairs()) seek_item(cursor, cursor.item + gridDim.x);
  }

  // The raw index of this thread's row in the cursor's block (-1 past the list's length or the
  // CTA's pairs). Range-checked later, in row_source, so the load's latency hides behind a pair.
  __device__ __forceinline__ int32_t cursor_index(const PairCursor& cursor) const {
    if (cursor.item >= num_items_) return -1;
    const WorkItem& w = cursor.w;
    const int block = 2 * cursor.pair + warpgroup_;
    if (block >= w.num_blocks) return -1;
    const bool in_main = block < w.blocks0;
    const CandidateListParams& list = params_.lists[in_main ? 0 : 1];
    const int position = (in_main ? block : block - w.blocks0) * kBlockRows + row_;
    if (position >= (in_main ? w.length0 : w.length1)) return -1;
    return __ldg(list.indices + int64_t(w.token) * list.width + position);
  }

  __device__ __forceinline__ RowSource row_source(const WorkItem& w, int block, int32_t index) const {
    const CandidateListParams& list = params_.lists[block < w.blocks0 || block >= w.num_blocks ? 0 : 1];
    const int64_t slot = index >= 0 && index < list.num_slots ? index : -1;
    const CandidateRows rows = candidate_rows(list, slot);
    return rows.valid ? RowSource{rows.data, rows.scale, true} : RowSource{list.cache, list.cache, false};
  }

  template <int kFirst, int kEnd>
  __device__ __forceinline__ void load_units(const RowSource& source) {
#pragma unroll
    for (int j = kFirst; j < kEnd; ++j) {
      codes_[j] = source.valid ? ld_global_nc_16(source.data_row + 16 * (side_ + 2 * j)) : make_uint4(0, 0, 0, 0);
    }
  }

  // The row's 32-byte scale row into stage `gpair` % 2, 16 bytes by each of the row's threads.
  __device__ __forceinline__ void copy_scales(const RowSource& source, int gpair) {
    const uint32_t stage = smem_address(smem_.scales[gpair % 2][warpgroup_][row_]) + 16 * side_;
    cp_async_16(stage, source.valid ? source.scale_row + 16 * side_ : source.data_row, source.valid);
  }

  // The item's Q into the Q tile, once both consumers are done with the previous item's Q. The
  // copies arrive on q_full themselves, so this thread does not wait for them.
  __device__ void load_q(const WorkItem& w, int q_items) {
    if (q_items > 0) sm90::mbarrier_wait(smem_address(&smem_.q_empty), (q_items - 1) & 1);
    const __nv_bfloat16* q_block = params_.q + (int64_t(w.token) * params_.num_heads + w.head0) * nvfp4::kHeadDim;
    const uint32_t q_tile = smem_address(smem_.q);
    constexpr int kChunksPerRow = nvfp4::kHeadDim / 8;
#pragma unroll 4
    for (int unit = warpgroup_ * kWarpgroupThreads + thread_; unit < kHeads * kChunksPerRow;
         unit += kDequantThreads) {
      const int q_row = unit / kChunksPerRow;
      const int chunk = unit % kChunksPerRow;
      cp_async_16(q_tile + swizzled_chunk_offset(q_row, chunk), q_block + q_row * nvfp4::kHeadDim + chunk * 8, true);
    }
    sm90::cp_async_arrive_noinc(smem_address(&smem_.q_full));
  }

  // Converts code unit j (two groups: 32 dims from 32 u, u = side + 2 j) into the K tile.
  __device__ __forceinline__ void convert_unit(uint32_t tile, const uint4& codes, uint32_t scale_pair, int j) {
    const int unit = side_ + 2 * j;
    const uint32_t scale_low = e4m3_to_bf16x2(uint8_t(scale_pair & 0xFFu));
    const uint32_t scale_high = e4m3_to_bf16x2(uint8_t((scale_pair >> 8) & 0xFFu));
    const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      uint32_t out[4];
      e2m1x8_to_bf16x8(words[c], c < 2 ? scale_low : scale_high, out);
      sm90::st_shared_16(tile + swizzled_chunk_offset(row_, 4 * unit + c), out[0], out[1], out[2], out[3]);
    }
  }

  template <int kQuarter>
  __device__ __forceinline__ void wait_quarter_free(int gpair) {
    if (gpair > 0) sm90::mbarrier_wait(smem_address(&smem_.quarter_empty[kQuarter]), (gpair - 1) & 1);
  }

  // Writes quarter kQuarter of this warpgroup's tile from the registers (the caller waited until
  // no consumer reads it), hands it over on quarter_full, and refills the registers it freed with
  // the next pair's row.
  template <int kQuarter>
  __device__ __forceinline__ void fill_quarter(uint32_t tile, const RowSource& source, const RowSource& next,
                                               int gpair) {
    if (kQuarter == 3) {
      // The RoPE dims are bf16 already: copied straight into the tile (zero-filled when masked).
#pragma unroll
      for (int k = 0; k < kRopeChunks / 2; ++k) {
        const int part = side_ + 2 * k;
        cp_async_16(tile + swizzled_chunk_offset(row_, kRopeFirstChunk + part),
                    source.data_row + (source.valid ? nvfp4::kNopeBytes + 16 * part : 0), source.valid);
      }
      sm90::cp_async_arrive_noinc(smem_address(&smem_.rope_full));
    }
    const uint32_t* scale_words = reinterpret_cast<const uint32_t*>(smem_.scales[gpair % 2][warpgroup_][row_]);
#pragma unroll
    for (int j = first_unit(kQuarter); j < end_unit(kQuarter); ++j) {
      // Unit j's scales are bytes 2u, 2u + 1 of the scale row (u = side + 2 j): half `side` of word j.
      convert_unit(tile, codes_[j], scale_words[j] >> (16 * side_), j);
    }
    // No proxy fence here: it would wait for the next pair's loads in flight. The consumers fence
    // after they observe quarter_full, before their wgmma (the async proxy) reads the tile.
    sm90::mbarrier_arrive(smem_address(&smem_.quarter_full[kQuarter]));
    load_units<first_unit(kQuarter), end_unit(kQuarter)>(next);
  }
};

}  // namespace cake::cuda::hopper
