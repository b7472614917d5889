// The attend warpgroup of the small-heads Hopper prefill. For each chunk it runs the chunk softmax
// (prefill_small_softmax.cuh) over the unit's heads, and accumulates O^T[512 dims x heads] +=
// V^T P^T with wgmma (V^T = the chunk's K tile read MN-major, one m-tile of 64 dims per column
// block). At the end of a unit it folds in the sink and the NaN rules and stores the LSE and the
// output, O^T straight from its registers; a decode's split unit of several splits stores its
// partial instead (O normalised over the split in fp32 and the split's LSE, into the scratch; the
// merge adds the sink).
//
// The O^T accumulators follow the wgmma D fragment (thread (warp w, lane): dims rows 16 w + lane /
// 4 (+ 8) of each m-tile, heads 8 n + 2 (lane % 4) (+ 1)); the softmax has its own thread layout,
// so per-head factors cross from one to the other through shared memory.
#pragma once

#include <cuda_bf16.h>

#include "../common/prefill_epilogue.cuh"
#include "../common/decode_params.h"
#include "../common/ptx_primitives.cuh"
#include "../common/split_epilogue.cuh"
#include "../hopper/nvfp4_bit_decode.cuh"
#include "../hopper/sm90_primitives.cuh"
#include "prefill_small_layout.h"
#include "prefill_small_softmax.cuh"
#include "prefill_small_trace.cuh"
#include "prefill_small_work.cuh"
#include "sm90_small_primitives.cuh"

namespace cake::cuda::hopper_small {

// CAKE_SMALL_NO_PV: an ablation build (timing and traces only: O stays zero) whose attend
// warpgroup issues no PV, to see what PV's shared-memory and tensor traffic costs the converters
// that convert beside it.
#ifdef CAKE_SMALL_NO_PV
constexpr bool kNoPv = true;
#else
constexpr bool kNoPv = false;
#endif

template <int kGroupHeads, bool kSplitItems, UnitEnd kEnd, bool kShortSplits>
class AttendRole {
  using G = Geometry<kGroupHeads>;
  static constexpr bool kWritesTable = UnitForm<kGroupHeads, kShortSplits>::kAttendWritesTable;

 public:
  __device__ AttendRole(const DecodeParams& params, SharedStorage<kGroupHeads, kSplitItems>& smem, int thread)
      : params_(params), smem_(smem), warp_(thread / 32), lane_(thread % 32),
        softmax_(params, smem, thread) {}

  __device__ void run() {
    using namespace sm90;
    const int num_units = num_work_units<kSplitItems>(params_);
    int gchunk = 0;  // chunks so far over this CTA's units: the phase of the chunk barriers
    if constexpr (kWritesTable) start_row_table(num_units);
    for (int unit = blockIdx.x; unit < num_units; unit += gridDim.x) {
      const Unit<kSplitItems> u = work_unit<kGroupHeads, kSplitItems, false>(params_, unit);
      reset();
      for (int chunk = 0; chunk < u.num_chunks; ++chunk, ++gchunk) {
        const int parity = gchunk & 1;
        trace_event(0, 0, gchunk);
        mbarrier_wait(smem_address(&smem_.k_full[parity]), (gchunk >> 1) & 1);
        trace_event(0, 1, gchunk);
        // The converters wrote the K tile with generic-proxy stores (stmatrix); this thread saw
        // them complete through the mbarrier, and its wgmma reads the tile through the async proxy.
        fence_proxy_async();
        bool moved = softmax_.run(parity);
        mbarrier_arrive(smem_address(&smem_.s_empty[gchunk % G::kSBuffers]));
        trace_event(0, 2, gchunk);
        fence_proxy_async();  // P is read by wgmma
        moved = named_barrier_or<kPReady, kWarpgroupThreads>(moved);
        trace_event_past_barrier(0, 3, gchunk);
        // The row index of the table's next chunk, loaded here so that its latency passes under
        // this chunk's PV (the entry is written at the chunk's end).
        int32_t table_index = -1;
        if constexpr (kWritesTable) table_index = load_table_index(num_units, gchunk + kTableSlots);
        if (moved) rescale_output(parity);  // rare: a branch, not predication
        wgmma_fence();
        if constexpr (!kNoPv) accumulate(parity);
        wgmma_commit();
        trace_event(0, 4, gchunk);
        wgmma_wait<0>();
#pragma unroll
        for (int t = 0; t < kPvMTiles; ++t) pin_registers(o_acc_[t]);
        mbarrier_arrive(smem_address(&smem_.k_empty[parity]));
        trace_event(0, 5, gchunk);
        // The converters have read this chunk's row entries (a chunk before converting it): its
        // slot takes the chunk four ahead.
        if constexpr (kWritesTable) write_table_chunk(num_units, gchunk + kTableSlots, table_index);
        trace_event(0, 6, gchunk);
      }
      if (unit == int(blockIdx.x)) trace_life(0, kLifeFirstEpilogue);
      finish_unit(u);
    }
  }

