// The converter warpgroups of the fused 64-head Hopper kernel. Converter c takes the CTA's chunks of
// parity c (64 candidates each, over all its items). For each it converts all 64 rows (NVFP4 ->
// bf16, two rows a thread, four threads a row, the small-heads kernel's group order) straight into
// the register A fragments of QK^T, stores the same fragments into the chunk's K tile (V for PV),
// multiplies S^T[64 candidates x 64 heads] = K Q^T as it goes (wgmma, A from registers), takes the
// RoPE k-steps' fragments from the K tile (accumulator 1 copied them there), then runs the chunk's
// softmax on S^T: each head's lazy reference (handed over by the other converter's previous chunk),
// the bf16 weights into P (transposed, stmatrix), the weight sums and O rescale factors for the
// accumulators. The code bytes of its next chunk (two chunks on) are loaded while this one is
// converted, group by group, into the registers just converted.
#pragma once

#include <cuda_bf16.h>

#include "../../common/softmax_finalize.h"
#include "../common/candidate_lists.cuh"
#include "../common/decode_params.h"
#include "../common/nvfp4_dequant.cuh"
#include "../common/online_softmax.cuh"
#include "../common/ptx_primitives.cuh"
#include "../hopper/nvfp4_bit_decode.cuh"
#include "../hopper/sm90_primitives.cuh"
#include "../hopper_small/sm90_small_primitives.cuh"
#include "../portable/sm80_primitives.cuh"  // ldmatrix_x4
#include "fused_layout.h"
#include "fused_primitives.cuh"
#include "fused_work.cuh"

namespace cake::cuda::hopper_fused {

template <int kConverter>
class ConvertRole {
  // Group slots of a row this thread converts: half 0 slots 0..3 (groups q + 4 i), half 1 slots
  // 4..6 (groups 16 + q + 4 i).
  static constexpr int kSlots0 = hopper_small::group_slots(0);
  static constexpr int kSlots = kSlots0 + hopper_small::group_slots(1);  // 7
  static constexpr int kQLoads = kHeads * (nvfp4::kHeadDim / 8) / kWarpgroupThreads;  // 32 16-byte words a thread
  // Q's loads in flight a thread (batches of them, each stored before the next is loaded).
#ifdef CAKE_FUSED_Q_BATCH
  static constexpr int kQBatch = CAKE_FUSED_Q_BATCH;
#else
  static constexpr int kQBatch = 8;
#endif
  static_assert(kQLoads % kQBatch == 0, "whole batches");
  // QK^T groups (two k-steps each) left in flight while the next pair converts: their A registers
  // stay live until they retire.
#ifdef CAKE_FUSED_GROUPS_IN_FLIGHT
  static constexpr int kGroupsInFlight = CAKE_FUSED_GROUPS_IN_FLIGHT;
#else
  static constexpr int kGroupsInFlight = 1;
#endif

 public:
  __device__ ConvertRole(const DecodeParams& params, SharedStorage& smem) : params_(params), smem_(smem) {}

  __device__ void run() {
    using namespace sm90;
    int g = converter_;  // this converter's chunks: g, g + 2, ... over the CTA's walk
    if (wait_info(g).item < 0) return;
    {
      RowEntry first[2];
      table_rows(g, first);
      load_rows(first);
    }
    for (;; g += 2) {
      const int c = converter_;
      // The chunk's place in its item, read from the table where needed (its slot keeps chunk g
      // until PV of it has retired): not kept in registers across the chunk.
      const ChunkInfo& info = smem_.info[g % kTableSlots];
      if (info.flags & kFirstChunk) {
        load_q(info);
      } else if (info.flags & kSecondChunk) {
        mbarrier_wait<kWaitSuspendHintNs>(smem_address(&smem_.q_full), info.ordinal & 1);
      }
      wait_tile_half(g, 0);  // half 1: in convert(), before its first k-step
      float s_acc[32];
      convert(g, s_acc);
      rope_steps(g, s_acc);
      wgmma_wait<0>();
      pin_registers(s_acc);
      if (smem_.info[g % kTableSlots].flags & kLastChunk) mbarrier_arrive(smem_address(&smem_.q_free));
      softmax(g, s_acc);
      fence_proxy_async();  // the K tile and P are read by wgmma
      mbarrier_arrive(smem_address(&smem_.p_full[c]));
      if (wait_info(g + 2).item < 0) break;
    }
  }

