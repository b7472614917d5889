// The accumulator warpgroups of the fused 64-head Hopper kernel. Accumulator p holds O[64 heads x
// K-tile positions 256 p .. 256 p + 255] (fp32, 128 registers a thread) and, for every chunk in
// the CTA's order, rescales it when a head's reference moved and adds P V (wgmma m64n128k16, P
// K-major from its tile, V the chunk's K tile read MN-major). At an item's end: the sums, the sink
// and the NaN rules (finalize_row), the LSE, and O stored from registers at the dims its
// positions hold. Beside that, accumulator 0 writes the row table four chunks ahead and
// accumulator 1 copies each chunk's RoPE dims into its K tile (they have issue slots to spare).
#pragma once

#include <cuda_bf16.h>

#include "../common/candidate_gather.cuh"
#include "../common/decode_params.h"
#include "../common/online_softmax.cuh"
#include "../common/prefill_epilogue.cuh"
#include "../common/ptx_primitives.cuh"
#include "../hopper/nvfp4_bit_decode.cuh"
#include "../hopper/sm90_primitives.cuh"
#include "fused_layout.h"
#include "fused_primitives.cuh"
#include "fused_work.cuh"

namespace cake::cuda::hopper_fused {

template <int kAccumulator>
class AccumulateRole {
  static constexpr bool kWritesTable = kAccumulator == 0;
  static constexpr bool kCopiesRope = kAccumulator == 1;

 public:
  __device__ AccumulateRole(const DecodeParams& params, SharedStorage& smem, int thread)
      : params_(params), smem_(smem), thread_(thread), warp_(thread / 32), lane_(thread % 32),
        head_((thread / 32) * 16 + (thread % 32) / 4) {}

  __device__ void run() {
    using namespace sm90;
    const int items = num_items(params_);
    if constexpr (kWritesTable) start_table(items);
    if constexpr (kCopiesRope) {
      copy_rope(0);
      copy_rope(1);
    }
    int g = 0;  // chunks so far over the CTA's walk
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
      const Unit u = work_unit<kHeads, false>(params_, item);
      reset();
      for (int chunk = 0; chunk < u.num_chunks; ++chunk, ++g) {
        const int c = g % 2;
        int32_t table_index = -1;
        if constexpr (kWritesTable) table_index = load_table_index(items, g + kTableSlots);
        mbarrier_wait<kWaitSuspendHintNs>(smem_address(&smem_.p_full[c]), (g >> 1) & 1);
        fence_proxy_async();  // the converter's stmatrix stores (K tile, P) are read by wgmma
        rescale(c);
        wgmma_fence();
        accumulate(c);
        wgmma_commit();
        wgmma_wait<0>();
        pin_registers(o_[0]);
        pin_registers(o_[1]);
        if (kWritesTable && chunk == u.num_chunks - 1) {
          row_max_[0] = smem_.reference[c][head_];
          row_max_[1] = smem_.reference[c][head_ + 8];
        }
        mbarrier_arrive(smem_address(&smem_.k_empty[c][kAccumulator]));
        if constexpr (kWritesTable) write_table_chunk(items, g + kTableSlots, table_index);
        if constexpr (kCopiesRope) copy_rope(g + 2);
      }
      finish_item(u);
    }
    // The table's scale rows of the chunks past the CTA's last (zero-fills) may still be landing.
    if constexpr (kWritesTable) cp_async_wait<0>();
  }

 private:
  const DecodeParams& params_;
  SharedStorage& smem_;
  const int thread_;
  const int warp_;
  const int lane_;
  const int head_;  // the rows of O this thread holds: heads head_ and head_ + 8
  float o_[2][64];  // positions 256 p + 128 half + 8 j + 2 (lane % 4) + e in o_[half][4 j + 2 r + e]
  // Accumulator 0: the item's sums of its two heads, and their references at the item's end.
  WeightSums sums_[2];
  float row_max_[2];

  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int i = 0; i < 64; ++i) o_[h][i] = 0.0f;
    }
    sums_[0] = sums_[1] = WeightSums{0.0f, 0.0f};
    row_max_[0] = row_max_[1] = -INFINITY;
  }

  // O's rows by their heads' factors (rare: a branch), and accumulator 0's sums: times the factor,
  // plus the chunk's (the converter's warps in order).
  __device__ __forceinline__ void rescale(int c) {
    const float f0 = smem_.rescale[c][head_], f1 = smem_.rescale[c][head_ + 8];
    if (__any_sync(0xffffffffu, f0 != 1.0f || f1 != 1.0f)) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          o_[h][4 * j] *= f0, o_[h][4 * j + 1] *= f0;
          o_[h][4 * j + 2] *= f1, o_[h][4 * j + 3] *= f1;
        }
      }
    }
    if constexpr (kWritesTable) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int head = head_ + 8 * r;
        WeightSums chunk = {0.0f, 0.0f};
