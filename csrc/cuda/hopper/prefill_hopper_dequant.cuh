// The dequant warpgroups of the Hopper prefill: gather the candidate rows of a block straight
// into registers, convert NVFP4 -> bf16 and write the block's K tile (which is also V).
// Warpgroup d (0 or 1) converts half d (rows 32 d .. 32 d + 31) of every block into K tile j % 2,
// block j of the CTA's walk; four threads per row; dims 0..255 first, then 256..511, each half
// handed over on its own mbarrier. They run up to a block ahead of the consumers (who load each
// item's Q themselves).
#pragma once

#include "../common/candidate_gather.cuh"
#include "../common/nvfp4_dequant.cuh"
#include "../common/ptx_primitives.cuh"
#include "nvfp4_bit_decode.cuh"
#include "prefill_hopper_layout.h"
#include "prefill_hopper_trace.cuh"
#include "prefill_hopper_work.cuh"
#include "sm90_primitives.cuh"

namespace cake::cuda::hopper {

// What part p of a row converts: full code units p, p + 4, p + 8 (units 0..11, 32 dims each) and
// quarter p of units 12, 13 (8 bytes, 16 dims: dims 384 + 16 p ..), so the four parts convert
// 112 dims each.
constexpr int kFullUnitsPerPart = 3;
constexpr int kLowUnitsPerPart = 2;  // units part and part + 4: dims 0..255
constexpr int kHalfUnitFirstByte = 16 * kFullUnitsPerPart * kPartsPerRow;  // 192
constexpr int kHalfUnitFirstChunk = kHalfUnitFirstByte / 4;                // tile chunk 48
constexpr int kHalfUnitFirstScale = kHalfUnitFirstByte / 8;                // scale byte 24
static_assert(kFullUnitsPerPart * kPartsPerRow + kPartsPerRow / 2 == kCodeUnits, "the parts cover the row");

template <bool kSplitItems>
class DequantRole {
 public:
  __device__ DequantRole(const DecodeParams& params, SharedStorage& smem, int warpgroup, int thread)
      : params_(params), smem_(smem), warpgroup_(warpgroup), row_(row_of(thread)),
        part_(part_of(thread)), num_items_(num_work_units<kSplitItems>(params)),
        unit_offset_(unit_store_offset(row_of(thread), part_of(thread))),
        tail_offset_(tail_store_offset(row_of(thread), part_of(thread))) {}

  // A warp converts 8 rows, four lanes a row. Each quarter warp (the eight lanes one 16-byte
  // shared store serves at a time) holds four rows x two parts, parts 0 and 3 in quarters 0 and
  // 2, parts 1 and 2 in quarters 1 and 3, so the eight chunks of each tile store (units, tail,
  // RoPE) fall in eight different bank groups: a row-major order (lane = 4 row + part) puts parts
  // p and p + 2 of a row in one group, two-way conflicts on the units' stores, and was 1-2%
  // slower at T = 4096 (docs/benchmarks.md). Bit maps of the lane keep the setup a few
  // instructions: row bit 1 is lane bit 3 ^ lane bit 1, part = 3 * (lane bit 0) ^ lane bit 3. A
  // warp still holds eight whole rows (the code loads' sectors are those of the row-major order),
  // and lane 4 k is in row k of the warp, the lane whose bit the candidate flags' ballot (run())
  // gives the consumers.
  static_assert(kPartsPerRow == 4, "the lane map and the flags' ballot layout: four lanes a row");
  static __device__ __forceinline__ int row_of(int thread) { return (thread >> 2) ^ (thread & 2); }
  static __device__ __forceinline__ int part_of(int thread) { return (3 * (thread & 1)) ^ ((thread >> 3) & 1); }

