// The consumer warpgroups of the Hopper prefill. For each 64-candidate block, consumer c computes
// S = Q K^T for half c of the block (64 heads x 32 candidates, wgmma m64n32k16, from K slot
// 2 (j % 2) + c), the two agree on each head's softmax reference through shared memory, each
// writes its half of the block's bf16 weights P, and then each accumulates O for its half of the
// output dims over the whole block: O[:, its 256 dims] += P V (wgmma m64n128k16).
#pragma once

#include <cuda_bf16.h>

#include "../common/online_softmax.cuh"
#include "../common/prefill_epilogue.cuh"
#include "../common/split_epilogue.cuh"
#include "../common/ptx_primitives.cuh"
#include "prefill_hopper_layout.h"
#include "prefill_hopper_trace.cuh"
#include "prefill_hopper_work.cuh"
#include "sm90_primitives.cuh"

namespace cake::cuda::hopper {

// A row's softmax reference moves only when a pair's max exceeds it by more than this (log2):
// weights stay <= 256, bf16 rounding is scale-free, and the O rescale becomes rare.
constexpr float kLazyRescaleLog2 = 8.0f;

template <int kId>
__device__ __forceinline__ void consumer_barrier() {
  named_barrier<kId, kConsumerThreads>();
}

template <bool kSplitItems>
class ConsumerRole {
 public:
  __device__ ConsumerRole(const DecodeParams& params, SharedStorage& smem, int consumer, int thread)
      : params_(params), smem_(smem), consumer_(consumer), lane_(thread % 32),
        row0_((thread / 32) * 16 + (thread % 32) / 4),
        score_scale_(score_scale_or_nan(params.score_scale_log2)) {}

  __device__ void run() {
    using namespace sm90;
    const int num_items = num_work_items<kSplitItems>(params_);
    int gblock = 0;   // blocks so far over this CTA's items: the phase of the block barriers
    int q_items = 0;  // items with candidates so far: the phase of q_full / q_empty
    for (int item = blockIdx.x; item < num_items; item += gridDim.x) {
      const WorkItem<kSplitItems> w = work_item<kSplitItems>(params_, item);
      reset();
      if (w.num_blocks == 0) {  // no candidates: zeros, and the sink's LSE (or -inf)
        finish_item(w);
        continue;
      }
      mbarrier_wait(smem_address(&smem_.q_full), q_items & 1);
      fence_proxy_async();  // Q arrived by cp.async and is read by wgmma
      for (int block = 0; block < w.num_blocks; ++block, ++gblock) {
        const int parity = gblock & 1;
        trace_event(consumer_, 0, gblock);
        mbarrier_wait(smem_address(&smem_.block_full[parity]), (gblock >> 1) & 1);
        // Other threads wrote the slots with ordinary stores (and cp.async); this thread saw them
        // complete through the mbarrier, and its wgmma reads them through the async proxy.
        fence_proxy_async();
        trace_event(consumer_, 1, gblock);
        float s_acc[16];
        compute_scores(s_acc, parity);
        if (block + 1 == w.num_blocks) mbarrier_arrive(smem_address(&smem_.q_empty));
        trace_event(consumer_, 2, gblock);
        softmax(s_acc, parity);
        trace_event(consumer_, 3, gblock);
        consumer_barrier<kPReady>();  // both halves of P written
        trace_event(consumer_, 4, gblock);
        wgmma_fence();
        accumulate_quarter<0>(parity);
        accumulate_quarter<1>(parity);
        wgmma_wait<0>();
        pin_registers(o_acc_);
        mbarrier_arrive(smem_address(&smem_.block_empty[parity]));
        trace_event(consumer_, 5, gblock);
      }
      finish_item(w);
      ++q_items;
    }
  }

 private:
  const DecodeParams& params_;
  SharedStorage& smem_;
  const int consumer_;  // 0 or 1: its block of each pair, and its half of the output dims
  const int lane_;
  const int row0_;      // this thread's accumulator rows (heads of the item): row0 and row0 + 8
  const float score_scale_;  // sm_scale * log2(e), NaN when sm_scale is not finite