 private:
  struct RowBytes {
    uint2 groups[kSlots];
  };

  const DecodeParams& params_;
  SharedStorage& smem_;
  static constexpr int converter_ = kConverter;
  // The thread's place, read from %tid.x where it is used (asm volatile: not kept in registers
  // across the chunk loop, where ptxas would rather spill them at 96 registers a thread).
  static __device__ __forceinline__ int thread_index() {
    uint32_t t;
    asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
    return int(t % kWarpgroupThreads);
  }
  static __device__ __forceinline__ int thread_() { return thread_index(); }
  static __device__ __forceinline__ int warp_() { return thread_index() / 32; }
  static __device__ __forceinline__ int lane_() { return thread_index() % 32; }
  static __device__ __forceinline__ int quad_() { return thread_index() % 4; }
  // its candidate rows in a chunk: row0 and row0 + 8
  static __device__ __forceinline__ int row0_() { return (thread_index() / 32) * 16 + (thread_index() % 32) / 4; }
  static __device__ __forceinline__ uint32_t lane_offset_() {
    return sm90::fragment_x4_lane_offset(thread_index());
  }
  RowBytes rows_[2];

  __device__ __forceinline__ ChunkInfo wait_info(int g) const {
    const int slot = g % kTableSlots;
    sm90::mbarrier_wait<kWaitSuspendHintNs>(smem_address(&smem_.table_full[slot]), (g / kTableSlots) & 1);
    return smem_.info[slot];
  }
  __device__ __forceinline__ void table_rows(int g, RowEntry (&rows)[2]) const {
    const int slot = g % kTableSlots;
    sm90::mbarrier_wait<kWaitSuspendHintNs>(smem_address(&smem_.table_full[slot]), (g / kTableSlots) & 1);
    rows[0] = smem_.rows[slot][row0_()];
    rows[1] = smem_.rows[slot][row0_() + 8];
  }

  // K tile g % 2's column blocks of half `half` are free: accumulator `half`'s PV of chunk g - 2
  // has retired.
  __device__ __forceinline__ void wait_tile_half(int g, int half) const {
    if (g >= 2) sm90::mbarrier_wait<kWaitSuspendHintNs>(smem_address(&smem_.k_empty[g % 2][half]), ((g >> 1) - 1) & 1);
  }