  // A software pipeline over the CTA's blocks. For block j this thread copies block j + 1's
  // scales and block j + 2's row index into shared memory (each has a whole block to land), waits until the
  // consumers are done with each dim half of block j - 2 (same tile; where j - 2 was an item's
  // last block, until its O has gone out through it), converts that half's codes
  // (loaded into registers during block j - 1) and copies its RoPE chunks, handing each half
  // over; right after converting a half it loads that half's codes of block j + 1 into the
  // registers just freed, so they have about half a block to land.
  __device__ void run() {
    BlockCursor<kSplitItems> cur;
    seek_item(params_, num_items_, cur, blockIdx.x);
    if (cur.item >= num_items_) return;
    trace_dequant_start(smem_, warpgroup_);
    set_constant();
    RowSource source = row_source(cur.w, cur.block, cursor_index(cur));
    load_codes(source);
    // cp.async groups, oldest first, per block j - 1: block j's scales and block j + 1's row
    // index, then block j - 1's RoPE copies. At the top of block j the newest group is block
    // j - 1's RoPE, which only the consumers wait for (the copies arrive on half_full
    // themselves), so waiting for all but one group waits for block j's scales and block j + 1's
    // index only. Before the loop an empty group stands for block -1's RoPE, and block 1's index
    // is stored directly. (Q is the consumers' to load.)
    copy_scales(source, 0);
    cp_async_commit();
    cp_async_commit();
    BlockCursor<kSplitItems> next = cur;
    advance(params_, num_items_, next);
    if (part_ == 0) row_index_slot(1) = cursor_index(next);
    IndexPlace index_place = index_place_of(next);  // follows after_next below
    for (int gblock = 0;; ++gblock) {  // blocks over all of this CTA's items: the barriers' phase
      const int parity = gblock & 1;
      // This block's scales and the next block's row index (copied a block ago by parts 0 and 1
      // of the row) have landed.
      cp_async_wait<1>();
      __syncwarp();
      // Read now, a whole tile wait before their first use (a shared load cannot move past the
      // stores' asm, and read between them it would wait in the same queue).
      const PartScales scales = part_scales(parity);
      trace_dequant_event(smem_, warpgroup_, 0, gblock);
      const bool has_next = next.item < num_items_;
      const RowSource next_source = has_next ? row_source(next.w, next.block, row_index_slot(parity ^ 1))
                                             : RowSource{params_.lists[0].cache, params_.lists[0].cache, false};
      trace_dequant_event(smem_, warpgroup_, 5, gblock);
      copy_scales(next_source, parity ^ 1);  // the stage block j - 1 used
      BlockCursor<kSplitItems> after_next = next;
      if (has_next) advance_index_place(after_next, index_place);
      copy_row_index(index_place, has_next, parity);  // the stage of block j, whose index every part has read
      cp_async_commit();
      trace_dequant_event(smem_, warpgroup_, 6, gblock);

      // Dims 0..255 first, then 256..511: each half waits only for its own last reader of block
      // j - 2. No proxy fence before the arrivals: the consumers fence after they observe
      // half_full, before their wgmma (the async proxy) reads.
      const int empty_phase = ((gblock >> 1) - 1) & 1;
#if !defined(CAKE_HOPPER_DEQUANT_ALONE) && !defined(CAKE_HOPPER_NO_WAITS)
      if (gblock >= 2) sm90::mbarrier_wait(smem_address(&smem_.half_empty[parity][kLowDims]), empty_phase);
#endif
      trace_dequant_event(smem_, warpgroup_, 1, gblock);
      const uint32_t half_tile = smem_address(smem_.k[parity]) + warpgroup_ * kHalfTileBytes;
      // The flags go with the low half: both consumers release it after the block's softmax.
      // Lane 4 k is in row k of the warp (row_of / part_of), so ballot bit 4 k is row k's flag, the
      // layout the consumers read (SharedStorage::valid), and all 32 bits are set only when all
      // eight rows are valid (the consumers' all-valid test).
      const uint32_t flags = __ballot_sync(0xffffffffu, source.valid);
      if (row_ % 8 == 0 && part_ == 0) smem_.valid[parity][(warpgroup_ * kHalfRows + row_) / 8] = flags;
      convert_low(half_tile, scales);
#if defined(CAKE_HOPPER_WRITER_FENCE)
      sm90::fence_proxy_async();  // development variant: the writer fences its stores for the wgmma
#endif
      sm90::mbarrier_arrive(smem_address(&smem_.half_full[parity][kLowDims]));
      load_low_codes(next_source);  // their registers are free now: half a block to land
      trace_dequant_event(smem_, warpgroup_, 3, gblock);
#if !defined(CAKE_HOPPER_DEQUANT_ALONE) && !defined(CAKE_HOPPER_NO_WAITS)
      if (gblock >= 2) sm90::mbarrier_wait(smem_address(&smem_.half_empty[parity][kHighDims]), empty_phase);
#endif
      trace_dequant_event(smem_, warpgroup_, 4, gblock);
      copy_rope(half_tile, source);
#if CAKE_HOPPER_WRITER_FENCE == 2
      // Development variant: the RoPE copies waited for (with the block top's group: all of this
      // thread's copies) after the conversion and fenced with the stores, one arrival for both.
      cp_async_commit();
      convert_high(half_tile, scales);
      cp_async_wait<0>();
      sm90::fence_proxy_async();
#else
      sm90::cp_async_arrive_noinc(smem_address(&smem_.half_full[parity][kHighDims]));
      cp_async_commit();
      convert_high(half_tile, scales);
#if defined(CAKE_HOPPER_WRITER_FENCE)
      sm90::fence_proxy_async();
#endif
#endif
      sm90::mbarrier_arrive(smem_address(&smem_.half_full[parity][kHighDims]));
      keep_converted();
      trace_dequant_event(smem_, warpgroup_, 2, gblock);
      trace_dequant_last_warp(smem_, warpgroup_, 7, gblock);

      load_high_codes(next_source);
      if (!has_next) break;
      cur = next;
      next = after_next;
      source = next_source;
    }
    cp_async_wait<0>();  // nothing in flight at exit
    trace_dequant_finish(smem_, warpgroup_);
  }