  float o_acc_[128];   // O[64 heads x 256 dims of this consumer] (see o_dim)
  float row_max_[2];   // the softmax reference of each row
  WeightSums sums_[2];  // of each row's weights

  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int i = 0; i < 128; ++i) o_acc_[i] = 0.0f;
    row_max_[0] = row_max_[1] = -INFINITY;
    sums_[0] = sums_[1] = WeightSums{0.0f, 0.0f};
  }

  // S[64 heads x 32 candidates] = Q K^T for this consumer's half of the block.
  __device__ __forceinline__ void compute_scores(float (&s_acc)[16], int parity) {
    using namespace sm90;
    const uint64_t q_desc = smem_descriptor(smem_address(smem_.q), 16, 1024);
    const uint64_t k_desc = smem_descriptor(smem_address(smem_.k[2 * parity + consumer_]), 16, 1024);
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kQkSteps; ++k) {  // +32 bytes within a row, a column block per 4 steps
      const uint32_t q_offset = ((k / 4) * kQColumnBlockBytes + (k % 4) * 32) >> 4;
      const uint32_t k_offset = ((k / 4) * kSlotColumnBlockBytes + (k % 4) * 32) >> 4;
      wgmma_m64n32k16_ss(s_acc, q_desc + q_offset, k_desc + k_offset, k != 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    pin_registers(s_acc);
  }

  // Masks and scales S, agrees on the reference with the other consumer, writes this block's P
  // tile and updates the row sums; rescales O when the reference moved.
  __device__ __forceinline__ void softmax(float (&s_acc)[16], int parity) {
    using namespace sm90;
    // s_acc[4 i + e]: row row0 + 8 (e / 2), candidate 32 consumer + 8 i + 2 (lane % 4) + e % 2.
    const uint8_t* valid = smem_.valid[parity] + kSlotRows * consumer_;
    float slice_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int column = 8 * i + 2 * (lane_ % 4);
      const bool valid_even = valid[column] != 0;
      const bool valid_odd = valid[column + 1] != 0;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s_acc[4 * i + e] = masked_logit2(s_acc[4 * i + e], e % 2 == 0 ? valid_even : valid_odd, score_scale_);
        slice_max[e / 2] = fmaxf(slice_max[e / 2], s_acc[4 * i + e]);
      }
    }
    slice_max[0] = quad_max(slice_max[0]);
    slice_max[1] = quad_max(slice_max[1]);
    if (lane_ % 4 == 0) {
      smem_.max_exchange[consumer_][row0_] = slice_max[0];
      smem_.max_exchange[consumer_][row0_ + 8] = slice_max[1];
    }
    consumer_barrier<kMaxExchanged>();

    // Both consumers see the same maxima, so they take the same decisions.
    float rescale[2];
    uint32_t p_pairs[4][2];  // bf16 weights: [column block][row half]
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0_ + 8 * r;
      const float pair_max = fmaxf(smem_.max_exchange[0][row], smem_.max_exchange[1][row]);
      const bool move = pair_max > row_max_[r] + kLazyRescaleLog2;  // false while pair_max == -inf
      const float new_max = move ? pair_max : row_max_[r];
      const float reference = softmax_reference(new_max);
      rescale[r] = move ? fast_exp2(row_max_[r] - new_max) : 1.0f;
      row_max_[r] = new_max;
      WeightSums block = {0.0f, 0.0f};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        p_pairs[i][r] = add_weight_pair(block, s_acc[4 * i + 2 * r], s_acc[4 * i + 2 * r + 1], reference);
      }
      rescale_add(sums_[r].rounded, sums_[r].exact, rescale[r], block);
    }
    const uint32_t p_tile = smem_address(smem_.p);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int column = kSlotRows * consumer_ + 8 * i + 2 * (lane_ % 4);
