// The consumer warpgroups of the Hopper prefill. An item's blocks go in pairs: consumer 0 (the
// leader) computes S = Q K^T and the softmax of the pair's first block, consumer 1 (the follower)
// of its second, so one consumer's softmax runs while the other's MMAs do. Each consumer
// accumulates half of the output dims (consumer c: dims 256 c ..) over both blocks: its own
// block's weights straight from registers (wgmma with A in registers), the other's from the P
// tile that consumer wrote. The row reference is handed along: the leader moves it for its
// block, the follower for its block on top of that; O is rescaled at each move, so both halves of
// O, and both consumers' row sums, end every pair against the same reference. What the consumer
// holds: prefill_hopper_consumer_state.cuh; the item's end (row epilogue, O out):
// prefill_hopper_epilogue.cuh.
#pragma once

#include "../common/online_softmax.cuh"
#include "../common/ptx_primitives.cuh"
#include "nvfp4_bit_decode.cuh"
#include "prefill_hopper_consumer_state.cuh"
#include "prefill_hopper_epilogue.cuh"
#include "prefill_hopper_layout.h"
#include "prefill_hopper_params.h"
#include "prefill_hopper_recheck.cuh"
#include "prefill_hopper_trace.cuh"
#include "prefill_hopper_work.cuh"
#include "sm90_primitives.cuh"

namespace cake::cuda::hopper {

// One block's bf16 weights in this thread: [column group i (8 columns)][row half r], the pair of
// columns 8 i + 2 (lane % 4) + {0, 1} of row row0 + 8 r. Also the A fragments of PV from
// registers: k-step kk (candidates 16 kk ..) takes groups 2 kk and 2 kk + 1.
using BlockWeights = uint32_t[8][2];

// CAKE_HOPPER_LEADER_QK_GROUP=N: the leader's QK^T in groups of N k-steps, each committed and
// retired (sm90::wgmma_drain_every) before the next is issued. An m64n64k16 with both operands in
// shared memory reads all 128 bytes a cycle shared memory gives, so while a QK^T streams, the
// dequant's tile stores (the pair's second block, converted meanwhile) wait behind it; the gaps
// between groups would let them through, and the leader's softmax has slack (the follower's block
// is written later; the follower's QK^T, on the pair's path, always streams whole). 0 (the
// default): one stream, no drain; groups of two timed level with it overall (faster at some
// shapes, slower at others, within the runs' spread: docs/hopper_kernel.md, "Work split and
// roles", step 2).
#ifndef CAKE_HOPPER_LEADER_QK_GROUP
#define CAKE_HOPPER_LEADER_QK_GROUP 0
#endif
inline constexpr int kLeaderQkGroup = CAKE_HOPPER_LEADER_QK_GROUP;
// CAKE_HOPPER_MMA_ROW_SUMS (a development build, kOnesTileBytes says what it does): the rounded
// weights' row sums made by the leader's PV wgmmas, not by the softmax.
#if defined(CAKE_HOPPER_MMA_ROW_SUMS)
inline constexpr bool kMmaRowSums = true;
#else
inline constexpr bool kMmaRowSums = false;
#endif
// CAKE_HOPPER_EXACT_NORMALISER (a development build, other results): O divided by the fp32
// weights' sum instead of the bf16 weights' that PV multiplied, so nobody sums the rounded weights:
// what the softmax saves without them, the bound on kMmaRowSums.
#if defined(CAKE_HOPPER_EXACT_NORMALISER)
static_assert(!kMmaRowSums, "one normaliser at a time");
inline constexpr bool kExactNormaliser = true;
#else
inline constexpr bool kExactNormaliser = false;
#endif
static_assert(kLeaderQkGroup >= 0 && (kLeaderQkGroup == 0 || kQkStepsPerHalf % kLeaderQkGroup == 0),
              "the leader's QK^T groups divide a dim half's k-steps");
// A block's candidate flags as the dequant wrote them with its low half (valid[parity]: eight
// ballot words, read in two 16-byte loads).
struct CandidateFlags {
  uint4 low;   // words 0..3
  uint4 high;  // words 4..7
};

// Where a pair's blocks live and who waits for what.
struct PairBlocks {
  int first_parity;   // K tile of the leader's block
  int first_phase;    // its half_full phase (the second block's: first_phase ^ first_parity)
  bool has_second;    // the follower has a block (false: the item's last block is the leader's)
  bool first;         // the item's first pair
  bool last;          // the item's last pair
  int gblock;         // the leader's block in the CTA's walk (so gblock - 1 is the previous block)
  // The last pair of a whole-list item that has a next one: that item, whose Q the follower loads
  // once both QK^Ts of the pair have retired (the epilogue does not use the Q tile). Else -1.
  int next_q_item;
  int parity;  // of the pair in the CTA's walk: the leader's P tile
};

// The consumer role: its state (ConsumerState) and the item's end (ConsumerEpilogue) are the
// bases; this class walks an item's pairs of blocks.
template <bool kSplitItems>
class ConsumerRole : public ConsumerEpilogue<kSplitItems> {
  using Epilogue = ConsumerEpilogue<kSplitItems>;
  using Epilogue::consumer_;
  using Epilogue::copies_thread;
  using Epilogue::finish_item;
  using Epilogue::lane_;
  using Epilogue::load_q_half;
  using Epilogue::o_acc_;
  using Epilogue::params_;
  using Epilogue::pv_quarter;
  using Epilogue::release_output_half;
  using Epilogue::reference_;
  using Epilogue::release_half;
  using Epilogue::row0_;
  using Epilogue::score_scale_;
  using Epilogue::smem_;
  using Epilogue::sums_;
#if defined(CAKE_HOPPER_MMA_ROW_SUMS)
  using Epilogue::rounded_sums_;
#endif