 private:
  // Where this thread's candidate row of one block comes from.
  struct RowSource {
    const uint8_t* data_row;  // the list's cache base when masked (a readable address; nothing is read)
    const uint8_t* scale_row;
    bool valid;
  };

  const DecodeParams& params_;
  SharedStorage& smem_;
  const int warpgroup_;  // 0 or 1: the half of each block it converts
  const int row_;        // row within the warpgroup's half of the block (candidate 32 warpgroup + row)
  const int part_;       // which quarter of the row's dims this thread converts
  const int num_items_;
  // Where this thread's 16-byte chunks go in its warpgroup's half of a K tile (offsets from its
  // start). The swizzle XORs a row's chunk index with row % 8; the XOR's two low bits only flip
  // bits 4..5 of an offset, which nothing else sets, so chunk w of a unit is one XOR away from
  // chunk 0 and the units and column blocks are immediate offsets on top.
  //   unit_offset_: chunk 0 of full unit `part` (unit part + 4 i: + 2 i column blocks; chunk w:
  //     ^ 16 w).
  //   tail_offset_: this part's first chunk of units 12, 13 (its second: ^ 16); its RoPE chunks
  //     are the same two one column block further.
  const uint32_t unit_offset_;
  const uint32_t tail_offset_;
#if defined(CAKE_HOPPER_NO_TILE_STORES) || defined(CAKE_HOPPER_CONSTANT_TILE_STORES)
  const uint32_t zero_ = blockDim.z - 1;  // 0 (launched with blockDim.z = 1); opaque to ptxas
#endif
  uint4 codes_[kFullUnitsPerPart];  // the next block's codes of this part, waiting for their K tile
  uint2 half_codes_;

