// The converter warpgroups of the small-heads Hopper prefill. Converter h (0 or 1) owns dims half h
// of every candidate row (prefill_small_work.cuh: which 16-value groups, in which order): for each
// chunk of 64 candidates it converts its half of the rows (NVFP4 -> bf16, two rows a thread, four
// threads a row) straight into the register A fragments of its 16 QK^T k-steps, stores the same
// values into the chunk's K tile (PV reads it), and hands its half of S^T = K Q^T (64 candidates x
// the unit's heads, fp32) to the attend warpgroup. The code bytes of the next chunk are loaded
// while this one is converted, group by group, into the registers just converted, from the
// addresses in the row table (written ahead by the attend warpgroup at 16 heads a unit, by
// converter 0 at 32 and in the short split form, UnitForm). Each converter also loads its half of
// each unit's Q.
#pragma once

#include <cuda_bf16.h>

#include "../common/candidate_gather.cuh"
#include "../common/candidate_lists.cuh"
#include "../common/nvfp4_dequant.cuh"
#include "../common/ptx_primitives.cuh"
#include "../hopper/sm90_primitives.cuh"
#include "../hopper/nvfp4_bit_decode.cuh"
#include "prefill_small_layout.h"
#include "prefill_small_trace.cuh"
#include "prefill_small_work.cuh"
#include "sm90_small_primitives.cuh"

namespace cake::cuda::hopper_small {

template <int kGroupHeads, int kHalf, bool kSplitItems, bool kShortSplits>
class ConvertRole {
  using Cursor = ChunkCursor<kSplitItems>;
  using G = Geometry<kGroupHeads>;
  using Form = UnitForm<kGroupHeads, kShortSplits>;
  static constexpr int kSlots = group_slots(kHalf);  // 16-value groups of a row this thread converts
  static constexpr int kFirst = first_group(kHalf);   // the half's first group
  static constexpr bool kHasRope = kHalf == 1;
  // Units of 32 heads load a row's bytes by predicated loads into the registers themselves and run
  // converter 1's RoPE k-steps last in a chunk (see convert()); units of 16 load with `valid ? load
  // : 0` selects and run the RoPE k-steps first. Timed on the H200 at d5ba4d5 (docs/benchmarks.md,
  // "Main, two waiting branches ..."), the first form was 3-5% faster at 32 heads and 2-4% slower
  // at 16. The predicated loads alone at 16 heads (RoPE k-steps first) were 1.8-3.1% slower at
  // T = 4096 (H200, docs/hopper_small_kernel.md): the two go together, except in the short form
  // of 16-head split units (UnitForm), whose loads are predicated with the RoPE k-steps first.
  static constexpr bool kRopeLast = kGroupHeads == 32;
  static constexpr bool kPredicatedLoads = Form::kPredicatedLoads;
  // Q: the unit's kGroupHeads rows x this half's 32 words (8 dims each), one 16-byte load a word.
  static constexpr int kQWordsPerHead = 32;
  static constexpr int kQLoads = kGroupHeads * kQWordsPerHead / kWarpgroupThreads;  // 4, 8, 12
  static constexpr int kQBatch = 4;
  static_assert(kQLoads % kQBatch == 0, "whole batches");

 public:
  __device__ ConvertRole(const DecodeParams& params, SharedStorage<kGroupHeads, kSplitItems>& smem, int thread)
      : params_(params), smem_(smem), thread_(thread), quad_(thread % 4),
        row0_((thread / 32) * 16 + (thread % 32) / 4), st_lane_offset_(fragment_x4_lane_offset(thread)),
        num_units_(num_work_units<kSplitItems>(params)) {
    if constexpr (kPredicatedLoads) {  // a masked row's registers keep what they hold: start from zeros
      rows_[0] = RowBytes{};
      rows_[1] = RowBytes{};
    }
  }