 public:
  __device__ ConsumerRole(const HopperParams& params, SharedStorage& smem, int consumer, int thread)
      : Epilogue(params, smem, consumer, thread) {}

  __device__ void run() {
    using namespace sm90;
    const int num_items = num_work_units<kSplitItems>(params_);
    int gblock = 0;  // blocks so far over this CTA's items: the phase of the block barriers
    int pairs = 0;   // pairs so far over this CTA's items
    // Every item's Q is loaded by the consumers themselves: the first here (each consumer its
    // half); each next one as soon as the Q tile is free: for whole lists by the follower in the
    // item's last pair, once both QK^Ts have retired (load_next_q); for split items, and after an
    // item without candidates, in the epilogue (finish_item), where the split partials go out
    // through the tile.
    if (blockIdx.x < num_items && copies_thread()) load_q_half(blockIdx.x, consumer_);
    // q_parity: the phase of q_full this item's Q completes (one Q load per item, with or without
    // candidates, so the parity of the item's place in the CTA's walk).
    for (int item = blockIdx.x, q_parity = 0; item < num_items; item += gridDim.x, q_parity ^= 1) {
      // Loaded list lengths look divergent to ptxas; the pair branches (wgmmas inside) must not.
      const int num_blocks = __shfl_sync(0xffffffffu, work_item<kSplitItems>(params_, item).num_chunks, 0);
      trace_event(consumer_, 6, gblock + 1);
      reset();
      if (num_blocks == 0) {  // no candidates: zeros, and the sink's LSE (or -inf)
        finish_item(item, q_parity, gblock - 1, false, -1);
        continue;
      }
      const int next_item = item + int(gridDim.x);
      const bool q_loaded_early = !kSplitItems && next_item < num_items;
      // (Kept under CAKE_HOPPER_NO_WAITS too: a consumer that ran past it could arrive with the
      // next item's expect_tx while this item's Q bytes are still in flight, an arrival the
      // barrier's phase does not expect, and a CTA could exit with a Q load in flight; a no-waits
      // build without it once failed at launch, most likely so.)
      mbarrier_wait(smem_address(&smem_.q_full), q_parity);
      trace_event(consumer_, 7, gblock + 1);
      // Q arrived by TMA, which the mbarrier makes visible to the wgmmas (both the async proxy)
      // and to this thread; the fence orders this thread's generic writes of the tile (a split
      // item's partial, the RoPE scaling) before the wgmmas' reads.
      scale_q_rope();
      fence_proxy_async();
      consumer_barrier<kQRopeScaled>();
      for (int block = 0; block < num_blocks; block += 2, gblock += 2, ++pairs) {
        const bool last = block + 2 >= num_blocks;
        const PairBlocks pair = {gblock & 1, (gblock >> 1) & 1, block + 1 < num_blocks, block == 0,
                                 last,       gblock,            last && q_loaded_early ? next_item : -1,
                                 pairs & 1};
        if (consumer_ == 0) {
          leader_pair(pair);
        } else {
          follower_pair(pair);
        }
      }
      gblock -= num_blocks & 1;  // an odd item used one block of its last pair
      if (item == int(blockIdx.x)) trace_life(consumer_, kLifeFirstEpilogue);
      finish_item(item, q_parity, gblock - 1, !kSplitItems, output_by_tile() ? (gblock - 1) & 1 : -1);
    }
    // The last TMA stores (O from a K tile, or split partials from the Q tile) must have read
    // shared memory before the CTA exits.
    if (copies_thread()) sm90::bulk_wait_group<0>();
  }