 private:
  // The row table at 16 heads a unit (kWritesTable): threads 0..63 write a chunk's 64 row
  // entries, one each (the index loaded here, while this warpgroup waits for the converters anyway);
  // thread 0 moves the shared cursor into its other copy. The first four chunks here; then chunk a + 4 at the end of
  // chunk a, the cursor copies ordered by the kPReady barrier every chunk passes.
  __device__ void start_row_table(int num_units) {
    if (warp_ == 0 && lane_ == 0) seek_unit<kGroupHeads>(params_, num_units, smem_.table.cursor[0], blockIdx.x);
    named_barrier<kTableCursorMoved, kWarpgroupThreads>();
    for (int c = 0; c < kTableSlots; ++c) {
      write_table_chunk(num_units, c, load_table_index(num_units, c));
      named_barrier<kTableCursorMoved, kWarpgroupThreads>();
    }
  }
  // The raw index of this thread's row of chunk c (threads 0..63; the cursor copy c % 2 is at
  // chunk c: thread 0 moved it there at the end of chunk c - 1's entries, before the kPReady
  // barrier, or the start's kTableCursorMoved, that every caller has passed since).
  __device__ __forceinline__ int32_t load_table_index(int num_units, int c) const {
    const int t = warp_ * 32 + lane_;
    return t < kChunkRows ? chunk_row_index(params_, num_units, smem_.table.cursor[c & 1], t) : -1;
  }
  // Chunk c's entries from their indices (load_table_index), then the cursor moved to chunk c + 1.
  __device__ __forceinline__ void write_table_chunk(int num_units, int c, int32_t index) {
    const int t = warp_ * 32 + lane_;
    const ChunkCursor<kSplitItems> cursor = smem_.table.cursor[c & 1];
    if (t < kChunkRows) publish_row_entry(smem_, c, t, table_row_entry(params_, num_units, cursor, index));
    if (t == 0) {
      ChunkCursor<kSplitItems> next = cursor;
      advance_or_stay<kGroupHeads>(params_, num_units, next);
      smem_.table.cursor[(c + 1) & 1] = next;
    }
  }