  // A software pipeline over the CTA's chunks (over all its units). For chunk j this thread takes
  // the addresses of its rows of chunk j + 1 from the row table, waits until PV is done with chunk
  // j - 2 (same K tile), converts chunk j (whose codes were loaded during chunk j - 1) while loading
  // chunk j + 1's, and hands over its S half once the attend warpgroup has read the previous one.
  __device__ void run() {
    using namespace sm90;
    Cursor current;
    seek_unit<kGroupHeads>(params_, num_units_, current, blockIdx.x);
    if (current.unit >= num_units_) return;
    // The row table's writer: the first two chunks' entries here, then chunk j + 2's in the loop,
    // from an index loaded a chunk earlier (table_cursor is at chunk j + 2 at the top of chunk j).
    Cursor table_cursor;
    int32_t table_index_ahead = -1;
    if constexpr (kTableWriter) {
      table_cursor = current;
      write_table_rows(0, table_row_entry(params_, num_units_, table_cursor, table_index(table_cursor)));
      advance_or_stay<kGroupHeads>(params_, num_units_, table_cursor);
      write_table_rows(1, table_row_entry(params_, num_units_, table_cursor, table_index(table_cursor)));
      advance_or_stay<kGroupHeads>(params_, num_units_, table_cursor);
      table_index_ahead = table_index(table_cursor);
    }
    {
      RowSource first[2];
      table_rows(0, first);
      load_rows(first);
    }
    Cursor next = current;
    advance<kGroupHeads>(params_, num_units_, next);
    for (int gchunk = 0;; ++gchunk) {  // chunks over all of this CTA's units: the barriers' phase
      const int parity = gchunk & 1;
      trace_event(1 + kHalf, 0, gchunk);
      if (current.chunk == 0) load_q(current);
      const bool has_next = next.unit < num_units_;
      RowSource next_rows[2];
      table_rows(gchunk + 1, next_rows);  // past the CTA's chunks: masked entries
      Cursor after = next;
      if (has_next) advance<kGroupHeads>(params_, num_units_, after);
      // The row table's writer: chunk gchunk + 2's entries made from the indices loaded during the
      // previous chunk, and chunk gchunk + 3's indices loaded (used a chunk later), before the wait
      // for a free K tile; the entries stored after it (the slot's previous chunk is read by then).
      RowEntry table_entry;
      if constexpr (kTableWriter) {
        table_entry = table_row_entry(params_, num_units_, table_cursor, table_index_ahead);
        advance_or_stay<kGroupHeads>(params_, num_units_, table_cursor);
        table_index_ahead = table_index(table_cursor);
      }
      trace_event(1 + kHalf, 1, gchunk);

      if (gchunk >= 2) mbarrier_wait(smem_address(&smem_.k_empty[parity]), ((gchunk >> 1) - 1) & 1);
      if constexpr (kTableWriter) write_table_rows(gchunk + 2, table_entry);
      trace_event(1 + kHalf, 2, gchunk);
      float s_acc[G::kSAccumulators];
      convert(parity, s_acc, next_rows, gchunk);
      trace_event(1 + kHalf, 3, gchunk);
      if (kHalf == 0 && quad_ == 0) {
        smem_.valid[parity][row0_] = valid_[0];
        smem_.valid[parity][row0_ + 8] = valid_[1];
      }
      const int s_buffer = gchunk % G::kSBuffers;
      if (gchunk >= G::kSBuffers) mbarrier_wait(smem_address(&smem_.s_empty[s_buffer]), (gchunk / G::kSBuffers - 1) & 1);
      trace_event(1 + kHalf, 4, gchunk);
      store_s_half(s_acc, s_buffer);
#ifdef CAKE_SMALL_CODE_PAD
      code_pad(gchunk);
#endif
      // No proxy fence here: the attend warpgroup fences after it observes k_full, before its
      // wgmma (the async proxy) reads the K tile.
      mbarrier_arrive(smem_address(&smem_.k_full[parity]));
      trace_event(1 + kHalf, 5, gchunk);
      if (!has_next) break;
      current = next;
      next = after;
      valid_[0] = next_rows[0].valid;
      valid_[1] = next_rows[1].valid;
    }
  }