  // Slot `slot`'s 8 code bytes of a row (zeros for a masked row: nothing read).
  __device__ __forceinline__ void load_group(RowBytes& row, RowEntry e, int slot) const {
    const int group = slot < kSlots0 ? hopper_small::slot_group(0, quad_(), slot)
                                     : hopper_small::slot_group(1, quad_(), slot - kSlots0);
    row.groups[slot] = entry_valid(e) ? ld_global_nc_8_no_l1(entry_data(e) + 8 * group) : make_uint2(0, 0);
  }
  __device__ __forceinline__ void load_rows(const RowEntry (&rows)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int slot = 0; slot < kSlots; ++slot) load_group(rows_[r], rows[r], slot);
    }
  }

  // The scale bytes of this thread's groups of chunk g's two rows, from the table's copy of their
  // scale rows (word i byte j: group 4 i + j): byte q of words 0..3 (half 0's slots) in
  // scales[r][0], of words 4..6 (half 1's) in scales[r][1], slot order.
  __device__ __forceinline__ void read_scales(int g, uint32_t (&scales)[2][2]) const {
    const int slot = g % kTableSlots;
    sm90::mbarrier_wait<kWaitSuspendHintNs>(smem_address(&smem_.scales_full[slot]), (g / kTableSlots) & 1);
    const uint32_t pick = uint32_t(quad_()) | (uint32_t(quad_() + 4) << 4);  // byte q of two words
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint4* raw = reinterpret_cast<const uint4*>(smem_.scale_rows[slot][row0_() + 8 * r]);
      const uint4 low = raw[0], high = raw[1];
      scales[r][0] = byte_perm(byte_perm(low.x, low.y, pick), byte_perm(low.z, low.w, pick), 0x5410u);
      scales[r][1] = byte_perm(byte_perm(high.x, high.y, pick), byte_perm(high.z, high.w, pick), 0x5410u);
    }
  }

  // The item's Q (its 64 heads x 512 dims) into the two Q halves in the K tile's order, the NoPE
  // dims times 2^9 (the converted K is 2^-9 times the cache's values there), by the converter of
  // the item's first chunk, once the previous item's last QK^T retired (q_free); then q_full for
  // the other converter. Also asks L2 for the CTA's next item's Q.
  __device__ void load_q(const ChunkInfo& info) {
    using namespace sm90;
    if (info.ordinal > 0) mbarrier_wait<kWaitSuspendHintNs>(smem_address(&smem_.q_free), (info.ordinal - 1) & 1);
    const WorkRows rows = work_rows<kHeads, false>(params_, info.item);
    const __nv_bfloat16* q_item = params_.q + (int64_t(rows.token) * params_.num_heads + rows.head0) * nvfp4::kHeadDim;
    // This thread's word of each of its heads is the same (index % 64 = thread % 64), its heads
    // thread / 64 + 2 k: where the word's pieces go in a head's row is computed once (QWordPlace),
    // each head adds its row and its swizzle.
    const int word = thread_() % 64;
    const QWordPlace place = q_word_place(word);
#pragma unroll 1
    for (int batch = 0; batch < kQLoads / kQBatch; ++batch) {
      uint4 words[kQBatch];
#pragma unroll
      for (int k = 0; k < kQBatch; ++k) {
        const int head = thread_() / 64 + 2 * (kQBatch * batch + k);
        words[k] = sm90::ld_global_nc_16(q_item + head * nvfp4::kHeadDim + 8 * word);
      }
#pragma unroll
      for (int k = 0; k < kQBatch; ++k) store_q_word(place, thread_() / 64 + 2 * (kQBatch * batch + k), words[k]);
    }
    fence_proxy_async();  // Q is read by wgmma
    named_barrier<kQStored + kConverter, kWarpgroupThreads>();  // its own warps' QK^T
    mbarrier_arrive(smem_address(&smem_.q_full));
    if (thread_() == 0) {
      const int later = info.item + gridDim.x;
      if (later < num_items(params_)) {
        const WorkRows next = work_rows<kHeads, false>(params_, later);
        prefetch_l2(params_.q + (int64_t(next.token) * params_.num_heads + next.head0) * nvfp4::kHeadDim,
                    kHeads * nvfp4::kHeadDim * 2);
      }
    }
  }

  // Where Q's word `word` (dims 8 word ..) goes in a head's row of the Q halves, the head's row
  // (head * 128) and swizzle ((16-byte chunk ^ head % 8) * 16) left out: NoPE words 4 pairs (each
  // the byte offset of its 16-byte chunk in the row, its offset within the chunk and its column
  // block), RoPE words one 16-byte chunk.
  struct QWordPlace {
    uint32_t base;        // the Q half's shared address plus the column block's offset (pair 0)
    uint32_t block_step;  // 0 or one column block: pairs 2, 3 (k-step + 1) may cross into the next
    uint32_t chunk[4];    // 16-byte chunk (0..7) of each pair in the row
    uint32_t within[4];   // byte offset of each pair within its chunk
    bool rope;            // a RoPE word: one 16-byte chunk, as loaded
  };
  __device__ __forceinline__ QWordPlace q_word_place(int word) const {
    QWordPlace place{};
    if (word < hopper_small::kRopeFirstWord) {
      // Word 2 g + b of group g = first_group(h) + local: lane q = local % 4, slot local / 4; k-step
      // 4 slot + 2 b + t holds (dim 2t, 2t + 4) at position 2 q and (2t + 1, 2t + 5) at 2 q + 8.
      const int group = word / 2;
      const int half = group < hopper_small::first_group(1) ? 0 : 1;
      const int local = group - hopper_small::first_group(half);
      const int q = hopper_small::group_lane(half, local);
      const int kstep = 4 * hopper_small::group_slot(half, local) + 2 * (word % 2);
      place.base = smem_address(smem_.q[half]) + (kstep / 4) * kQColumnBlockBytes;
      const int positions[4] = {2 * q, 2 * q + 8, 2 * q, 2 * q + 8};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int byte_in_row = ((kstep + i / 2) % 4) * 32 + 2 * positions[i];
        place.chunk[i] = byte_in_row / 16;
        place.within[i] = byte_in_row % 16;
      }
      place.block_step = ((kstep + 1) / 4 != kstep / 4) ? kQColumnBlockBytes : 0;
    } else {
      place.rope = true;
      const int k = word - hopper_small::kRopeFirstWord;  // RoPE dims 448 + 8 k ..: k-step 12 + k / 2
      const int kstep = kRopeKStep + k / 2;
      place.base = smem_address(smem_.q[1]) + (kstep / 4) * kQColumnBlockBytes;
      place.chunk[0] = ((kstep % 4) * 32 + 16 * (k % 2)) / 16;
    }
    return place;
  }
  // Q's word (8 dims) of row `head` at the positions the K tile holds them, the NoPE dims times
  // 2^9 (the converted K is 2^-9 times the cache's values there).
  __device__ __forceinline__ void store_q_word(const QWordPlace& place, int head, uint4 dims) const {
    using namespace sm90;
    const uint32_t row = place.base + head * kTileRowBytes;
    const uint32_t swizzle = head % 8;
    if (!place.rope) {
      dims.x = bf16x2_mul(dims.x, hopper::kBitDecodeUnscaleBf16x2);
      dims.y = bf16x2_mul(dims.y, hopper::kBitDecodeUnscaleBf16x2);
      dims.z = bf16x2_mul(dims.z, hopper::kBitDecodeUnscaleBf16x2);
      dims.w = bf16x2_mul(dims.w, hopper::kBitDecodeUnscaleBf16x2);
      const uint32_t value[4] = {byte_perm(dims.x, dims.z, 0x5410u), byte_perm(dims.x, dims.z, 0x7632u),
                                 byte_perm(dims.y, dims.w, 0x5410u), byte_perm(dims.y, dims.w, 0x7632u)};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        st_shared_4(row + (i / 2) * place.block_step + ((place.chunk[i] ^ swizzle) * 16 | place.within[i]), value[i]);
      }
    } else {
      st_shared_16(row + (place.chunk[0] ^ swizzle) * 16, dims.x, dims.y, dims.z, dims.w);
    }
  }

  // Two k-steps of half `half` from the pairs of this thread's two rows: each k-step's A fragment
  // into the K tile (stmatrix) and into QK^T; one commit group, then a wait for the group before
  // it, whose registers the next conversion reuses.
  __device__ __forceinline__ void store_and_multiply(float (&s_acc)[32], uint32_t k_tile, int half, int kstep,
                                                     const uint32_t (&row0)[4], const uint32_t (&row1)[4],
                                                     bool first) {
    using namespace sm90;
    const uint64_t q_desc = smem_descriptor(smem_address(smem_.q[half]), 16, 1024);
    wgmma_fence();
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const int step = kstep + t;
      const uint32_t a[4] = {row0[2 * t], row1[2 * t], row0[2 * t + 1], row1[2 * t + 1]};
      stmatrix_x4(k_tile + (4 * half + step / 4) * kKColumnBlockBytes + (lane_offset_() ^ (32 * (step % 4))), a);
      const uint32_t offset = (step / 4) * kQColumnBlockBytes + (step % 4) * 32;
#ifdef CAKE_FUSED_NO_QK  // development timing only: no QK^T (the scores are whatever s_acc holds)
      keep_registers(a);
      (void)offset;
      (void)q_desc;
      (void)first;
#else
      wgmma_m64n64k16_rs(s_acc, a, q_desc + (offset >> 4), !(first && t == 0));
#endif
    }
    wgmma_commit();
    wgmma_wait<kGroupsInFlight>();
  }

  // Converts this thread's part of the chunk's two rows into K tile g % 2 and the 28 NoPE k-steps
  // of QK^T, reloading each group slot (and each half's scales) with chunk g + 2's rows once it is
  // converted.
  __device__ void convert(int g, float (&s_acc)[32]) {
    const uint32_t k_tile = smem_address(smem_.k[g % 2]);
    uint32_t scales[2][2];
    read_scales(g, scales);
#ifdef CAKE_FUSED_NO_QK
#pragma unroll
    for (int i = 0; i < 32; ++i) s_acc[i] = 0.0f;
#endif
#pragma unroll
    for (int slot = 0; slot < kSlots; ++slot) {
      const int half = slot < kSlots0 ? 0 : 1;
      const int local_slot = slot - (half == 0 ? 0 : kSlots0);
      if (slot == kSlots0) wait_tile_half(g, 1);
      uint32_t scale[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) scale[r] = hopper::e4m3_to_decode_scale(uint8_t(scales[r][half] >> (8 * local_slot)));
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        uint32_t pairs0[4], pairs1[4];
        hopper::e2m1x8_to_bf16_pairs(b == 0 ? rows_[0].groups[slot].x : rows_[0].groups[slot].y, scale[0], pairs0);
        hopper::e2m1x8_to_bf16_pairs(b == 0 ? rows_[1].groups[slot].x : rows_[1].groups[slot].y, scale[1], pairs1);
        store_and_multiply(s_acc, k_tile, half, 4 * local_slot + 2 * b, pairs0, pairs1, slot == 0 && b == 0);
      }
      // Chunk g + 2's rows (accumulator 0 wrote them after PV of chunk g - 2), read from the table
      // at each reload rather than kept in registers.
      const int next_slot = (g + 2) % kTableSlots;
      if (slot == 0) sm90::mbarrier_wait<kWaitSuspendHintNs>(smem_address(&smem_.table_full[next_slot]), ((g + 2) / kTableSlots) & 1);
#pragma unroll
      for (int r = 0; r < 2; ++r) load_group(rows_[r], smem_.rows[next_slot][row0_() + 8 * r], slot);
    }
  }

  // The 4 RoPE k-steps: their A fragments from the K tile's RoPE column block (accumulator 1's
  // copies of chunk g, zeros for masked rows), once they have landed.
  __device__ __forceinline__ void rope_steps(int g, float (&s_acc)[32]) {
    using namespace sm90;
    const uint32_t k_tile = smem_address(smem_.k[g % 2]);
    mbarrier_wait<kWaitSuspendHintNs>(smem_address(&smem_.rope_full[g % 2]), (g >> 1) & 1);
    const uint64_t q_desc = smem_descriptor(smem_address(smem_.q[1]), 16, 1024);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int step = kRopeKStep + i;
      uint32_t a[4];
      cake::cuda::ldmatrix_x4(a, k_tile + kRopeColumnBlock * kKColumnBlockBytes + (lane_offset_() ^ (32 * i)));
      wgmma_fence();
      const uint32_t offset = (step / 4) * kQColumnBlockBytes + (step % 4) * 32;
#ifdef CAKE_FUSED_NO_QK
      keep_registers(a);
      (void)offset;
#else
      wgmma_m64n64k16_rs(s_acc, a, q_desc + (offset >> 4), true);
#endif
      wgmma_commit();
      wgmma_wait<1>();
    }
  }

  // The chunk's softmax over S^T: s_acc[4 n + 2 h + e] is candidate row0 + 8 h, head 8 n + 2 q + e.
  // Each head's reference comes from the other converter's previous chunk of the item (-inf at
  // the item's first); it moves only when the chunk's max passes it by more than 2^8 (a vote, then
  // the maxima exchanged among this warpgroup's warps). The weights go into P (transposed: P
  // [head][candidate]), their sums by warp and head into exact_sums / rounded_sums, each head's
  // new reference into reference[c] and its O rescale factor into rescale[c].
  __device__ void softmax(int g, float (&s_acc)[32]) {
    using namespace sm90;
    const int c = converter_;
    const bool first = (smem_.info[g % kTableSlots].flags & kFirstChunk) != 0;
    // The chunk's rows' flags, from the table (its slot keeps chunk g until PV of it has retired).
    const bool valid[2] = {entry_valid(smem_.rows[g % kTableSlots][row0_()]),
                           entry_valid(smem_.rows[g % kTableSlots][row0_() + 8])};
    // The other converter wrote the reference after chunk g - 1 (its p_full arrival), and has read
    // this converter's from chunk g - 2, which this chunk's rewrites (also at an item's first chunk:
    // the other converter may still be in the softmax of the previous item's last).
    if (g >= 1) mbarrier_wait<kWaitSuspendHintNs>(smem_address(&smem_.p_full[1 - c]), ((g - 1) >> 1) & 1);
    const float score_scale = score_scale_or_nan(params_.score_scale_log2);
#pragma unroll
    for (int i = 0; i < 32; ++i) s_acc[i] = masked_logit2(s_acc[i], valid[(i / 2) % 2], score_scale);
    const float* ref_in = smem_.reference[1 - c];
    // Does any head of the chunk pass its reference by the lazy margin?
    bool may_move = false;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const float2 ref = first ? make_float2(-INFINITY, -INFINITY)
                               : *reinterpret_cast<const float2*>(&ref_in[8 * n + 2 * quad_()]);
      may_move = may_move || fmaxf(s_acc[4 * n], s_acc[4 * n + 2]) > ref.x + kLazyRescaleLog2 ||
                 fmaxf(s_acc[4 * n + 1], s_acc[4 * n + 3]) > ref.y + kLazyRescaleLog2;
    }
    may_move = named_barrier_or<kMayMove + kConverter, kWarpgroupThreads>(may_move);
    const float* ref_now = ref_in;  // the references the weights take (the previous ones, or the moved)
    if (may_move) {
      exchange_maxima(s_acc, first);
      ref_now = smem_.chunk_max[c][warp_()];
    }
    // Weights, P, sums (per head: over this thread's two rows).
    float exact[16], rounded[16];
    uint32_t packed[8][2];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const float2 ref = !may_move && first ? make_float2(-INFINITY, -INFINITY)
                                            : *reinterpret_cast<const float2*>(&ref_now[8 * n + 2 * quad_()]);
      const float reference0 = softmax_reference(ref.x), reference1 = softmax_reference(ref.y);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float w0 = fast_exp2_ftz(s_acc[4 * n + 2 * h] - reference0);
        const float w1 = fast_exp2_ftz(s_acc[4 * n + 2 * h + 1] - reference1);
        packed[n][h] = pack_bf16x2(w0, w1);
        const float r0 = __uint_as_float(packed[n][h] << 16), r1 = __uint_as_float(packed[n][h] & 0xFFFF0000u);
        if (h == 0) {
          exact[2 * n] = w0, exact[2 * n + 1] = w1, rounded[2 * n] = r0, rounded[2 * n + 1] = r1;
        } else {
          exact[2 * n] += w0, exact[2 * n + 1] += w1, rounded[2 * n] += r0, rounded[2 * n + 1] += r1;
        }
      }
      if (warp_() == 0 && lane_() < 4) {  // the references the next chunk starts from
        *reinterpret_cast<float2*>(&smem_.reference[c][8 * n + 2 * quad_()]) =
            !may_move && first ? make_float2(-INFINITY, -INFINITY) : ref;
      }
    }
    // P[head][candidate]: matrix i of stmatrix m holds heads 8 (2 m + i / 2) .., candidates
    // 16 w + 8 (i % 2) ..; this lane addresses head 8 (2 m + i / 2) + lane % 8.
    const uint32_t p_tile = smem_address(smem_.p[g % 2]);
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int i = lane_() / 8;
      const int head = 8 * (2 * m + i / 2) + lane_() % 8;
      const int block = 2 * warp_() + i % 2;
      const uint32_t regs[4] = {packed[2 * m][0], packed[2 * m][1], packed[2 * m + 1][0], packed[2 * m + 1][1]};
      stmatrix_x4_trans(p_tile + head * kTileRowBytes + ((block ^ (head % 8)) * 16), regs);
    }
    // The warp's sums of each head: a butterfly over the 8 lanes of each quad column leaves lane
    // l with heads 8 (l / 4) + 2 q + e.
    reduce_columns(exact);
    reduce_columns(rounded);
    const int head = 8 * (lane_() / 4) + 2 * quad_();
    *reinterpret_cast<float2*>(&smem_.exact_sums[c][warp_()][head]) = make_float2(exact[0], exact[1]);
    *reinterpret_cast<float2*>(&smem_.rounded_sums[c][warp_()][head]) = make_float2(rounded[0], rounded[1]);
    if (!may_move && warp_() == 0 && lane_() < 4) {
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        *reinterpret_cast<float2*>(&smem_.rescale[c][8 * n + 2 * quad_()]) = make_float2(1.0f, 1.0f);
      }
    }
  }

  static __device__ __forceinline__ float select_f32(bool p, float a, float b) {
    float r;
    asm("{\n.reg .pred q;\nsetp.ne.b32 q, %1, 0;\nselp.f32 %0, %2, %3, q;\n}\n" : "=f"(r) : "r"(int(p)), "f"(a), "f"(b));
    return r;
  }
  // Sums v[2 n + e] over the quad column's 8 lanes (xor 16, 8, 4), keeping in v[0], v[1] those of
  // n = lane / 4: each round a lane sends the half it gives away and adds what it receives.
  __device__ __forceinline__ void reduce_columns(float (&v)[16]) const {
    reduce_round<8>(v);
    reduce_round<4>(v);
    reduce_round<2>(v);
  }
  // One round over lane bit 2 kWidth: v[0 .. kWidth) keeps this lane's half (the upper half of
  // the 2 kWidth values where the bit is set) plus the other lane's.
  template <int kWidth>
  __device__ __forceinline__ void reduce_round(float (&v)[16]) const {
    constexpr int kBit = 2 * kWidth;
    const bool upper = (lane_() & kBit) != 0;
#pragma unroll
    for (int j = 0; j < kWidth; ++j) {
      // selp: a select of the values (a select of the elements' addresses puts v in local memory)
      const float send = select_f32(upper, v[j], v[j + kWidth]);
      const float keep = select_f32(upper, v[j + kWidth], v[j]);
      v[j] = keep + __shfl_xor_sync(0xffffffffu, send, kBit);
    }
  }

  // A head may move: every head's chunk max over the 64 candidates (shuffles within the warp, the
  // warps' maxima through shared memory), its new reference (then into chunk_max[c][warp], each
  // warp its own copy) and its O rescale factor (rescale[c], by warp 0).
  __device__ void exchange_maxima(const float (&s_acc)[32], bool first) {
    using namespace sm90;
    const int c = converter_;
    float m[16];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) m[2 * n + e] = fmaxf(s_acc[4 * n + e], s_acc[4 * n + 2 + e]);
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) {
#pragma unroll
      for (int bit = 4; bit < 32; bit *= 2) m[i] = fmaxf(m[i], __shfl_xor_sync(0xffffffffu, m[i], bit));
    }
    if (lane_() < 4) {
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        *reinterpret_cast<float2*>(&smem_.chunk_max[c][warp_()][8 * n + 2 * quad_()]) = make_float2(m[2 * n], m[2 * n + 1]);
      }
    }
    named_barrier<kMaximaStored + kConverter, kWarpgroupThreads>();
    const float* ref_in = smem_.reference[1 - c];
    float2 now[8];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const float2 ref = first ? make_float2(-INFINITY, -INFINITY)
                               : *reinterpret_cast<const float2*>(&ref_in[8 * n + 2 * quad_()]);
      float2 cm = *reinterpret_cast<const float2*>(&smem_.chunk_max[c][0][8 * n + 2 * quad_()]);