  // Where the raw index of this thread's row in the cursor's block is (nullptr past the list's
  // length or the CTA's blocks). Range-checked later, in row_source.
  __device__ __forceinline__ const int32_t* cursor_index_address(const BlockCursor<kSplitItems>& cursor) const {
    if (cursor.item >= num_items_) return nullptr;
    const WorkItem<kSplitItems>& w = cursor.w;
    const CandidateListParams& list = params_.lists[w.in_main(cursor.block) ? 0 : 1];
    const int position = w.chunk(cursor.block) * kBlockRows + warpgroup_ * kHalfRows + row_;
    if (position >= w.length(cursor.block)) return nullptr;
    return list.indices + int64_t(w.token) * list.width + position;
  }
  // Whether the cursor's block is in the main list, warp-uniform to ptxas (lane 0's value: every
  // lane's is the same): row_source then reads the list's fields with constant offsets (uniform
  // loads) rather than by a per-thread index into params.lists. (The same in cursor_index_address
  // made the dequant spill a word at 56 registers.)
  static __device__ __forceinline__ bool in_main_list(const WorkItem<kSplitItems>& w, int block) {
    return __shfl_sync(0xffffffffu, int(w.in_main(block)), 0) != 0;
  }
  __device__ __forceinline__ int32_t cursor_index(const BlockCursor<kSplitItems>& cursor) const {
    const int32_t* address = cursor_index_address(cursor);
    return address != nullptr ? __ldg(address) : -1;
  }
  // The row's raw index in a cursor's block, carried from block to block: within a list the next
  // block's is 64 entries on and 64 rows nearer the length, so only a cursor that moves to
  // another list or item recomputes it (index_place_of) and a block costs two adds, not the
  // cursor's address math (its indexed constant loads included).
  struct IndexPlace {
    const int32_t* address;  // where the index would be read (nothing is read where remaining <= 0)
    int remaining;           // the list's length minus the row's position: <= 0 past the length or the CTA's blocks
  };
  __device__ __forceinline__ IndexPlace index_place_of(const BlockCursor<kSplitItems>& cursor) const {
    if (cursor.item >= num_items_) return {params_.lists[0].indices, 0};
    const WorkItem<kSplitItems>& w = cursor.w;
    const CandidateListParams& list = params_.lists[w.in_main(cursor.block) ? 0 : 1];
    const int position = w.chunk(cursor.block) * kBlockRows + warpgroup_ * kHalfRows + row_;
    return {list.indices + int64_t(w.token) * list.width + position, w.length(cursor.block) - position};
  }
  // advance() of the cursor with its index place.
  __device__ __forceinline__ void advance_index_place(BlockCursor<kSplitItems>& cursor, IndexPlace& place) const {
    ++cursor.block;
    if (cursor.block == cursor.w.num_chunks) {
      seek_item(params_, num_items_, cursor, cursor.item + gridDim.x);
      place = index_place_of(cursor);
    } else if (cursor.block == cursor.w.chunks0) {
      place = index_place_of(cursor);  // the extra list's first block
    } else {
      place.address += kBlockRows;
      place.remaining -= kBlockRows;
    }
  }
  // The row's index at the carried place into row_index stage `stage` (part 0 of the row; the
  // block-top wait and __syncwarp make it visible to the other parts; a cursor past the CTA's
  // blocks, has_next false, or a row past the list's length: -1): by cp.async, so its first use
  // waits on the cp.async group, not on the scoreboard of this thread's register loads.
  __device__ __forceinline__ void copy_row_index(const IndexPlace& place, bool has_next, int stage) {
    if (part_ != 0) return;
    if (has_next && place.remaining > 0) {
      cp_async_4(smem_address(&row_index_slot(stage)), place.address);
    } else {
      row_index_slot(stage) = -1;
    }
  }
  __device__ __forceinline__ int32_t& row_index_slot(int stage) const {
    return smem_.row_index[stage][warpgroup_][row_];
  }