#pragma unroll
      for (int r = 0; r < 2; ++r) st_shared_4(p_tile + p_tile_offset(row0_ + 8 * r, column), p_pairs[i][r]);
    }
    fence_proxy_async();  // P is read by wgmma
    if (__any_sync(0xffffffffu, rescale[0] != 1.0f || rescale[1] != 1.0f)) {  // rare: a branch, not predication
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        o_acc_[4 * i + 0] *= rescale[0], o_acc_[4 * i + 1] *= rescale[0];
        o_acc_[4 * i + 2] *= rescale[1], o_acc_[4 * i + 3] *= rescale[1];
      }
    }
  }

  // The quarter of the output dims (and of V) that this consumer's PV step `step` reads, and that
  // o_acc[64 step ..] holds: consumer c quarters 2 c and 2 c + 1. Both consumers run the same
  // instructions (the quarter is data in the descriptor): wgmma in warpgroup-divergent code makes
  // ptxas serialise every wgmma of the kernel.
  __device__ __forceinline__ int pv_quarter(int step) const { return 2 * consumer_ + step; }
  // The output dim of accumulator column block i (o_acc[4 i ..], 8 columns).
  __device__ __forceinline__ int o_dim(int i) const { return 128 * pv_quarter(i / 16) + 8 * (i % 16); }

  // O[64 x the 128 dims of quarter pv_quarter(kStep)] += P V over the block (candidates 0..31 from
  // slot 2 parity, 32..63 from slot 2 parity + 1), into the 64 registers of O that hold that
  // quarter (o_acc[64 kStep ..]); one commit group.
  template <int kStep>
  __device__ __forceinline__ void accumulate_quarter(int parity) {
    using namespace sm90;
    float(&o_part)[64] = *reinterpret_cast<float(*)[64]>(o_acc_ + 64 * kStep);
    const uint64_t p_desc = smem_descriptor(smem_address(smem_.p), 16, 1024);
#pragma unroll
    for (int k = 0; k < kBlockRows / 16; ++k) {  // 16 candidates a step: +32 bytes of P rows, +16 rows of V
      const uint32_t v_base = smem_address(smem_.k[2 * parity + k / kPvStepsPerSlot]) +
                              2 * pv_quarter(kStep) * kSlotColumnBlockBytes + (k % kPvStepsPerSlot) * 16 * kTileRowBytes;
      const uint64_t v_desc = smem_descriptor(v_base, kSlotColumnBlockBytes, 1024);
      wgmma_m64n128k16_ss_bt(o_part, p_desc + ((k * 32) >> 4), v_desc, true);
    }
    wgmma_commit();
  }

  // Epilogue of an item: both consumers' row sums in a fixed order, then the row's end. Whole
  // lists (the prefill, or a decode that does not split): the sink, normalise, store O (bf16
  // pairs; a warp writes 16 contiguous bytes of 8 rows per instruction) and the LSE. Split items:
  // the split's partial, O normalised over the split in fp32 and its base-2 LSE, into the scratch
  // (the merge kernel adds the sink).
  __device__ void finish_item(const WorkItem<kSplitItems>& w) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float rounded = quad_sum(sums_[r].rounded);
      const float exact = quad_sum(sums_[r].exact);
      if (lane_ % 4 == 0) {
        smem_.sum_exchange[consumer_][row0_ + 8 * r] = rounded;
        smem_.exact_exchange[consumer_][row0_ + 8 * r] = exact;
      }
    }
    consumer_barrier<kSumsExchanged>();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0_ + 8 * r;
      const WeightSums totals = {smem_.sum_exchange[0][row] + smem_.sum_exchange[1][row],
                                 smem_.exact_exchange[0][row] + smem_.exact_exchange[1][row]};
      const int head = w.head0 + row;
      if constexpr (kSplitItems) {
        const SoftmaxFinal final = finalize_split_row(row_max_[r], totals);
        float* out_row = split_output_row(params_, w.split, w.token, head) + 2 * (lane_ % 4);
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          *reinterpret_cast<float2*>(out_row + o_dim(i)) =
              make_float2(o_acc_[4 * i + 2 * r] * final.out_scale, o_acc_[4 * i + 2 * r + 1] * final.out_scale);
        }
        if (consumer_ == 0 && lane_ % 4 == 0) store_split_lse(params_, w.split, w.token, head, final.lse2);
      } else {
        const SoftmaxFinal final = finalize_row(params_, head, row_max_[r], totals);
        __nv_bfloat16* out_row = output_row(params_, w.token, head) + 2 * (lane_ % 4);
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          *reinterpret_cast<uint32_t*>(out_row + o_dim(i)) =
              pack_bf16x2(o_acc_[4 * i + 2 * r] * final.out_scale, o_acc_[4 * i + 2 * r + 1] * final.out_scale);
        }
        if (consumer_ == 0 && lane_ % 4 == 0) store_lse(params_, w.token, head, final.lse2);
      }
    }
    consumer_barrier<kSumsExchanged>();  // both read the sums before the next item rewrites them
  }
};

}  // namespace cake::cuda::hopper