 private:
#ifdef CAKE_SMALL_CODE_PAD
  // Timing only: CAKE_SMALL_CODE_PAD straight-line instructions a chunk on each converter's path
  // (before its k_full arrival), eight independent funnel-shift chains that ptxas cannot fold, so
  // that a short decode split's cost of code run once can be read off the added count.
  __device__ __forceinline__ void code_pad(int gchunk) {
    uint32_t x[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = uint32_t(gchunk) * 0x9e3779b9u + uint32_t(thread_) * uint32_t(2 * i + 1);
#pragma unroll
    for (int k = 0; k < CAKE_SMALL_CODE_PAD / 8; ++k) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        asm volatile("shf.l.wrap.b32 %0, %0, %1, %2;" : "+r"(x[i]) : "r"(x[(i + 1) % 8]), "r"((k + i) % 31 + 1));
      }
    }
    uint32_t all = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) all ^= x[i];
    if (params_.num_tokens < 0) smem_.valid[0][all % nvfp4::kChunkSize] = 1;  // never: keeps the chains
  }
#endif
  // Where one of this thread's candidate rows of a chunk comes from.
  struct RowSource {
    const uint8_t* data_row;  // the list's cache base when masked (nothing is read)
    const uint8_t* scale_row;
    bool valid;
  };
  // A row's bytes for this thread, in registers: its code groups, the scale bytes of this half
  // (16 bytes: word i holds in byte `quad` the scale of group slot i) and, converter 1, its two RoPE
  // chunks.
  struct RowBytes {
    uint2 groups[kSlots];
    uint4 scales;
    uint4 rope[2];
  };

  const DecodeParams& params_;
  SharedStorage<kGroupHeads, kSplitItems>& smem_;
  const int thread_;  // 0..127 in the warpgroup
  const int quad_;    // lane % 4: which groups of its rows it converts
  const int row0_;    // its candidate rows in a chunk: row0 and row0 + 8
  const uint32_t st_lane_offset_;  // stmatrix: this lane's row address in a k-step's chunk pair
  const int num_units_;
  RowBytes rows_[2];  // the chunk being converted (loaded during the previous one)
  bool valid_[2];
  // QK^T groups (two k-steps each) a converter leaves in flight when it goes on to convert the
  // next: their A registers stay live until they retire. CAKE_SMALL_CONVERT_GROUPS_IN_FLIGHT (a
  // development build) leaves more, so that a converter whose wgmmas queue behind PV's in the
  // tensor pipe keeps converting.
#ifdef CAKE_SMALL_CONVERT_GROUPS_IN_FLIGHT
  static constexpr int kGroupsInFlight = CAKE_SMALL_CONVERT_GROUPS_IN_FLIGHT;
#else
  static constexpr int kGroupsInFlight = 1;