  __device__ __forceinline__ RowSource row_source(const WorkItem<kSplitItems>& w, int block, int32_t index) const {
    return in_main_list(w, block) ? list_row_source(params_.lists[0], index) : list_row_source(params_.lists[1], index);
  }
  static __device__ __forceinline__ RowSource list_row_source(const CandidateListParams& list, int32_t index) {
    // copy_scales and copy_rope take the data row's address for a masked row (nothing is read),
    // so the masked row's scale row need not be the base.
    const CandidateRows rows = candidate_rows_of_index<false>(list, index);
    return RowSource{rows.data, rows.scale, rows.valid};
  }

  // This part's codes of a row into registers: the low half's units (part, part + 4) and the high
  // half's (part + 8 and its quarter of units 12, 13), loaded separately so that each half's load
  // is issued as soon as the previous block's conversion of that half frees its registers.
  __device__ __forceinline__ void load_codes(const RowSource& source) {
    load_low_codes(source);
    load_high_codes(source);
  }
  __device__ __forceinline__ void load_low_codes(const RowSource& source) {
#pragma unroll
    for (int i = 0; i < kLowUnitsPerPart; ++i) load_unit_codes(source, i);
  }
  __device__ __forceinline__ void load_high_codes(const RowSource& source) {
#pragma unroll
    for (int i = kLowUnitsPerPart; i < kFullUnitsPerPart; ++i) load_unit_codes(source, i);
#if defined(CAKE_HOPPER_NO_CODE_LOADS)
    const uint32_t x = address_codes(source, 0);
    half_codes_ = make_uint2(x ^ 0x5A5A5A5Au, x ^ 0x3C3C3C3Cu);
    return;
#endif
    half_codes_ = source.valid ? ld_global_nc_8_no_l1(source.data_row + kHalfUnitFirstByte + 8 * part_) : make_uint2(0, 0);
  }
  __device__ __forceinline__ void load_unit_codes(const RowSource& source, int i) {
    const int unit = part_ + kPartsPerRow * i;
#if defined(CAKE_HOPPER_NO_CODE_LOADS)
    const uint32_t x = address_codes(source, unit);
    codes_[i] = make_uint4(x, x + 1u, x + 2u, x + 3u);
    return;
#endif
    codes_[i] = source.valid ? ld_global_nc_16_no_l1(source.data_row + 16 * unit) : make_uint4(0, 0, 0, 0);
  }
#if defined(CAKE_HOPPER_NO_CODE_LOADS)
  // Development timing only (wrong results): a code word made from the row's address instead of
  // loaded, different for each unit.
  static __device__ __forceinline__ uint32_t address_codes(const RowSource& source, int unit) {
    return uint32_t(reinterpret_cast<uintptr_t>(source.data_row)) * 0x9E3779B1u + uint32_t(unit);
  }
#endif

  // The row's 32-byte scale row into stage `parity`, 16 bytes by each of parts 0 and 1 (a masked
  // row's is zero-filled).
  __device__ __forceinline__ void copy_scales(const RowSource& source, int parity) {
    if (part_ < 2) {
      const uint32_t stage = smem_address(smem_.scales[parity][warpgroup_][row_]) + 16 * part_;
      cp_async_16(stage, source.valid ? source.scale_row + 16 * part_ : source.data_row, source.valid);
    }
  }

  static __device__ __forceinline__ uint32_t unit_store_offset(int row, int part) {
    return swizzled_chunk_offset<kKColumnBlockBytes>(row, 4 * part);
  }
  static __device__ __forceinline__ uint32_t tail_store_offset(int row, int part) {
    return swizzled_chunk_offset<kKColumnBlockBytes>(row, kHalfUnitFirstChunk + 2 * part);
  }

