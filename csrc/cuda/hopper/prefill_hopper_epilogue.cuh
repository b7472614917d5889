// The item's end in a Hopper prefill consumer warpgroup: both consumers' row sums exchanged, the
// row epilogue (sink, normalisation, LSE; or a split's partial and its LSE), and O out: through
// the item's last K tile by TMA stores, from registers, or (split items) in fp32 through the Q
// tile. The pairs of blocks before it: prefill_hopper_consumer.cuh.
#pragma once

#include <cuda_bf16.h>

#include "../common/online_softmax.cuh"
#include "../common/prefill_epilogue.cuh"
#include "../common/ptx_primitives.cuh"
#include "../common/split_epilogue.cuh"
#include "nvfp4_bit_decode.cuh"
#include "prefill_hopper_consumer_state.cuh"
#include "prefill_hopper_layout.h"
#include "prefill_hopper_params.h"
#include "prefill_hopper_trace.cuh"
#include "prefill_hopper_work.cuh"
#include "sm90_primitives.cuh"

namespace cake::cuda::hopper {

template <bool kSplitItems>
class ConsumerEpilogue : public ConsumerState<kSplitItems> {
 protected:
  using State = ConsumerState<kSplitItems>;
  using State::State;
  using State::consumer_;
  using State::copies_thread;
  using State::lane_;
  using State::load_q_half;
  using State::o_acc_;
  using State::params_;
  using State::pv_quarter;
  using State::reference_;
  using State::release_half;
  using State::row0_;
  using State::smem_;
  using State::sums_;
#if defined(CAKE_HOPPER_MMA_ROW_SUMS)
  using State::rounded_sums_;
#endif

  // The output scales of a row whose softmax gives it `row_scale`: PV took V as the dequant wrote
  // it, 2^-9 times the cache's values in the NoPE dims and the RoPE dims (448..) as they are. The
  // RoPE dims are consumer 1's accumulator groups 24..31 (o_dim), so a group's scale is one of two
  // per row, chosen at compile time but for the consumer.
  struct GroupScales {
    float nope;  // groups 0..23, and 24..31 of consumer 0
    float last;  // groups 24..31
  };
  static constexpr int kLastGroups = 24;
  __device__ __forceinline__ GroupScales group_scales(float row_scale) const {
    const float nope = row_scale * kBitDecodeUnscale;
    return {nope, consumer_ == 1 ? row_scale : nope};
  }
  static __device__ __forceinline__ float group_scale(const GroupScales& scales, int i) {
    return i >= kLastGroups ? scales.last : scales.nope;
  }

  // The output dim of accumulator column block i (o_acc[4 i ..], 8 columns).
  __device__ __forceinline__ int o_dim(int i) const { return 128 * pv_quarter(i / 16) + 8 * (i % 16); }
  static_assert(128 * (2 * 1 + 24 / 16) + 8 * (24 % 16) == nvfp4::kNopeDim, "consumer 1's group 24 is the first RoPE dim");