#endif
  static_assert(kGroupsInFlight >= 1 && kGroupsInFlight <= 7, "wgmma.wait_group takes 0..7");

  // Where the attend warpgroup does not write the row table (32 heads a unit, and the short form of
  // 16-head split units: !Form::kAttendWritesTable)
  // converter 0's threads 0..63 do, one row each, two chunks ahead: chunk c + 2 during chunk c,
  // once PV has retired chunk c - 2, whose K tile chunk c takes. Slot (c + 2) % kTableSlots then
  // last held chunk c - 2, whose entries every converter thread read at the top of chunk c - 3,
  // before its k_full arrival of chunk c - 2, which that PV waited for, so the k_empty wait orders
  // the rewrite after every read. The indices are loaded a chunk before their entries are made:
  // made from indices loaded the same chunk, before the K tile wait, the entries cost 12-16% at 16
  // heads (H200).
  static constexpr bool kTableWriter = !Form::kAttendWritesTable && kHalf == 0;
  // This thread's row of the cursor's chunk: its raw index (threads 0..63; -1 past the list's
  // length or the CTA's chunks); its entry into the table.
  __device__ __forceinline__ int32_t table_index(const Cursor& cursor) const {
    return thread_ < kChunkRows ? chunk_row_index(params_, num_units_, cursor, thread_) : -1;
  }
  __device__ __forceinline__ void write_table_rows(int c, const RowEntry& entry) {
    if (thread_ < kChunkRows) publish_row_entry(smem_, c, thread_, entry);
  }

  // The row a table entry names (bit 0 of its data address: valid).
  __device__ static __forceinline__ RowSource row_source(const RowEntry& entry) {
    return RowSource{reinterpret_cast<const uint8_t*>(entry.data & ~uint64_t(1)),
                     reinterpret_cast<const uint8_t*>(entry.scale), (entry.data & 1u) != 0};
  }

  // This thread's two rows (row0, row0 + 8) of the CTA's chunk c, from the row table (waited for;
  // usually long done).
  __device__ __forceinline__ void table_rows(int c, RowSource (&rows)[2]) const {
    const int slot = c % kTableSlots;
    sm90::mbarrier_wait(smem_address(&smem_.table_full[slot]), (c / kTableSlots) & 1);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      rows[r] = row_source(smem_.table.rows[slot][row0_ + 8 * r]);
    }
  }

  // A masked row reads nothing. With kPredicatedLoads its loads leave its registers as they were (stale
  // bytes of an earlier row, or the zeros they start with) and convert() masks them: a zero scale
  // and no sign for its codes (+0 whatever the bits), an AND for its RoPE words; otherwise its
  // registers are zeroed.
  // Group slot i of a row: 8 code bytes, not kept in L1 (four threads read 32 contiguous bytes).
  __device__ __forceinline__ void load_group(RowBytes& row, const RowSource& source, int slot) {
    const int group = slot_group(kHalf, quad_, slot);
    if constexpr (kPredicatedLoads) {
      sm90::ld_global_nc_8_no_l1_if(row.groups[slot], source.data_row + 8 * group, source.valid);
    } else {
      row.groups[slot] = source.valid ? ld_global_nc_8_no_l1(source.data_row + 8 * group) : make_uint2(0, 0);
    }
  }
  __device__ __forceinline__ void load_scales(RowBytes& row, const RowSource& source) {
    if constexpr (kPredicatedLoads) {
      sm90::ld_global_nc_16_if(row.scales, source.scale_row + kFirst, source.valid);
    } else {
      row.scales = source.valid ? sm90::ld_global_nc_16(source.scale_row + kFirst) : make_uint4(0, 0, 0, 0);
    }
  }
  __device__ __forceinline__ void load_rope(RowBytes& row, const RowSource& source) {
#pragma unroll
    for (int v = 0; v < 2; ++v) {
      const int chunk = 2 * quad_ + v;
      if constexpr (kPredicatedLoads) {
        sm90::ld_global_nc_16_if(row.rope[v], source.data_row + nvfp4::kNopeBytes + 16 * chunk, source.valid);
      } else {
        row.rope[v] = source.valid ? sm90::ld_global_nc_16(source.data_row + nvfp4::kNopeBytes + 16 * chunk)
                                   : make_uint4(0, 0, 0, 0);
      }
    }
  }
  __device__ __forceinline__ void load_rows(const RowSource (&sources)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int slot = 0; slot < kSlots; ++slot) load_group(rows_[r], sources[r], slot);
      load_scales(rows_[r], sources[r]);
      if (kHasRope) load_rope(rows_[r], sources[r]);
      valid_[r] = sources[r].valid;
    }
  }

  // The unit's Q, this half's dims of its kGroupHeads heads, into the Q half in the order the A
  // fragments hold the dims (prefill_small_work.cuh). Waits until every warp of this warpgroup is
  // done with the previous unit's Q, and again until all of the new one is stored. Also asks L2 for
  // the CTA's next unit's Q. In the decode's instance the heads past the call's last (units of
  // 16 with H = 8, 24, ...) get zeros, nothing read. In batches of four loads a thread, the batch loop not unrolled: the
  // store offsets are then computed per batch (unrolled, the compiler keeps all of them live across
  // the whole kernel and spills).
  __device__ void load_q(const Cursor& cursor) {
    using namespace sm90;
    named_barrier<kQBarrierFirst + kHalf, kWarpgroupThreads>();
    const __nv_bfloat16* q_unit =
        params_.q + (int64_t(cursor.u.token) * params_.num_heads + cursor.u.head0) * nvfp4::kHeadDim;
    const uint32_t q_half = smem_address(smem_.q[kHalf]);
    const int word = kQWordsPerHead * kHalf + thread_ % kQWordsPerHead;  // the same in every batch
#pragma unroll 1
    for (int batch = 0; batch < kQLoads / kQBatch; ++batch) {
      uint4 words[kQBatch];
#pragma unroll
      for (int k = 0; k < kQBatch; ++k) {
        const int head = (thread_ + kWarpgroupThreads * (kQBatch * batch + k)) / kQWordsPerHead;
        if (!kSplitItems || real_head(params_, cursor.u.head0 + head)) {
          words[k] = ld_global_nc_16(q_unit + head * nvfp4::kHeadDim + 8 * word);
        } else {
          words[k] = make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int k = 0; k < kQBatch; ++k) {
        store_q_word(q_half, (thread_ + kWarpgroupThreads * (kQBatch * batch + k)) / kQWordsPerHead, word, words[k]);
      }
    }
    fence_proxy_async();  // Q is read by wgmma
    named_barrier<kQBarrierFirst + kHalf, kWarpgroupThreads>();
    if (kHalf == 0 && thread_ == 0) {
      const int later = cursor.unit + gridDim.x;
      if (later < num_units_) {
        const WorkRows rows = work_rows<kGroupHeads, kSplitItems, false>(params_, later);
        // A padded unit's rows past the call's last head (the decode's) lie in the next token's, or
        // past q: the prefetch stops at the call's last head.
        const int heads = kSplitItems && !real_head(params_, rows.head0 + kGroupHeads - 1) ? params_.num_heads - rows.head0
                                                                                          : kGroupHeads;
        prefetch_l2(params_.q + (int64_t(rows.token) * params_.num_heads + rows.head0) * nvfp4::kHeadDim,
                    heads * nvfp4::kHeadDim * 2);
      }
    }
  }

  // Q's 8 dims of word `word` (dims 8 word ..) of row `head` at the positions the converted K
  // values of that word hold (prefill_small_work.cuh).
  __device__ __forceinline__ void store_q_word(uint32_t q_half, int head, int word, uint4 dims) {
    using namespace sm90;
    if (word < kRopeFirstWord) {
      // Code word 2 g + b, g = slot_group(half, q, i): k-step 4 i + 2 b + t holds (dim 2t, 2t + 4)
      // at position 2 q and (2t + 1, 2t + 5) at 2 q + 8. Times 2^9: the decoded K is 2^-9 times
      // the cache's values in these dims (nvfp4_bit_decode.cuh), so the scores come out exact.
      dims.x = bf16x2_mul(dims.x, hopper::kBitDecodeUnscaleBf16x2);
      dims.y = bf16x2_mul(dims.y, hopper::kBitDecodeUnscaleBf16x2);
      dims.z = bf16x2_mul(dims.z, hopper::kBitDecodeUnscaleBf16x2);
      dims.w = bf16x2_mul(dims.w, hopper::kBitDecodeUnscaleBf16x2);
      const int local_group = word / 2 - kFirst;
      const int q = group_lane(kHalf, local_group);
      const int kstep = 4 * group_slot(kHalf, local_group) + 2 * (word % 2);
      st_shared_4(q_half + q_pair_offset<kGroupHeads>(head, kstep, 2 * q), byte_perm(dims.x, dims.z, 0x5410u));
      st_shared_4(q_half + q_pair_offset<kGroupHeads>(head, kstep, 2 * q + 8), byte_perm(dims.x, dims.z, 0x7632u));
      st_shared_4(q_half + q_pair_offset<kGroupHeads>(head, kstep + 1, 2 * q), byte_perm(dims.y, dims.w, 0x5410u));
      st_shared_4(q_half + q_pair_offset<kGroupHeads>(head, kstep + 1, 2 * q + 8), byte_perm(dims.y, dims.w, 0x7632u));
    } else {
      // RoPE chunk c = 2 q + v: k-step 12 + 2 v + t holds dims 4t, 4t + 1 at 2 q and 4t + 2, 4t + 3
      // at 2 q + 8.
      const int chunk = word - kRopeFirstWord;
      const int q = chunk / 2;
      const int kstep = kRopeKStep + 2 * (chunk % 2);
      st_shared_4(q_half + q_pair_offset<kGroupHeads>(head, kstep, 2 * q), dims.x);
      st_shared_4(q_half + q_pair_offset<kGroupHeads>(head, kstep, 2 * q + 8), dims.y);
      st_shared_4(q_half + q_pair_offset<kGroupHeads>(head, kstep + 1, 2 * q), dims.z);
      st_shared_4(q_half + q_pair_offset<kGroupHeads>(head, kstep + 1, 2 * q + 8), dims.w);
    }
  }

  // The E4M3 scale of group slot `slot` of a row, from the half's 16 scale bytes (word i byte j:
  // group kFirst + 4 i + j): byte `quad` of word `slot`.
  __device__ __forceinline__ uint8_t slot_scale(const uint32_t (&words)[4], int slot) const {
    return uint8_t(words[slot] >> (8 * quad_));
  }

  // Two k-steps from the pairs of this thread's two rows (k-step `kstep` takes pairs 0, 1; the next
  // one pairs 2, 3): each k-step's A fragment into the K tile (one stmatrix, the fragment registers
  // as they are) and into QK^T; one commit group, then a wait for the group before it, whose
  // registers the next conversion reuses. The wgmma fence orders the new registers before it.
  __device__ __forceinline__ void store_and_multiply(float (&s_acc)[G::kSAccumulators], uint32_t k_tile,
                                                     uint64_t q_desc, int kstep, const uint32_t (&row0)[4],
                                                     const uint32_t (&row1)[4], bool first) {
    using namespace sm90;
    wgmma_fence();
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const int step = kstep + t;
      const uint32_t a[4] = {row0[2 * t], row1[2 * t], row0[2 * t + 1], row1[2 * t + 1]};
      // Chunk k_tile_chunk(kHalf, step, hi) of row r: column block 4 kHalf + step / 4, chunk 2 (step % 4)
      // + hi in it, swizzled with r % 8 (k_chunk_offset; the lane's row and hi are in st_lane_offset_).
      stmatrix_x4(k_tile + (4 * kHalf + step / 4) * kKColumnBlockBytes + (st_lane_offset_ ^ (32 * (step % 4))), a);
      const uint32_t offset = (step / 4) * G::kQColumnBlockBytes + (step % 4) * 32;
      wgmma_rs<kGroupHeads>(s_acc, a, q_desc + (offset >> 4), !(first && t == 0));
    }
    wgmma_commit();
    wgmma_wait<kGroupsInFlight>();
  }

  // Converter 1's 4 RoPE k-steps: their A fragments are the loaded words themselves, a masked row's
  // ANDed away where the loads are predicated (its registers hold stale words); `first`: they open
  // the chunk's QK^T (its first wgmma starts the accumulators).
  __device__ __forceinline__ void rope_steps(float (&s_acc)[G::kSAccumulators], uint32_t k_tile, uint64_t q_desc,
                                             bool first) {
    const uint32_t keep0 = !kPredicatedLoads || valid_[0] ? ~0u : 0u;
    const uint32_t keep1 = !kPredicatedLoads || valid_[1] ? ~0u : 0u;
#pragma unroll
    for (int v = 0; v < 2; ++v) {
      const uint4 r0 = rows_[0].rope[v];
      const uint4 r1 = rows_[1].rope[v];
      const uint32_t pairs0[4] = {r0.x & keep0, r0.y & keep0, r0.z & keep0, r0.w & keep0};
      const uint32_t pairs1[4] = {r1.x & keep1, r1.y & keep1, r1.z & keep1, r1.w & keep1};
      store_and_multiply(s_acc, k_tile, q_desc, kRopeKStep + 2 * v, pairs0, pairs1, first && v == 0);
    }
  }

  // Converts this thread's part of the chunk's two rows into K tile `parity` and its 16 k-steps of
  // QK^T (S half into s_acc), reloading each group slot (and the scales) with the next chunk's rows
  // as soon as it is converted. Converter 1's RoPE k-steps (their A fragments are the loaded words
  // themselves) come first in units of 16 heads, their next loads right after the first group slot.
  // With kRopeLast they come last: their A fragments are the
  // loaded words themselves (masked by an AND right before their wgmmas), so the next chunk's RoPE
  // chunks, loaded once these no longer read the words (ptxas issues the loads a little before the
  // RoPE wgmmas, whose operands are the ANDs' copies), have a chunk to land before they are used. (RoPE first,
  // with `valid ? load : 0` selects, had ptxas issue those loads late in the chunk and move them
  // into the fragments at its end, where the moves waited for them: ~30% of converter 1's stall
  // samples, Nsight Compute at 50645ef.)
  __device__ void convert(int parity, float (&s_acc)[G::kSAccumulators], const RowSource (&next_rows)[2], int gchunk) {
    using namespace sm90;
    const uint32_t k_tile = smem_address(smem_.k[parity]);
    const uint64_t q_desc = smem_descriptor(smem_address(smem_.q[kHalf]), 16, 1024);
    uint32_t scales[2][kSlots];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint32_t words[4] = {rows_[r].scales.x, rows_[r].scales.y, rows_[r].scales.z, rows_[r].scales.w};
#pragma unroll
      for (int slot = 0; slot < kSlots; ++slot) {
        scales[r][slot] = !kPredicatedLoads || valid_[r] ? hopper::e4m3_to_decode_scale(slot_scale(words, slot))
                                                         : 0u;
      }
      load_scales(rows_[r], next_rows[r]);
    }
    // With kPredicatedLoads a masked row converts to +0 (zero scale, no sign), as zeroed
    // registers do, and its RoPE words are ANDed away: no stale bit reaches the tile.
    const uint32_t sign_mask[2] = {!kPredicatedLoads || valid_[0] ? 0x80008000u : 0u,
                                   !kPredicatedLoads || valid_[1] ? 0x80008000u : 0u};
    if constexpr (kHasRope && !kRopeLast) rope_steps(s_acc, k_tile, q_desc, true);