  // The row's RoPE dims (bf16 already) straight into the tile: chunks 2 part, 2 part + 1 of 8
  // (tile chunks 56 + 2 part + k: the tail chunks' places one column block further).
  __device__ __forceinline__ void copy_rope(uint32_t half_tile, const RowSource& source) {
    static_assert(kRopeFirstChunk == kHalfUnitFirstChunk + 8 && kRopeChunksPerPart == 2,
                  "RoPE chunk k of a part sits one column block after its tail chunk k");
    const uint32_t tail = half_tile + tail_offset_;
#pragma unroll
    for (int k = 0; k < kRopeChunksPerPart; ++k) {
      const int chunk = kRopeChunksPerPart * part_ + k;
      cp_async_16((tail ^ (16u * k)) + kKColumnBlockBytes,
                  source.data_row + (source.valid ? nvfp4::kNopeBytes + 16 * chunk : 0), source.valid);
    }
  }

  // Eight codes (one word) times a scale (times 2^-9: nvfp4_bit_decode.cuh) into the 16-byte
  // chunk at `address`.
  __device__ __forceinline__ void convert_word(uint32_t address, uint32_t word, uint32_t decode_scale) {
    uint32_t out[4];
#if defined(CAKE_HOPPER_NO_CONVERSION)  // development timing only: wrong results
    // The loaded codes still reach a store, as tiny values (no softmax reference moves on them).
    out[0] = out[1] = out[2] = out[3] = (word ^ decode_scale) & 0x00010001u;
#else
    e2m1x8_to_bf16x8(word, decode_scale, out);
#endif
#if defined(CAKE_HOPPER_NO_TILE_STORES) || defined(CAKE_HOPPER_CONSTANT_TILE_STORES)
    // Development timing only (wrong results): the converted words feed a running XOR that a
    // store nobody executes reads at the block's end (an empty asm would not keep them: ptxas
    // drops the conversion), and either nothing is stored or every store writes the same
    // registers, set once (the stores' traffic without their wait for the conversion's registers).
    kept_ ^= out[0] ^ out[1] ^ out[2] ^ out[3] ^ word;
#if defined(CAKE_HOPPER_CONSTANT_TILE_STORES)
    sm90::st_shared_16(address, constant4_.x, constant4_.y, constant4_.z, constant4_.w);
#endif
#else
    sm90::st_shared_16(address, out[0], out[1], out[2], out[3]);
#endif
  }
#if defined(CAKE_HOPPER_HALF_CONVERSION_BOUND)
  // Development timing only (wrong results): the bound on sharing a token's conversion between
  // the two CTAs of its head blocks, each converting half of every row's words and storing each
  // converted word twice (into its own tile and, remotely, into the peer's). Here a thread
  // converts every other word of its part and stores it twice, at its own place and at the
  // skipped word's (whose load may narrow: the peer would load it): half the conversion's
  // instructions, every store, every store waiting for a conversion's registers, real values in
  // every chunk.
  __device__ __forceinline__ void convert_word_twice(uint32_t address, uint32_t other_address, uint32_t word,
                                                     uint32_t decode_scale) {
    uint32_t out[4];
    e2m1x8_to_bf16x8(word, decode_scale, out);
    sm90::st_shared_16(address, out[0], out[1], out[2], out[3]);
    sm90::st_shared_16(other_address, out[0], out[1], out[2], out[3]);
  }
#endif
#if defined(CAKE_HOPPER_NO_TILE_STORES) || defined(CAKE_HOPPER_CONSTANT_TILE_STORES)
  uint32_t kept_ = 0;
  // Tiny bf16 pairs (no softmax reference moves on them) made from a shared load (of whatever
  // the flags' words hold at the start), which ptxas cannot redo, so the four registers stay what
  // every store reads.
  uint4 constant4_;
  __device__ __forceinline__ void set_constant() {
    uint32_t v[4];
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                 : "r"(smem_address(smem_.valid[0])));
    constant4_ = make_uint4(v[0] & 0x00010001u, v[1] & 0x00010001u, v[2] & 0x00010001u, v[3] & 0x00010001u);
  }
  __device__ __forceinline__ void keep_converted() {
    if (zero_ != 0u) smem_.valid[0][0] = kept_;
  }
#else
  __device__ __forceinline__ void keep_converted() {}
  __device__ __forceinline__ void set_constant() {}
#endif