  // Row r of this consumer's O (256 dims, scaled by out_scale) in bf16 to `out_row` (16-byte
  // aligned: an item without candidates; the others go out through a K tile), 16 bytes a lane:
  // for each 4 groups of 8 dims (32 contiguous dims, o_dim), the quad transposes its words so
  // that lane q holds group q whole. A warp instruction writes 64 contiguous bytes of each of 8
  // rows: whole sectors. Every lane takes part in the transposes; `store` says whether the row is
  // an output row.
  __device__ __forceinline__ void store_output_row(__nv_bfloat16* out_row, int r, float out_scale, bool store) {
    const int q = lane_ % 4;
    const GroupScales scales = group_scales(out_scale);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      uint32_t word[4];
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int i = 4 * j + t;
        const float scale = group_scale(scales, i);
        word[t] = pack_bf16x2(o_acc_[4 * i + 2 * r] * scale, o_acc_[4 * i + 2 * r + 1] * scale);
      }
      quad_transpose(word, lane_);
      if (store) st_global_16(out_row + o_dim(4 * j) + 8 * q, word);
    }
  }

  // This consumer's O (64 rows x its 256 dims, scaled by out_scale, in bf16) into its half of K
  // tile `parity` (column blocks 4 c .. 4 c + 3: the half its PV read), in the tile's swizzled
  // layout, by stmatrix from the accumulator fragments as ConsumerRole::write_weights does
  // (accumulator groups 2 k, 2 k + 1 per instruction). A padded last head block's rows are
  // written too: the TMA store does not write rows past num_heads.
  __device__ __forceinline__ void stage_output_half(int parity, const float (&out_scale)[2]) {
    const GroupScales scales[2] = {group_scales(out_scale[0]), group_scales(out_scale[1])};
    const uint32_t half = smem_address(smem_.k[parity]) + consumer_ * kColumnBlocksPerConsumer * kKColumnBlockBytes;
    const int matrix = lane_ / 8;
    const int row = (row0_ - lane_ / 4) + 8 * (matrix % 2) + lane_ % 8;
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      uint32_t pairs[4];
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int i = 2 * k + m / 2, r = m % 2;
        const float scale = group_scale(scales[r], i);
        pairs[m] = pack_bf16x2(o_acc_[4 * i + 2 * r] * scale, o_acc_[4 * i + 2 * r + 1] * scale);
      }
      const int column = 8 * (2 * k + matrix / 2);  // of this consumer's 256 dims
      sm90::stmatrix_x4(half + (column / kColumnBlockDims) * kKColumnBlockBytes +
                            p_tile_offset(row, column % kColumnBlockDims),
                        pairs);
    }
  }
  // The follower's copy thread: the whole O tile to the output rows of item `w`, eight TMA boxes
  // of 64 dims x 64 heads, one bulk group a dim half (low first), so that
  // release_output_half (below) frees the low half, which the dequant writes first, while
  // the high half still drains.
  __device__ void store_output_tile(int parity, const WorkRows& w) {
#pragma unroll
    for (int half = 0; half < 2; ++half) store_output_half(parity, half, w);
  }
  // One dim half of it (consumer `half`'s), one bulk group.
  __device__ __forceinline__ void store_output_half(int parity, int half, const WorkRows& w) {
#pragma unroll
    for (int k = 0; k < kColumnBlocksPerConsumer; ++k) {
      const int block = kColumnBlocksPerConsumer * half + k;
      sm90::tma_store_3d(&params_.output_map, smem_address(smem_.k[parity]) + block * kKColumnBlockBytes,
                         block * kColumnBlockDims, w.head0, w.token);
    }
    sm90::bulk_commit_group();
  }

  // Half `half` of that tile, once its TMA stores have read it (store_output_tile's bulk groups:
  // the low half's first), for the consumer whose PV read it (kWarpgroupThreads arrivals).
  // Waiting for all but the newest group frees the low half only while those two groups are the
  // copy thread's last: a bulk store issued between store_output_tile and this release would have
  // to be waited for before it.
  __device__ __forceinline__ void release_output_half(int parity, int half) const {
    if (copies_thread()) {
      if (half == kLowDims) {
        sm90::bulk_wait_group_read<1>();
      } else {
        sm90::bulk_wait_group_read<0>();
      }
      sm90::mbarrier_arrive(smem_address(&smem_.half_empty[parity][half]), kWarpgroupThreads);
    }
  }

  // A split item's fp32 partial through the consumer's half of the Q tile (32 KB): round k holds
  // dims 256 c + 128 k .. (accumulator groups i = 16 k .. 16 k + 15) as four column blocks of 32
  // fp32 dims, 64 rows x 128 bytes each, in the 128-byte swizzle; four TMA boxes of the
  // partials' tensor map store a round.
  static constexpr int kPartialRounds = 2;
  static constexpr int kPartialBlockDims = kTileRowBytes / int(sizeof(float));  // 32
  __device__ __forceinline__ void stage_partial_round(int round, const WorkRows& w, const float (&out_scale)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0_ + 8 * r;
      if (w.head0 + row >= params_.num_heads) continue;
      // Dims 8 (i % 16) + 2 (lane % 4) of the round: column block (i % 16) / 4, chunk
      // 2 (i % 4) + (lane % 4) / 2, 8 bytes in. `row_base` holds the thread's chunk bit and
      // row % 8 in the chunk bits, so chunk 2 (i % 4) is one XOR away. A warp instruction
      // writes 32 bytes of each of 8 rows: two wavefronts, the least for 256 bytes.
      uint32_t row_base = smem_address(smem_.q) + consumer_ * kColumnBlocksPerConsumer * kQColumnBlockBytes +
                          row * kTileRowBytes + (((row % 8) ^ ((lane_ / 2) % 2)) * 16) + 8 * (lane_ % 2);
      asm volatile("" : "+r"(row_base));  // computed here, not kept across the item loop
      const GroupScales scales = group_scales(out_scale[r]);
#pragma unroll
      for (int g = 0; g < 16; ++g) {
        const int i = 16 * round + g;
        const float scale = group_scale(scales, i);
        sm90::st_shared_8((row_base ^ ((2 * (g % 4)) * 16)) + (g / 4) * kQColumnBlockBytes,
                          __float_as_uint(o_acc_[4 * i + 2 * r] * scale),
                          __float_as_uint(o_acc_[4 * i + 2 * r + 1] * scale));
      }
    }
  }
  __device__ void store_partial_round(int round, const WorkRows& w) {
    const int row = w.split * params_.num_tokens + w.token;  // mid_out's rows: split-major
#pragma unroll
    for (int k = 0; k < kColumnBlocksPerConsumer; ++k) {
      sm90::tma_store_3d(&params_.partial_map,
                         smem_address(smem_.q) + (kColumnBlocksPerConsumer * consumer_ + k) * kQColumnBlockBytes,
                         kHalfDims * consumer_ + kRoundDims * round + kPartialBlockDims * k, w.head0, row);
    }
    sm90::bulk_commit_group();
    sm90::bulk_wait_group_read<0>();
  }
  static constexpr int kHalfDims = 256;  // a consumer's dims of O
  static constexpr int kRoundDims = kHalfDims / kPartialRounds;

  // Barrier of this consumer's 128 threads only (kOutputStaged + consumer; ids known at compile
  // time, so ptxas reserves only the barriers the kernel uses).
  __device__ __forceinline__ void consumer_half_barrier() const {
    if (consumer_ == 0) {
      named_barrier<kOutputStaged + 0, kWarpgroupThreads>();
    } else {
      named_barrier<kOutputStaged + 1, kWarpgroupThreads>();
    }
  }

  // Epilogue of an item: both consumers' row sums in a fixed order, then the row's end. Whole
  // lists (the prefill, or a decode that does not split): the sink, normalise, O in bf16 and the
  // LSE; O goes through K tile `o_tile` (the item's last block's, ConsumerRole::output_by_tile)
  // by TMA stores, or from registers straight to `output` where o_tile is -1 (16 bytes a lane
  // after a transpose in the quad where the output is 16-byte aligned: an item without
  // candidates; else 4). The Q tile is not used, so the next item's Q is already on its way
  // (issued in the last pair; here after an item without candidates). Split items: the split's
  // partial, O normalised over the split in fp32 and its base-2 LSE, into the scratch (the merge
  // kernel adds the sink); a consumer's fp32 half (64 KB) goes through its half of the Q tile in
  // two rounds of 128 dims, after which the next item's Q follows (or before register stores,
  // where mid_out is not TMA-addressable). next_q_issued: the item's Q was read and the next one
  // issued in its last pair.
  __device__ void finish_item(int item, int q_parity, int trace_row, bool next_q_issued, int o_tile) {
    const WorkRows w = work_rows<kHeads, kSplitItems>(params_, item);
    trace_event(consumer_, 0, trace_row);
    // Whole lists: the sinks of this thread's rows, loaded first so that the exchange below
    // covers their latency.
    float sink2[2] = {0.0f, 0.0f};
    if constexpr (!kSplitItems) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int head = w.head0 + row0_ + 8 * r;
        if (head < params_.num_heads) sink2[r] = row_sink2(params_, head);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#if defined(CAKE_HOPPER_MMA_ROW_SUMS)
      // The leader's MMAs summed both consumers' bf16 weights (each lane of a quad holds its row's
      // sum); the follower's are zeros.
      const float rounded = rounded_sums_[r];
#elif defined(CAKE_HOPPER_EXACT_NORMALISER)
      const float rounded = quad_sum(sums_[r].exact);  // the fp32 weights' sum normalises O
#else
      const float rounded = quad_sum(sums_[r].rounded);
#endif
      const float exact = quad_sum(sums_[r].exact);
      if (lane_ % 4 == 0) {
        smem_.sum_exchange[consumer_][row0_ + 8 * r] = rounded;
        smem_.exact_exchange[consumer_][row0_ + 8 * r] = exact;
      }
    }
    consumer_barrier<kSumsExchanged>();
    trace_event_past_barrier(consumer_, 1, trace_row);
    if (!next_q_issued) {
      // Both consumers' wgmmas of this item have retired (each waited for its last before the
      // epilogue), so nobody reads the Q tile once this item's own Q load has landed (an item
      // without candidates never waited for it).
      sm90::mbarrier_wait(smem_address(&smem_.q_full), q_parity);
    }
    trace_event(consumer_, 2, trace_row);
    const bool has_next = item + int(gridDim.x) < num_work_units<kSplitItems>(params_);
    const bool aligned = params_.output_aligned != 0;
    if ((!kSplitItems || !aligned) && !next_q_issued && has_next && copies_thread()) {
      load_q_half(item + gridDim.x, consumer_);
    }
    float out_scale[2] = {0.0f, 0.0f};  // each row's scale, for the stores after the loop
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0_ + 8 * r;
      const WeightSums totals = {smem_.sum_exchange[0][row] + smem_.sum_exchange[1][row],
                                 smem_.exact_exchange[0][row] + smem_.exact_exchange[1][row]};
      const int head = w.head0 + row;
      if (head >= params_.num_heads) continue;  // a padding row of the last head block: no output, no sink
      if constexpr (kSplitItems) {
        const SoftmaxFinal final = finalize_split_row(reference_[r], totals);
        out_scale[r] = final.out_scale;
        if (!aligned) {
          float* out_row = split_output_row(params_, w.split, w.token, head) + 2 * (lane_ % 4);
          const GroupScales scales = group_scales(final.out_scale);
#pragma unroll
          for (int i = 0; i < 32; ++i) {
            const float scale = group_scale(scales, i);
            *reinterpret_cast<float2*>(out_row + o_dim(i)) =
                make_float2(o_acc_[4 * i + 2 * r] * scale, o_acc_[4 * i + 2 * r + 1] * scale);
          }
        }
        if (consumer_ == 0 && lane_ % 4 == 0) store_split_lse(params_, w.split, w.token, head, final.lse2);
      } else {
        const SoftmaxFinal final = finalize_row_with_sink(params_, sink2[r], reference_[r], totals);
        out_scale[r] = final.out_scale;
        if (!aligned) {
          __nv_bfloat16* out_row = output_row(params_, w.token, head) + 2 * (lane_ % 4);
          const GroupScales scales = group_scales(final.out_scale);
#pragma unroll
          for (int i = 0; i < 32; ++i) {
            const float scale = group_scale(scales, i);
            *reinterpret_cast<uint32_t*>(out_row + o_dim(i)) =
                pack_bf16x2(o_acc_[4 * i + 2 * r] * scale, o_acc_[4 * i + 2 * r + 1] * scale);
          }
        }
        if (consumer_ == 0 && lane_ % 4 == 0) store_lse(params_, w.token, head, final.lse2);
      }
    }
    trace_event(consumer_, 3, trace_row);
    if (aligned) {
      if constexpr (kSplitItems) {
        // The tile's writes (generic proxy) before the TMA (async proxy) reads them: each thread
        // fences its own, the barrier orders them before the copy thread's stores. The next Q
        // overwrites this half once the stores have read it.
#pragma unroll
        for (int round = 0; round < kPartialRounds; ++round) {
          if (round > 0) consumer_half_barrier();  // the copy thread's stores have read the tile
          stage_partial_round(round, w, out_scale);
          sm90::fence_proxy_async();
          consumer_half_barrier();
          if (copies_thread()) store_partial_round(round, w);
        }
        if (copies_thread() && has_next) load_q_half(item + gridDim.x, consumer_);
      } else if (o_tile >= 0) {
        // Each thread fences its own tile writes for the TMA (async proxy); the one-sided barrier
        // orders the leader's before the follower's copy thread stores the whole tile.
        stage_output_half(o_tile, out_scale);
        sm90::fence_proxy_async();
        if (consumer_ == 0) {
          consumer_barrier_arrive<kOutputTiled>();
        } else {
          consumer_barrier<kOutputTiled>();
          if (copies_thread()) store_output_tile(o_tile, w);
        }
      } else {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int head = w.head0 + row0_ + 8 * r;
#if defined(CAKE_HOPPER_NO_O_STORES)
          const bool store = false;  // timing only: what the O write costs the item
#else
          const bool store = head < params_.num_heads;
#endif
          store_output_row(output_row(params_, w.token, head), r, out_scale[r], store);
        }
      }
    }
    trace_event(consumer_, 4, trace_row);
#if defined(CAKE_RACECHECK_BUILD)
    // racecheck does not carry an arrival made for other threads
    // (ConsumerEpilogue::release_output_half's) back to their reads: in its build each consumer
    // releases its half of the O tile itself, here, once the stores have read it (slower, the
    // same accesses).
    if (o_tile >= 0 && copies_thread()) sm90::bulk_wait_group_read<0>();
#endif
    consumer_barrier<kSumsExchanged>();  // both read the sums before the next item rewrites them
#if defined(CAKE_RACECHECK_BUILD)
    if (o_tile >= 0) release_half(o_tile, consumer_ == 0 ? kLowDims : kHighDims);
#endif
  }
};

}  // namespace cake::cuda::hopper