#pragma unroll
    for (int slot = 0; slot < kSlots; ++slot) {
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        uint32_t pairs0[4], pairs1[4];
        hopper::e2m1x8_to_bf16_pairs(b == 0 ? rows_[0].groups[slot].x : rows_[0].groups[slot].y, scales[0][slot], pairs0,
                                     sign_mask[0]);
        hopper::e2m1x8_to_bf16_pairs(b == 0 ? rows_[1].groups[slot].x : rows_[1].groups[slot].y, scales[1][slot], pairs1,
                                     sign_mask[1]);
        store_and_multiply(s_acc, k_tile, q_desc, 4 * slot + 2 * b, pairs0, pairs1,
                           (kRopeLast || !kHasRope) && slot == 0 && b == 0);
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) load_group(rows_[r], next_rows[r], slot);
      if (kHasRope && !kRopeLast && slot == 0) {
#pragma unroll
        for (int r = 0; r < 2; ++r) load_rope(rows_[r], next_rows[r]);
      }
      if (slot == kSlots / 2 - 1) trace_event(1 + kHalf, 6, gchunk);
    }
    trace_event(1 + kHalf, 7, gchunk);
    if constexpr (kHasRope && kRopeLast) rope_steps(s_acc, k_tile, q_desc, false);
    wgmma_wait<0>();
    if constexpr (kHasRope && kRopeLast) {
#pragma unroll
      for (int r = 0; r < 2; ++r) load_rope(rows_[r], next_rows[r]);
    }
    pin_registers(s_acc);
  }

  // This converter's S^T half: s_acc[4 n + 2 h + e] is candidate row0 + 8 h, head 8 n + 2 q + e.
  __device__ __forceinline__ void store_s_half(const float (&s_acc)[G::kSAccumulators], int buffer) {
#pragma unroll
    for (int n = 0; n < G::kHeadBlocks; ++n) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          smem_.s_partial[buffer][kHalf][8 * n + 2 * quad_ + e][row0_ + 8 * h] = s_acc[4 * n + 2 * h + e];
        }
      }
    }
  }
};

}  // namespace cake::cuda::hopper_small