  // This part's scale bytes of a block: those of its full units i (dims 32 (part + 4 i) ..: bytes
  // 2 unit, 2 unit + 1) and of its quarter of units 12, 13.
  struct PartScales {
    uint16_t unit[kFullUnitsPerPart];
    uint8_t half;
  };
  __device__ __forceinline__ PartScales part_scales(int parity) const {
    const uint8_t* row = smem_.scales[parity][warpgroup_][row_];
    PartScales s;
#pragma unroll
    for (int i = 0; i < kFullUnitsPerPart; ++i) {
      s.unit[i] = *reinterpret_cast<const uint16_t*>(row + 2 * (part_ + kPartsPerRow * i));
    }
    s.half = row[kHalfUnitFirstScale + part_];
    return s;
  }

  // Full unit i of this part (dims 32 (part + 4 i) ..) into its tile row, with its scale bytes
  // (part_scales): chunks 4 (part + 4 i) + w, column block 2 i + part / 2.
  __device__ __forceinline__ void convert_unit(uint32_t half_tile, int i, uint16_t scale_pair) {
    static_assert(kPartsPerRow * 4 == 2 * 8, "a unit's four chunks stay in one column block, unit + 4 is two blocks on");
    // One conversion of both scale bytes; each half is broadcast to a bf16 pair by the
    // multiply's operand selector.
    const uint32_t scales = e4m3x2_to_decode_scales(scale_pair);
    const uint32_t scale_low = decode_scale_half<0>(scales);
    const uint32_t scale_high = decode_scale_half<1>(scales);
    const uint32_t chunk0 = half_tile + unit_offset_;
    const uint32_t unit_step = uint32_t(i) * 2 * kKColumnBlockBytes;
#if defined(CAKE_HOPPER_HALF_CONVERSION_BOUND)
    (void)scale_high;
    convert_word_twice((chunk0 ^ 0u) + unit_step, (chunk0 ^ 32u) + unit_step, codes_[i].x, scale_low);  // z skipped
    convert_word_twice((chunk0 ^ 16u) + unit_step, (chunk0 ^ 48u) + unit_step, codes_[i].y, scale_low);  // w skipped
#else
    convert_word((chunk0 ^ 0u) + unit_step, codes_[i].x, scale_low);
    convert_word((chunk0 ^ 16u) + unit_step, codes_[i].y, scale_low);
    convert_word((chunk0 ^ 32u) + unit_step, codes_[i].z, scale_high);
    convert_word((chunk0 ^ 48u) + unit_step, codes_[i].w, scale_high);
#endif
  }

  // This part's codes of dims 0..255 (units part and part + 4).
  __device__ __forceinline__ void convert_low(uint32_t half_tile, const PartScales& scales) {
#pragma unroll
    for (int i = 0; i < kLowUnitsPerPart; ++i) convert_unit(half_tile, i, scales.unit[i]);
  }

  // This part's codes of dims 256..447 (unit part + 8 and its quarter of units 12, 13).
  __device__ __forceinline__ void convert_high(uint32_t half_tile, const PartScales& scales) {
    static_assert(kFullUnitsPerPart == kLowUnitsPerPart + 1, "the high half converts one full unit");
    convert_unit(half_tile, kLowUnitsPerPart, scales.unit[kLowUnitsPerPart]);
    const uint32_t scale_half = e4m3_to_decode_scale(scales.half);
    const uint32_t tail = half_tile + tail_offset_;
#if defined(CAKE_HOPPER_HALF_CONVERSION_BOUND)
    convert_word_twice(tail, tail ^ 16u, half_codes_.x, scale_half);  // half_codes_.y skipped
#else
    convert_word(tail, half_codes_.x, scale_half);
    convert_word(tail ^ 16u, half_codes_.y, scale_half);
#endif
  }
};

}  // namespace cake::cuda::hopper