 private:
  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int i = 0; i < 128; ++i) o_acc_[i] = 0.0f;
    reference_[0] = reference_[1] = -INFINITY;
    sums_[0] = sums_[1] = WeightSums{0.0f, 0.0f};
#if defined(CAKE_HOPPER_MMA_ROW_SUMS)
    rounded_sums_[0] = rounded_sums_[1] = 0.0f;
#endif
  }

  // The leader: S and the softmax of the pair's first block, then O += its weights V (from
  // registers), then, once the follower handed over, O += the second block's weights V. Of the
  // high dims it reads the first block's in QK^T only and the second block's not at all.
  __device__ __forceinline__ void leader_pair(const PairBlocks& pair) {
    using namespace sm90;
    const int first = pair.first_parity, second = first ^ 1;
    float s_acc[32];
    trace_event(0, 0, pair.gblock);
    CandidateFlags flags;
    issue_scores(s_acc, flags, first, pair.first_phase, pair.has_second, -1, kLeaderQkGroup);
    retire_scores(s_acc);
    if constexpr (kRecheckLeader) recheck_scores(s_acc, first, pair.gblock);
    trace_event(0, 1, pair.gblock);
    release_half(first, kHighDims);
    BlockWeights weights;
    float moved_by[2];
    // The reference is final once the block's max is known: the follower starts its softmax on it
    // while this consumer forms its weights.
    move_reference(s_acc, flags, reference_, moved_by);
    publish_reference();
    if (pair.has_second) {
      consumer_barrier_arrive<kReferenceReady>();
    }
    form_weights(s_acc, reference_, weights, moved_by);
    rescale_o_if_moved(moved_by);
    trace_event(0, 6, pair.gblock);
    // The own block's PV goes to the tensor cores before the proxy fence and the hand-over, so
    // that it does not wait behind them. The stmatrix comes first: nothing may read a wgmma's A
    // registers between its issue and the wait for it.
    write_weights(weights, p_tile(0, pair));
    float block_sums[4];  // the row sums of this PV's weights (CAKE_HOPPER_MMA_ROW_SUMS: every column the sum)
    accumulate_own(weights, first, kMmaRowSums ? &block_sums : nullptr);
    trace_event(0, 7, pair.gblock);
    sm90::fence_proxy_async();
    consumer_barrier_arrive<kWeightsReady + 0>();
    trace_event(0, 2, pair.gblock);
    // The first block's low half is free once this PV retires: the dequant's next write of this
    // tile starts with it, while the follower still runs its softmax. (Unless it is the item's
    // last block and O goes out through it: output_by_tile.)
    wgmma_wait<0>();
    pin_registers(o_acc_);
    pin_registers(weights);
    add_block_sums(block_sums);
    if (pair.has_second || !keeps_tile_for_output(pair)) release_half(first, kLowDims);
    trace_event(0, 3, pair.gblock);
    if (pair.has_second) {
      wait_half(second, kLowDims, pair.first_phase ^ first);  // the second block's phase: one more on parity 1 -> 0
      consumer_barrier<kWeightsReady + 1>();
      trace_event_past_barrier(0, 4, pair.gblock);
      release_half(second, kHighDims);
      adopt_reference(1);  // the follower's block may have moved it once more
      accumulate_other(p_tile(1, pair), second, kMmaRowSums ? &block_sums : nullptr);
      wgmma_wait<0>();
      pin_registers(o_acc_);
      add_block_sums(block_sums);
      if (!keeps_tile_for_output(pair)) release_half(second, kLowDims);
      trace_event(0, 5, pair.gblock);
    }
  }

  // The follower: S of the pair's second block (while the leader runs its softmax), its softmax
  // once the leader handed over its reference, then O += the leader's weights V (P tile) and
  // O += its own weights V (registers). It reads the second block's low dims only in QK^T and
  // the first block's never.
  __device__ __forceinline__ void follower_pair(const PairBlocks& pair) {
    using namespace sm90;
    const int first = pair.first_parity, second = first ^ 1;
    const int o_tile = pending_output_tile(pair);
    // (The trace's follower scores step starts before the release, so it holds the O stores' drain.)
    if (pair.has_second) trace_event(1, 0, pair.gblock);
    if (o_tile >= 0) release_output_half(o_tile, kLowDims);
    if (o_tile >= 0) release_output_half(o_tile, kHighDims);
    if (!pair.has_second) {  // the item's last block is the leader's: only its PV
      wait_half(first, kHighDims, pair.first_phase);
      take_leader_reference();
      release_half(first, kLowDims);
      accumulate_other(p_tile(0, pair), first);
      load_next_q(pair);  // the leader's QK^T retired before its hand-over
      wgmma_wait<0>();
      pin_registers(o_acc_);
      if (!keeps_tile_for_output(pair)) release_half(first, kHighDims);
      return;
    }
    float s_acc[32];
    // The leader's QK^T goes to the tensor cores first (its softmax is the pair's critical path):
    // when both blocks are ready (an item's start), issuing both at once would finish both late.
    consumer_barrier<kScoresIssued>();
    CandidateFlags flags;
    // The leader's reference comes before its weights: this softmax runs while the leader forms
    // its weights, and the leader's block's PV is issued as soon as they are in its P tile. The wait for
    // the hand-over and its loads run while this QK^T does (the leader passed the first block's
    // phase before it issued its own QK^T and arrives on kReferenceReady without waiting for this
    // consumer); the move to the reference once the QK^T has retired.
    issue_scores(s_acc, flags, second, pair.first_phase ^ first, false, pair.gblock);
    trace_event(1, 8, pair.gblock);
    wait_half(first, kHighDims, pair.first_phase);
    consumer_barrier<kReferenceReady>();
    trace_event_past_barrier(1, 9, pair.gblock);
    float leader_reference[2];
    load_reference(0, leader_reference);
    retire_scores(s_acc);
    recheck_scores(s_acc, second, pair.gblock + 1);
    trace_event(1, 1, pair.gblock);
    adopt_loaded_reference(leader_reference);
    trace_event(1, 2, pair.gblock);
    release_half(first, kLowDims);
    BlockWeights weights;
    float moved_by[2];
    softmax(s_acc, flags, reference_, weights, moved_by);
    trace_event(1, 6, pair.gblock);
    // Stored before the wait below, so that ptxas keeps the softmax above it (its arithmetic
    // otherwise moves past the barrier, into the PV's issue). The follower's P tile is free: the
    // leader's last PV from it retired before the leader arrived on kReferenceReady. The proxy
    // fence: the leader's wgmma (the async proxy) reads the tile after the hand-over.
    write_weights(weights, p_tile(1, pair));
    sm90::fence_proxy_async();
    trace_event(1, 7, pair.gblock);
    publish_reference();
    consumer_barrier<kWeightsReady + 0>();
    // The hand-over comes before the PV below has read the leader's weights: the leader writes its
    // next pair's into its other P tile. It cannot come before the wait above, which keeps the
    // leader's arrivals on kReferenceReady and kWeightsReady + 0 one pair apart.
    consumer_barrier_arrive<kWeightsReady + 1>();
    accumulate_other(p_tile(0, pair), first);  // against the leader's reference: O is rescaled by moved_by after it
    trace_event(1, 3, pair.gblock);
    // Its low dims were read by QK^T only, but the block's candidate flags travel with them and
    // the softmax above read those.
    release_half(second, kLowDims);
    // Both QK^Ts of the pair have retired (the leader's before it handed over its reference).
    load_next_q(pair);
    wgmma_wait<0>();
    pin_registers(o_acc_);
    release_half(first, kHighDims);
    trace_event(1, 4, pair.gblock);
    rescale_o_if_moved(moved_by);
    accumulate_own(weights, second);
    wgmma_wait<0>();
    pin_registers(o_acc_);
    pin_registers(weights);
    if (!keeps_tile_for_output(pair)) release_half(second, kHighDims);
    trace_event(1, 5, pair.gblock);
  }

  // Whole lists with a 16-byte aligned output: O leaves through the item's last K tile (each
  // consumer's half of O into the tile's half its PV read, stage_output_half), by TMA stores the
  // follower issues in the epilogue. So neither consumer releases its half of that tile after its
  // last PV; the follower releases both for them once the stores have read the tile, at the top
  // of its next item's first pair: the next item's first block is in the other tile, and the
  // follower's own first block is the one that waits for this tile. The O stores then drain
  // while the next item's first block is multiplied, instead of holding both consumers in the
  // epilogue.
  __device__ __forceinline__ bool output_by_tile() const {
#if defined(CAKE_HOPPER_NO_O_STORES)
    return false;  // timing only: the register path, stores left out
#else
    return !kSplitItems && params_.output_aligned != 0;
#endif
  }
  __device__ __forceinline__ bool keeps_tile_for_output(const PairBlocks& pair) const {
    return pair.last && output_by_tile();
  }
  // The tile the previous item's O went out through, which the follower releases at its item's
  // first pair (the block before this pair's, so the follower's own block's tile), or -1. An item
  // without candidates in between kept it.
  __device__ __forceinline__ int pending_output_tile(const PairBlocks& pair) const {
#if defined(CAKE_RACECHECK_BUILD)
    return -1;  // released in finish_item
#else
    return pair.first && pair.gblock > 0 && output_by_tile() ? (pair.gblock - 1) & 1 : -1;
#endif
  }
  // The follower: waits for the leader's hand-over and moves to the leader's reference.
  __device__ __forceinline__ void take_leader_reference() {
    consumer_barrier<kWeightsReady + 0>();
    adopt_reference(0);
  }

  // Moves this consumer's reference, sums and O to the reference consumer `owner` handed over in
  // reference_exchange (after the hand-over barrier).
  __device__ __forceinline__ void adopt_reference(int owner) {
    adopt_handed_reference([&](int r) { return smem_.reference_exchange[owner][row0_ + 8 * r]; });
  }
  // adopt_reference in two steps, for the follower, which loads the hand-over while its QK^T runs
  // and moves to it once the QK^T has retired. The loads are asm statements so that they stay in
  // that place (as plain loads ptxas moves them and the follower spills a word at 200 registers).
  __device__ __forceinline__ void load_reference(int owner, float (&handed)[2]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      handed[r] = sm90::ld_shared_f32(smem_address(&smem_.reference_exchange[owner][row0_ + 8 * r]));
    }
  }
  __device__ __forceinline__ void adopt_loaded_reference(const float (&handed)[2]) {
    adopt_handed_reference([&](int r) { return handed[r]; });
  }
  // Row r's reference moves to handed(r), its sums and O with it.
  template <class Handed>
  __device__ __forceinline__ void adopt_handed_reference(Handed handed) {
    float rescale[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float moved = handed(r);
      rescale[r] = moved != reference_[r] ? fast_exp2(reference_[r] - moved) : 1.0f;
      reference_[r] = moved;
      rescale_add(sums_[r].rounded, sums_[r].exact, rescale[r], WeightSums{0.0f, 0.0f});
    }
    rescale_o_if_moved(rescale);
  }

  // Waits until a dim half of the block of this parity is written; wgmma (the async proxy) then
  // reads it although other threads wrote it with ordinary stores. A consumer skips the waits on
  // halves it never reads (the leader: the second block's high half; the follower: the first
  // block's low half). Its parity waits stay exact all the same: each release of such a half comes
  // after a named-barrier hand-over from the consumer that did wait on it, so no barrier runs two
  // phases ahead of a waiter. (The O tile's halves, released by the follower for both consumers,
  // come after kOutputTiled and the next item's start, well after both waited on them.)
  // trace_row: the follower's pair row, for its trace point past the barrier, before the fence
  // (-1: none).
  __device__ __forceinline__ void wait_half(int parity, int half, int phase, int trace_row = -1) {
#if !defined(CAKE_HOPPER_CONSUMERS_ALONE) && !defined(CAKE_HOPPER_NO_WAITS)
    sm90::mbarrier_wait(smem_address(&smem_.half_full[parity][half]), phase);
#endif
    if (trace_row >= 0) trace_event(1, 10, trace_row);
    sm90::fence_proxy_async();
  }
  // S[64 heads x 64 candidates] = Q K^T over the block in K tile `parity`, in two steps:
  // issue_scores issues the MMAs (the low dims' k-steps as soon as they are written, the high
  // dims' after) and loads the block's candidate flags meanwhile; retire_scores waits for them.
  // signal_issued: the leader of a pair with a second block tells the follower, which issues its
  // own QK^T only then.
  // trace_row: the follower's pair row, for its trace point past its block's high half (-1: none).
  // group_steps: issued in groups of that many k-steps, each drained before the next (0: one
  // stream; kLeaderQkGroup says why the leader's may be grouped).
  __device__ __forceinline__ void issue_scores(float (&s_acc)[32], CandidateFlags& flags, int parity, int phase,
                                               bool signal_issued, int trace_row = -1, int group_steps = 0) {
    using namespace sm90;
    const uint64_t q_desc = smem_descriptor(smem_address(smem_.q), 16, 1024);
    const uint64_t k_desc = smem_descriptor(smem_address(smem_.k[parity]), 16, 1024);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      wait_half(parity, half, phase, half == 1 ? trace_row : -1);
      if (half == 0) wgmma_fence();
#pragma unroll
      for (int step = 0; step < kQkStepsPerHalf; ++step) {  // +32 bytes within a row, a column block per 4 steps
        const int k = half * kQkStepsPerHalf + step;
        const uint32_t q_offset = ((k / 4) * kQColumnBlockBytes + (k % 4) * 32) >> 4;
        const uint32_t k_offset = ((k / 4) * kKColumnBlockBytes + (k % 4) * 32) >> 4;
#if defined(CAKE_HOPPER_NO_MMA)  // development timing only: wrong results (scores all 0)
        if (k == 0) {
#pragma unroll
          for (int e = 0; e < 32; ++e) s_acc[e] = 0.0f;
        }
        (void)q_offset;
        (void)k_offset;
#else
        wgmma_m64n64k16_ss(s_acc, q_desc + q_offset, k_desc + k_offset, k != 0);
#endif
        wgmma_drain_every(group_steps, k, kQkSteps);
      }
    }
    wgmma_commit();
    if (signal_issued) consumer_barrier_arrive<kScoresIssued>();
    // The flags came with the low half: loaded while the MMAs run, so that their latency (long
    // beside the dequant's tile stores) is not the softmax's.
    flags.low = *reinterpret_cast<const uint4*>(&smem_.valid[parity][0]);
    flags.high = *reinterpret_cast<const uint4*>(&smem_.valid[parity][4]);
  }
  __device__ __forceinline__ void retire_scores(float (&s_acc)[32]) {
    sm90::wgmma_wait<0>();
    sm90::pin_registers(s_acc);
  }
  // CAKE_HOPPER_QK_RECHECK (prefill_hopper_recheck.cuh): S of the block in K tile `parity` again,
  // compared with the retired one. Called while this consumer still holds the block's halves.
  __device__ __forceinline__ void recheck_scores(float (&s_acc)[32], int parity, int gblock) {
#if defined(CAKE_HOPPER_QK_RECHECK)
    using namespace sm90;
    const uint32_t first_hash = score_hash(s_acc);
    const uint64_t q_desc = smem_descriptor(smem_address(smem_.q), 16, 1024);
    const uint64_t k_desc = smem_descriptor(smem_address(smem_.k[parity]), 16, 1024);
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < 2 * kQkStepsPerHalf; ++k) {
      const uint32_t q_offset = ((k / 4) * kQColumnBlockBytes + (k % 4) * 32) >> 4;
      const uint32_t k_offset = ((k / 4) * kKColumnBlockBytes + (k % 4) * 32) >> 4;
      wgmma_m64n64k16_ss(s_acc, q_desc + q_offset, k_desc + k_offset, k != 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    pin_registers(s_acc);
    record_recheck(score_hash(s_acc) != first_hash, consumer_, gblock);
#else
    (void)s_acc, (void)parity, (void)gblock;
#endif
  }

  // Masks and scales S, moves the reference (given in `reference`, updated) where the block's max
  // exceeds it by more than the lazy margin, forms the block's bf16 weights and adds them to the
  // row sums (rescaled first). moved_by: the O rescale of each row (1 where nothing moved).
  __device__ __forceinline__ void softmax(float (&s_acc)[32], const CandidateFlags& flags, float (&reference)[2],
                                          BlockWeights& weights, float (&moved_by)[2]) {
    move_reference(s_acc, flags, reference, moved_by);
    form_weights(s_acc, reference, weights, moved_by);
  }

  // The softmax's first half: masks and scales S, and moves the reference where the block's max
  // exceeds it by more than the lazy margin (moved_by: the rescale of each row, 1 where nothing
  // moved).
  __device__ __forceinline__ void move_reference(float (&s_acc)[32], const CandidateFlags& block_flags,
                                                 float (&reference)[2], float (&moved_by)[2]) {
    // s_acc[4 i + e]: row row0 + 8 (e / 2), candidate 8 i + 2 (lane % 4) + e % 2.
    // Flag word i covers columns 8 i .. 8 i + 7, column c in bit 4 (c % 8).
    const uint32_t flags[8] = {block_flags.low.x,  block_flags.low.y,  block_flags.low.z,  block_flags.low.w,
                               block_flags.high.x, block_flags.high.y, block_flags.high.z, block_flags.high.w};
    const int flag_shift = 8 * (lane_ % 4);
    float block_max[2] = {-INFINITY, -INFINITY};
    // A block whose 64 candidates are all valid (every block but a list's last, unless the lists
    // hold -1 entries) skips the flag tests: the same logits, ~80 of the owner's ~310 softmax
    // instructions a block fewer. The flags are the same words in every thread, so the branch does not
    // diverge; only the masking is in it (the scaling and the max are shared: less code).
#pragma unroll
    for (int i = 0; i < 32; ++i) s_acc[i] = masked_logit2(s_acc[i], true, score_scale_);
    const uint32_t all = flags[0] & flags[1] & flags[2] & flags[3] & flags[4] & flags[5] & flags[6] & flags[7];
    if (all != 0xFFFFFFFFu) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const uint32_t pair_flags = flags[i] >> flag_shift;
        const bool valid_even = (pair_flags & 1u) != 0;
        const bool valid_odd = (pair_flags & 16u) != 0;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (!(e % 2 == 0 ? valid_even : valid_odd)) s_acc[4 * i + e] = -INFINITY;
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 32; ++i) block_max[(i % 4) / 2] = fmaxf(block_max[(i % 4) / 2], s_acc[i]);
    // The reference moves only where some lane's own max passes it by the margin: a warp vote
    // first, and the quad's max by shuffles only when the vote says a row may move (an item's
    // first blocks, then rarely): beside the dequant's tile stores the shuffles' results come late
    // (docs/hopper_kernel.md, item 7). The same references as taking the quad max every block.
    const bool may_move = block_max[0] > reference[0] + kLazyRescaleLog2 || block_max[1] > reference[1] + kLazyRescaleLog2;
    if (!__any_sync(0xffffffffu, may_move)) {
      moved_by[0] = moved_by[1] = 1.0f;
      return;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float new_reference = next_reference(reference[r], quad_max(block_max[r]));
      moved_by[r] = new_reference != reference[r] ? fast_exp2(reference[r] - new_reference) : 1.0f;
      reference[r] = new_reference;
    }
  }

  // The softmax's second half: the block's bf16 weights against `reference` (already moved), and
  // the row sums rescaled by moved_by plus the block's.
  __device__ __forceinline__ void form_weights(const float (&s_acc)[32], const float (&reference)[2],
                                               BlockWeights& weights, const float (&moved_by)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float base = softmax_reference(reference[r]);
      WeightSums block = {0.0f, 0.0f};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if constexpr (kMmaRowSums || kExactNormaliser) {
          weights[i][r] = add_weight_pair_exact(block.exact, s_acc[4 * i + 2 * r], s_acc[4 * i + 2 * r + 1], base);
        } else {
          weights[i][r] = add_weight_pair(block, s_acc[4 * i + 2 * r], s_acc[4 * i + 2 * r + 1], base);
        }
      }
      rescale_add(sums_[r].rounded, sums_[r].exact, moved_by[r], block);
    }
  }

  // Consumer c's P tile in this pair (shared-memory address).
  __device__ __forceinline__ uint32_t p_tile(int c, const PairBlocks& pair) const {
    return smem_address(c == 0 ? smem_.leader_p[pair.parity] : smem_.follower_p);
  }

  // This consumer's weights into its P tile, for the other consumer, whose wgmma reads the tile
  // (the async proxy: the caller fences before the hand-over; the leader issues its own PV first).
  // weights[i][r] is the fragment of the 8 x 8 matrix (rows 8 r.. of the warp's 16, columns 8 i..):
  // four stmatrix, matrix m of the k-th holding (i, r) = (2 k + m / 2, m % 2); lane l gives the
  // address of row l % 8 of matrix l / 8 (the same bytes as a 4-byte store a pair, a quarter of
  // the instructions).
  __device__ __forceinline__ void write_weights(const BlockWeights& weights, uint32_t p_tile) {
    const int matrix = lane_ / 8;
    const int row = (row0_ - lane_ / 4) + 8 * (matrix % 2) + lane_ % 8;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t pairs[4] = {weights[2 * k][0], weights[2 * k][1], weights[2 * k + 1][0], weights[2 * k + 1][1]};
      sm90::stmatrix_x4(p_tile + p_tile_offset(row, 8 * (2 * k + matrix / 2)), pairs);
    }
  }
  // Q's RoPE dims (448..511: column block 7 of the tile) times 2^-9. The dequant writes K's NoPE
  // dims as 2^-9 times the cache's values (one multiply a pair: nvfp4_bit_decode.cuh) and copies
  // its RoPE dims as they are, so with Q's RoPE dims scaled too every score is 2^-9 times the
  // true one (powers of two: exact), which score_scale_ undoes. Each of the 256 consumer threads
  // scales 32 bytes of the block (whatever their swizzled place); padding rows are zeros.
  __device__ __forceinline__ void scale_q_rope() {
    static_assert(nvfp4::kNopeDim == (kColumnBlocks - 1) * kColumnBlockDims, "RoPE is Q's last column block");
    constexpr int kScalingThreads = kConsumerThreads;
    const int scaler = consumer_ * kWarpgroupThreads + threadIdx.x % kWarpgroupThreads;
    constexpr int kChunksPerThread = kQColumnBlockBytes / 16 / kScalingThreads;  // 2
    uint4* chunk = reinterpret_cast<uint4*>(smem_.q + (kColumnBlocks - 1) * kQColumnBlockBytes) + scaler * kChunksPerThread;
#pragma unroll
    for (int k = 0; k < kChunksPerThread; ++k) {
      uint4 v = chunk[k];
      v.x = bf16x2_mul(v.x, kBitDecodeFactorBf16x2);
      v.y = bf16x2_mul(v.y, kBitDecodeFactorBf16x2);
      v.z = bf16x2_mul(v.z, kBitDecodeFactorBf16x2);
      v.w = bf16x2_mul(v.w, kBitDecodeFactorBf16x2);
      chunk[k] = v;
    }
  }

  // This consumer's reference into reference_exchange[consumer], for the other consumer (read
  // after the next hand-over barrier).
  __device__ __forceinline__ void publish_reference() {
    if (lane_ % 4 == 0) {
      smem_.reference_exchange[consumer_][row0_] = reference_[0];
      smem_.reference_exchange[consumer_][row0_ + 8] = reference_[1];
    }
  }

  __device__ __forceinline__ void rescale_o_if_moved(const float (&moved_by)[2]) {
    if (__any_sync(0xffffffffu, moved_by[0] != 1.0f || moved_by[1] != 1.0f)) scale_o(moved_by);  // rare
  }
  __device__ __forceinline__ void scale_o(const float (&factor)[2]) {
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      o_acc_[4 * i + 0] *= factor[0], o_acc_[4 * i + 1] *= factor[0];
      o_acc_[4 * i + 2] *= factor[1], o_acc_[4 * i + 3] *= factor[1];
    }