  const DecodeParams& params_;
  SharedStorage<kGroupHeads, kSplitItems>& smem_;
  const int warp_;
  const int lane_;
  float o_acc_[kPvMTiles][G::kSAccumulators];  // O^T: m-tile t holds dims of K-tile column block t
  ChunkSoftmax<kGroupHeads, kSplitItems, kEnd> softmax_;

  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int t = 0; t < kPvMTiles; ++t) {
#pragma unroll
      for (int i = 0; i < G::kSAccumulators; ++i) o_acc_[t][i] = 0.0f;
    }
    softmax_.reset();
  }

  // Multiplies O^T by each head's factor (columns 8 n + 2 (lane % 4) + e of every m-tile).
  __device__ __forceinline__ void rescale_output(int parity) {
#pragma unroll
    for (int n = 0; n < G::kHeadBlocks; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float factor = smem_.rescale[parity][8 * n + 2 * (lane_ % 4) + e];
#pragma unroll
        for (int t = 0; t < kPvMTiles; ++t) {
          o_acc_[t][4 * n + e] *= factor;
          o_acc_[t][4 * n + 2 + e] *= factor;
        }
      }
    }
  }

  // O^T[64 dims of m-tile t x heads] += V^T[those dims x 64 candidates] P^T[64 candidates x heads]:
  // A = K tile column block t, MN-major (dims contiguous), k-step s = candidate rows 16 s ..; B = P^T,
  // K-major. The k-step loop is outside, so consecutive wgmmas write different accumulators. The
  // descriptors are the tiles' plus a constant (the start address is their low bits, in 16-byte
  // units): one uniform add a wgmma rather than the whole descriptor.
  __device__ __forceinline__ void accumulate(int parity) {
    using namespace sm90;
    const uint64_t v_desc = smem_descriptor(smem_address(smem_.k[parity]), kKColumnBlockBytes, 1024);
    const uint64_t p_desc = smem_descriptor(smem_address(smem_.p[parity]), 16, 1024);
#pragma unroll
    for (int s = 0; s < kPvKSteps; ++s) {
#pragma unroll
      for (int t = 0; t < kPvMTiles; ++t) {
        const uint32_t v_offset = t * kKColumnBlockBytes + s * 16 * kTileRowBytes;
        wgmma_ss_ta<kGroupHeads>(o_acc_[t], v_desc + (v_offset >> 4), p_desc + ((s * 32) >> 4));
      }
    }
  }

  // Epilogue of a unit: the softmax's end for this warpgroup's heads (LSEs stored, output scales
  // written); then O^T normalised and stored from registers. A prefill unit's heads are all real
  // (G divides the heads the launch runs), so no store reaches past them; a decode's split unit
  // stores its partial (or, with one split, its output) and nothing for the padding heads past
  // the call's last (real_head). (Why
  // not through a staging tile and TMA stores, measured: docs/hopper_small_kernel.md, "The unit
  // epilogue".)
  __device__ void finish_unit(const Unit<kSplitItems>& u) {
    softmax_.finish(u);
    // PV took V as the converters wrote it: 2^-9 times the cache's values in the NoPE dims
    // (nvfp4_bit_decode.cuh), the RoPE dims (m-tile kRopeMTile) as stored. Those are scaled down to
    // match, so that one scale a head (out_scale, times 2^9) serves every dim; powers of two, exact.
#pragma unroll
    for (int j = 0; j < G::kSAccumulators; ++j) o_acc_[kRopeMTile][j] *= 1.0f / hopper::kBitDecodeUnscale;
    named_barrier<kScalesReady, kWarpgroupThreads>();
    if constexpr (kEnd == UnitEnd::kPartial) {
      store_partial(u);
    } else {
      store_output(u);
    }
    // All read the scales before the next unit rewrites them.
    named_barrier<kScalesReady, kWarpgroupThreads>();
  }

  // This thread's pair of adjacent output dims of m-tile t for head 8 n + 2 (lane % 4) + e, scaled
  // (the RoPE m-tile's after the swap with the other column's lane: every lane takes part).
  __device__ __forceinline__ float2 output_pair(int t, int n, int e, float scale, bool odd_column) const {
    const float low = o_acc_[t][4 * n + e] * scale, high = o_acc_[t][4 * n + 2 + e] * scale;
    return t < kRopeMTile ? make_float2(low, high) : rope_pair(low, high, odd_column);
  }

  // A head's RoPE values: this lane holds dims d, d + 2 (d of an even column) or d + 1, d + 3 (odd
  // column), the lane of the other column of the pair (lane ^ 4) the other two. Each gives the
  // one the other needs; returns the pair d, d + 1 (even column) or d + 2, d + 3 (odd).
  static __device__ __forceinline__ float2 rope_pair(float row0, float row1, bool odd_column) {
    const float given = odd_column ? row0 : row1;
    const float taken = __shfl_xor_sync(0xffffffffu, given, 4);
    return odd_column ? make_float2(taken, row1) : make_float2(row0, taken);
  }

  // Calls store(head, dim, pair) for each head 8 n + 2 (lane % 4) + e of this thread and each m-tile
  // t, with the pair of adjacent output dims from `dim` (the RoPE pairs after the swap of one value
  // with the lane of the other column). Every pair starts at an even dim.
  template <typename Store>
  __device__ __forceinline__ void for_each_output_pair(Store&& store) const {
    const int column = lane_ / 4, quad = lane_ % 4;
    const bool odd_column = (column & 1) != 0;
    const int nope_dim = nope_pair_dim(warp_, column);
    const int rope_dim = 64 * kRopeMTile + rope_pair_dim(warp_, column);
#pragma unroll
    for (int n = 0; n < G::kHeadBlocks; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int head = 8 * n + 2 * quad + e;
        const float scale = smem_.out_scale[head];
#pragma unroll
        for (int t = 0; t < kPvMTiles; ++t) {
          const int dim = t < kRopeMTile ? 64 * t + nope_dim : rope_dim;
          store(head, dim, output_pair(t, n, e, scale, odd_column));
        }
      }
    }
  }

  // O^T normalised, from registers to the output in bf16, 4 bytes a store: aligned for any output
  // view the op accepts (4-byte aligned). A warp instruction writes 8 column pairs of 4 heads; none
  // for the split instance's padding heads.
  __device__ __forceinline__ void store_output(const Unit<kSplitItems>& u) {
    for_each_output_pair([&](int head, int dim, float2 pair) {
      if (kSplitItems && !real_head(params_, u.head0 + head)) return;
      __nv_bfloat16* out = output_row(params_, u.token, u.head0 + head);
      *reinterpret_cast<uint32_t*>(out + dim) = pack_bf16x2(pair.x, pair.y);
    });
  }

  // A split's partial, O^T normalised over the split, from registers to its fp32 row of the scratch,
  // 8 bytes a store (mid_out is 16-byte aligned); none for the padding heads (their lanes still take
  // part in the RoPE swaps).
  __device__ __forceinline__ void store_partial(const Unit<kSplitItems>& u) {
    for_each_output_pair([&](int head, int dim, float2 pair) {
      if (real_head(params_, u.head0 + head)) {
        *reinterpret_cast<float2*>(split_output_row(params_, u.split, u.token, u.head0 + head) + dim) = pair;
      }
    });
  }
};

}  // namespace cake::cuda::hopper_small