#pragma unroll
        for (int w = 0; w < kWarpsPerWarpgroup; ++w) {
          chunk.rounded += smem_.rounded_sums[c][w][head];
          chunk.exact += smem_.exact_sums[c][w][head];
        }
        rescale_add(sums_[r].rounded, sums_[r].exact, r == 0 ? f0 : f1, chunk);
      }
    }
  }

  // O += P V over this accumulator's 256 positions: two m64n128k16 halves, 4 k-steps of 16 candidates.
  __device__ __forceinline__ void accumulate(int c) {
    using namespace sm90;
    const uint64_t p_desc = smem_descriptor(smem_address(smem_.p[c]), 16, 1024);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int kk = 0; kk < kPvKSteps; ++kk) {
        const uint32_t v = smem_address(smem_.k[c]) + (4 * kAccumulator + 2 * half) * kKColumnBlockBytes +
                           kk * 16 * kTileRowBytes;
#ifdef CAKE_FUSED_NO_PV  // development timing only: wrong results
        (void)v;
        (void)p_desc;
#else
        wgmma_m64n128k16_ss_bt(o_[half], p_desc + ((kk * 32) >> 4), smem_descriptor(v, kKColumnBlockBytes, 1024), true);
#endif
      }
    }
  }

  // ---- the row table (accumulator 0): threads 0..63 a row each; thread 0 also the chunk's info
  // and the cursor, in shared memory (two copies by chunk parity), moved once a chunk.
  __device__ void start_table(int items) {
    if (thread_ == 0) {
      ChunkCursor& cursor = smem_.cursor[0];
      cursor.ordinal = 0;
      seek_item(params_, items, cursor, blockIdx.x);
    }
    named_barrier<kTableCursorMoved, kWarpgroupThreads>();
    for (int c = 0; c < kTableSlots; ++c) write_table_chunk(items, c, load_table_index(items, c));
  }
  __device__ __forceinline__ int32_t load_table_index(int items, int c) const {
    return thread_ < kChunkRows ? chunk_row_index(params_, items, smem_.cursor[c & 1], thread_) : -1;
  }
  // Chunk c's entries (its slot's previous chunk, c - 4, is done: PV of it retired, which waited for
  // both its converter's reads and accumulator 1's copies), then the cursor moved to chunk c + 1.
  __device__ void write_table_chunk(int items, int c, int32_t index) {
    const ChunkCursor cursor = smem_.cursor[c & 1];
    const int slot = c % kTableSlots;
    if (thread_ < kChunkRows) {
      const CandidateRows rows = chunk_rows(params_, items, cursor, index);
      const uint32_t dst = smem_address(smem_.scale_rows[slot][thread_]);
      const uint8_t* src = rows.valid ? rows.scale : rows.data;
      cp_async_16(dst, src, rows.valid);
      cp_async_16(dst + 16, rows.valid ? src + 16 : src, rows.valid);
      sm90::cp_async_arrive_noinc(smem_address(&smem_.scales_full[slot]));
      smem_.rows[slot][thread_] = row_entry(rows);
      if (thread_ == 0) smem_.info[slot] = chunk_info(items, cursor);
      sm90::mbarrier_arrive(smem_address(&smem_.table_full[slot]));
    }
    if (thread_ == 0) {
      ChunkCursor next = cursor;
      advance(params_, items, next);
      smem_.cursor[(c + 1) & 1] = next;
    }
    named_barrier<kTableCursorMoved, kWarpgroupThreads>();
  }

  // ---- the RoPE dims (accumulator 1): chunk a's 64 rows x 128 bytes into K tile a % 2's RoPE
  // column block as they are (zeros for masked rows), a row a thread (threads 0..63), arriving on
  // rope_full when they land. Called once PV of chunk a - 2 (same tile) has retired.
  __device__ void copy_rope(int a) {
    if (thread_ >= kChunkRows) return;
    const int slot = a % kTableSlots;
    sm90::mbarrier_wait<kWaitSuspendHintNs>(smem_address(&smem_.table_full[slot]), (a / kTableSlots) & 1);
    if (smem_.info[slot].item < 0) return;  // past the CTA's chunks
    const RowEntry e = smem_.rows[slot][thread_];
    const bool valid = entry_valid(e);
    const uint8_t* src = entry_data(e) + nvfp4::kNopeBytes;
    const uint32_t dst = smem_address(smem_.k[a % 2]) + kRopeColumnBlock * kKColumnBlockBytes + thread_ * kTileRowBytes;
#pragma unroll
    for (int k = 0; k < nvfp4::kRopeBytes / 16; ++k) {
      cp_async_16(dst + ((k ^ (thread_ % 8)) * 16), valid ? src + 16 * k : src, valid);
    }
    sm90::cp_async_arrive_noinc(smem_address(&smem_.rope_full[a % 2]));
  }

  // O's value at NoPE K-tile chunk `chunk` (of this accumulator's 32), column 2 q + e, row r.
  __device__ __forceinline__ float o_at(int chunk, int e, int r) const {
    return o_[chunk / 16][4 * (chunk % 16) + 2 * r + e];
  }
  // O normalised, from registers to the output in bf16. The NoPE dims: the thread holds, of each
  // code word w of its groups (8 dims), all 8 (its K-tile chunks 32 p + 2 s + hi, s = 4 i + 2 b + t
  // of the word, columns 2 q + e: dim 8 w + 2 t + hi + 4 e), so a word is one 16-byte store where
  // the output is 16-byte aligned (4 stores of adjacent pairs otherwise). The RoPE dims (chunks
  // 56 .., accumulator 1): columns 2 q, 2 q + 1 are adjacent dims, one 4-byte store.
  __device__ __forceinline__ void store_output(const Unit& u, const float (&scale)[2]) {
    const int quad = lane_ % 4;
    const bool aligned = (reinterpret_cast<uintptr_t>(params_.output) & 15u) == 0;
    constexpr int kSlots = hopper_small::group_slots(kAccumulator);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      __nv_bfloat16* out = output_row(params_, u.token, u.head0 + head_ + 8 * r);
      // PV took V as the converters wrote it: 2^-9 times the cache's values in the NoPE dims.
      const float nope_scale = scale[r] * hopper::kBitDecodeUnscale;
#pragma unroll
      for (int i = 0; i < kSlots; ++i) {
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          const int word = 2 * hopper_small::slot_group(kAccumulator, quad, i) + b;
          float v[8];
#pragma unroll
          for (int t = 0; t < 2; ++t) {
#pragma unroll
            for (int hi = 0; hi < 2; ++hi) {
              const int chunk = 2 * (4 * i + 2 * b + t) + hi;
#pragma unroll
              for (int e = 0; e < 2; ++e) v[2 * t + hi + 4 * e] = o_at(chunk, e, r) * nope_scale;
            }
          }
          const uint32_t pairs[4] = {pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]),
                                     pack_bf16x2(v[6], v[7])};
          if (aligned) {
            st_global_16(out + 8 * word, pairs);
          } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) *reinterpret_cast<uint32_t*>(out + 8 * word + 2 * k) = pairs[k];
          }
        }
      }
      if constexpr (kAccumulator == 1) {
#pragma unroll
        for (int k = 0; k < nvfp4::kRopeDim / 8; ++k) {
          const int chunk = 8 * kRopeColumnBlock - 32 + k;  // this accumulator's chunks start at 32
          *reinterpret_cast<uint32_t*>(out + nvfp4::kNopeDim + 8 * k + 2 * quad) =
              pack_bf16x2(o_at(chunk, 0, r) * scale[r], o_at(chunk, 1, r) * scale[r]);
        }
      }
    }
  }

  // ---- the item's end
  __device__ void finish_item(const Unit& u) {
    using namespace sm90;
    const int quad = lane_ % 4;
    if constexpr (kWritesTable) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int head = head_ + 8 * r;
        const SoftmaxFinal final = finalize_row(params_, u.head0 + head, row_max_[r], sums_[r]);
        if (quad == 0) {
          store_lse(params_, u.token, u.head0 + head, final.lse2);
          smem_.out_scale[head] = final.out_scale;
        }
      }
    }
    named_barrier<kAccumulatorScales, kAccumulators * kWarpgroupThreads>();
    const float scale[2] = {smem_.out_scale[head_], smem_.out_scale[head_ + 8]};
#ifndef CAKE_FUSED_NO_STORES  // development timing only: no output
    store_output(u, scale);
#endif
    named_barrier<kAccumulatorScales, kAccumulators * kWarpgroupThreads>();  // scales read before the next item's
  }
};

}  // namespace cake::cuda::hopper_fused
