// What both parts of a Hopper prefill consumer warpgroup hold (prefill_hopper_consumer.cuh: the
// pairs of blocks; prefill_hopper_epilogue.cuh: the item's end): the parameters and shared
// memory, the thread's place, and what an item accumulates (O, the row reference and the row
// sums), with the few helpers both parts use (the copy thread, Q's loads, a dim half's release,
// which quarter of the dims O holds).
#pragma once

#include "../../common/softmax_finalize.h"
#include "../common/online_softmax.cuh"
#include "nvfp4_bit_decode.cuh"
#include "prefill_hopper_layout.h"
#include "prefill_hopper_params.h"
#include "prefill_hopper_work.cuh"
#include "sm90_primitives.cuh"

namespace cake::cuda::hopper {

// Barriers of both consumer warpgroups (kConsumerThreads threads), by named-barrier id.
template <int kId>
__device__ __forceinline__ void consumer_barrier() {
  named_barrier<kId, kConsumerThreads>();
}
template <int kId>
__device__ __forceinline__ void consumer_barrier_arrive() {
  named_barrier_arrive<kId, kConsumerThreads>();
}

template <bool kSplitItems>
class ConsumerState {
 protected:
  __device__ ConsumerState(const HopperParams& params, SharedStorage& smem, int consumer, int thread)
      : params_(params), smem_(smem), consumer_(consumer), lane_(thread % 32),
        row0_((thread / 32) * 16 + (thread % 32) / 4),
        score_scale_(score_scale_or_nan(params.score_scale_log2) * kBitDecodeUnscale) {}

  const HopperParams& params_;
  SharedStorage& smem_;
  const int consumer_;  // 0: the leader (first block of each pair), 1: the follower
  const int lane_;
  const int row0_;      // this thread's accumulator rows (heads of the item): row0 and row0 + 8
  // sm_scale * log2(e) * 2^9 (the scores come out 2^-9 times the true ones:
  // ConsumerRole::scale_q_rope), NaN when sm_scale is not finite.
  const float score_scale_;

  float o_acc_[128];    // O[64 heads x 256 dims of this consumer] (ConsumerEpilogue::o_dim)
  float reference_[2];  // the softmax reference of each row (the same in both consumers after a pair)
  WeightSums sums_[2];  // of the weights of this consumer's blocks, against reference_
#if defined(CAKE_HOPPER_MMA_ROW_SUMS)
  // The leader only: O's normaliser, the sums of the bf16 weights of both consumers' blocks
  // against reference_ (each lane of a quad holds its row's whole sum), each block's made by its
  // PV's wgmmas against the ones tile (SharedStorage::ones); sums_[r].rounded is not kept.
  float rounded_sums_[2];
#endif

  // This consumer no longer reads a dim half of the block of this parity (both consumers arrive
  // once per block and half; for the halves of an item's O tile the follower's copy thread
  // arrives for both: ConsumerEpilogue::release_output_half).
  __device__ __forceinline__ void release_half(int parity, int half) {
    sm90::mbarrier_arrive(smem_address(&smem_.half_empty[parity][half]));
  }

  // The quarter of the output dims (and of V) that o_acc[64 step ..] holds: consumer c quarters
  // 2 c and 2 c + 1.
  __device__ __forceinline__ int pv_quarter(int step) const { return 2 * consumer_ + step; }

  // The thread of each consumer that issues its TMA copies (and waits for its stores).
  static __device__ __forceinline__ bool copies_thread() { return threadIdx.x % kWarpgroupThreads == 0; }

  // Half `half` of item `item`'s Q: column blocks 4 h .. 4 h + 3 of the Q tile (dims 256 h ..),
  // four TMA boxes of 64 dims x 64 heads that complete on q_full with the other half (one
  // expect_tx arrival each). A padded last head block's rows past num_heads load as zeros.
  __device__ void load_q_half(int item, int half) {
    const WorkRows rows = work_rows<kHeads, kSplitItems>(params_, item);
    const uint32_t q_full = smem_address(&smem_.q_full);
    sm90::mbarrier_arrive_expect_tx(q_full, kQTileBytes / kConsumers);
#pragma unroll
    for (int k = 0; k < kColumnBlocksPerConsumer; ++k) {
      const int block = kColumnBlocksPerConsumer * half + k;
      sm90::tma_load_3d(smem_address(smem_.q) + block * kQColumnBlockBytes, &params_.q_map, q_full,
                        block * kColumnBlockDims, rows.head0, rows.token);
    }
  }
};

}  // namespace cake::cuda::hopper