#pragma unroll
      for (int w = 1; w < kWarpsPerWarpgroup; ++w) {
        const float2 other = *reinterpret_cast<const float2*>(&smem_.chunk_max[c][w][8 * n + 2 * quad_()]);
        cm.x = fmaxf(cm.x, other.x);
        cm.y = fmaxf(cm.y, other.y);
      }
      now[n] = make_float2(next_reference(ref.x, cm.x), next_reference(ref.y, cm.y));
      if (warp_() == 0 && lane_() < 4) {
        const float2 factor = make_float2(now[n].x != ref.x ? fast_exp2(ref.x - now[n].x) : 1.0f,
                                          now[n].y != ref.y ? fast_exp2(ref.y - now[n].y) : 1.0f);
        *reinterpret_cast<float2*>(&smem_.rescale[c][8 * n + 2 * quad_()]) = factor;
      }
    }
    // Every warp has read the maxima: each warp's copy of the new references in its own row.
    named_barrier<kMaximaStored + kConverter, kWarpgroupThreads>();
    if (lane_() < 4) {
#pragma unroll
      for (int n = 0; n < 8; ++n) *reinterpret_cast<float2*>(&smem_.chunk_max[c][warp_()][8 * n + 2 * quad_()]) = now[n];
    }
    __syncwarp();
  }
};

}  // namespace cake::cuda::hopper_fused