#if defined(CAKE_HOPPER_MMA_ROW_SUMS)
    rounded_sums_[0] *= factor[0], rounded_sums_[1] *= factor[1];  // the leader's (the follower's stay 0)
#endif
  }

  // The leader (CAKE_HOPPER_MMA_ROW_SUMS): a block's row sums (retired) into the running ones.
  // Every column of the m64n8 product is the row's sum: rows row0 and row0 + 8 are elements 0, 2.
  __device__ __forceinline__ void add_block_sums(float (&block_sums)[4]) {
#if defined(CAKE_HOPPER_MMA_ROW_SUMS)
    sm90::pin_registers(block_sums);
    rounded_sums_[0] += block_sums[0];
    rounded_sums_[1] += block_sums[2];
#else
    (void)block_sums;
#endif
  }

  // The ones tile as the B operand of every row-sum k-step (the same 16 x 8 ones each time).
  __device__ __forceinline__ uint64_t ones_descriptor() const {
#if defined(CAKE_HOPPER_MMA_ROW_SUMS)
    return sm90::smem_descriptor(smem_address(smem_.ones), 16, 1024);
#else
    return 0;
#endif
  }

  // V rows 16 kk .. 16 kk + 15 of the block in K tile `parity`, quarter pv_quarter(step) of the dims.
  __device__ __forceinline__ uint64_t v_descriptor(int parity, int step, int kk) const {
    const uint32_t base = smem_address(smem_.k[parity]) + 2 * pv_quarter(step) * kKColumnBlockBytes +
                          kk * 16 * kTileRowBytes;
    return sm90::smem_descriptor(base, kKColumnBlockBytes, 1024);
  }

  // O[64 x this consumer's 256 dims] += the own block's weights (registers) x V; one commit group.
  // block_sums (the leader's, CAKE_HOPPER_MMA_ROW_SUMS): the weights' row sums too, by wgmmas
  // against the ones tile in the same group (add_block_sums once it has retired).
  __device__ __forceinline__ void accumulate_own(const BlockWeights& weights, int parity,
                                                 float (*block_sums)[4] = nullptr) {
    using namespace sm90;
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < kPvDimSteps; ++step) {
      float(&o_part)[64] = *reinterpret_cast<float(*)[64]>(o_acc_ + 64 * step);
#pragma unroll
      for (int kk = 0; kk < kPvSteps; ++kk) {
        const uint32_t a[4] = {weights[2 * kk][0], weights[2 * kk][1], weights[2 * kk + 1][0], weights[2 * kk + 1][1]};
#if defined(CAKE_HOPPER_NO_MMA)
        sm90::keep_registers(a);
        (void)o_part;
#else
        wgmma_m64n128k16_rs_bt(o_part, a, v_descriptor(parity, step, kk), true);
#endif
      }
    }
    if (block_sums != nullptr) {
#pragma unroll
      for (int kk = 0; kk < kPvSteps; ++kk) {
        const uint32_t a[4] = {weights[2 * kk][0], weights[2 * kk][1], weights[2 * kk + 1][0], weights[2 * kk + 1][1]};
#if defined(CAKE_HOPPER_NO_MMA)
        if (kk == 0) (*block_sums)[0] = (*block_sums)[1] = (*block_sums)[2] = (*block_sums)[3] = 0.0f;
        sm90::keep_registers(a);
#else
        wgmma_m64n8k16_rs(*block_sums, a, ones_descriptor(), kk != 0);
#endif
      }
    }
    wgmma_commit();
  }

  // O[64 x this consumer's 256 dims] += the other consumer's weights (its P tile) x V; one
  // commit group. block_sums as for accumulate_own.
  __device__ __forceinline__ void accumulate_other(uint32_t p_tile, int parity, float (*block_sums)[4] = nullptr) {
    using namespace sm90;
    const uint64_t p_desc = smem_descriptor(p_tile, 16, 1024);
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < kPvDimSteps; ++step) {
      float(&o_part)[64] = *reinterpret_cast<float(*)[64]>(o_acc_ + 64 * step);
#pragma unroll
      for (int kk = 0; kk < kPvSteps; ++kk) {  // 16 candidates a step: +32 bytes of P rows
#if defined(CAKE_HOPPER_NO_MMA)
        (void)o_part;
#else
        wgmma_m64n128k16_ss_bt(o_part, p_desc + ((kk * 32) >> 4), v_descriptor(parity, step, kk), true);
#endif
      }
    }
    if (block_sums != nullptr) {
#pragma unroll
      for (int kk = 0; kk < kPvSteps; ++kk) {
#if defined(CAKE_HOPPER_NO_MMA)
        if (kk == 0) (*block_sums)[0] = (*block_sums)[1] = (*block_sums)[2] = (*block_sums)[3] = 0.0f;
#else
        wgmma_m64n8k16_ss(*block_sums, p_desc + ((kk * 32) >> 4), ones_descriptor(), kk != 0);
#endif
      }
    }
    wgmma_commit();
  }

  // The follower in the last pair of a whole-list item: the next item's whole Q, both halves.
  __device__ __forceinline__ void load_next_q(const PairBlocks& pair) {
    if (pair.next_q_item >= 0 && copies_thread()) {
      load_q_half(pair.next_q_item, 0);
      load_q_half(pair.next_q_item, 1);
    }
  }

};

}  // namespace cake::cuda::hopper
