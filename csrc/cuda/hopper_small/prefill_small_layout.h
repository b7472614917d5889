// Geometry, thread roles, register budgets, shared-memory plan and barrier ids of the small-heads
// Hopper (sm_90a) prefill kernel (docs/hopper_small_kernel.md). Plain C++: the host checks the fit
// (HopperSmallPrefillLayout at the end) and the planner sizes units (group_heads_for).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../format/nvfp4_format.h"
#include "../common/work_unit.h"

namespace cake::cuda::hopper_small {

// A work unit is one token and a group of kGroupHeads consecutive heads (16 or 32): every
// candidate row is gathered and converted once per unit, so the conversion is shared by all the
// unit's heads. A chunk is 64 candidates (one list chunk): the M of the QK^T wgmma.
constexpr int kChunkRows = nvfp4::kChunkSize;
constexpr int kWarpgroupThreads = 128;

// The heads of a unit for the `num_heads` heads this kernel runs: 32 where it divides them, else
// 16 (the CTA walks num_heads / group units per token). It runs 16 or 32 heads of a call (H = 16,
// 32, and the heads past the first 64 of H = 80, 96), or all of H = 64, 128 with head_tiles below
// 4; H = 48 and 112 run on the 64-head kernel (../prefill_kernel_choice.h), so no unit has 48.
constexpr int group_heads_for(long long num_heads) { return num_heads % 32 == 0 ? 32 : 16; }
// The heads of a decode split unit: as group_heads_for, but 16 at head tile 1 (twice the CTAs for
// a decode whose units would leave most SMs idle; the planner's head tile says which).
constexpr int decode_unit_heads(long long num_heads, long long head_tiles) {
  return head_tiles >= 2 ? group_heads_for(num_heads) : 16;
}

// Warpgroup 0 attends (softmax, PV, the unit's epilogue); warpgroups 1 and 2 convert: converter h
// gathers and converts dims half h of every candidate row of a chunk (h = 0: NoPE dims 0..255;
// h = 1: NoPE dims 256..447 and the 64 RoPE dims), writes them to the chunk's K tile and runs its
// half of QK^T with the converted values as the register A operand.
constexpr int kConverters = 2;
constexpr int kThreads = (1 + kConverters) * kWarpgroupThreads;  // 384
constexpr int kConverterThreads = kConverters * kWarpgroupThreads;
// __launch_bounds__(384, 1) gives every thread 168 registers at launch (64,512 for the CTA);
// setmaxnreg then moves them between the roles (attend + 2 x convert <= 3 x 168).
constexpr int kLaunchRegisters = 168;

// Tiles are [column blocks][rows][128 bytes], 128-byte swizzled (16-byte chunk c of row r at
// chunk c ^ (r % 8)), the wgmma canonical layout, each starting on a 1024-byte boundary.
constexpr int kTileRowBytes = 128;
// The K tile of a chunk: 64 candidate rows x 512 dims (bf16), 8 column blocks of 64 dims, the
// dims in the order QK^T takes them (prefill_small_work.cuh). It is V as well: PV reads it MN-major
// as the A operand of O^T = V^T P^T.
constexpr int kKColumnBlockBytes = kChunkRows * kTileRowBytes;  // 8 KB
constexpr int kKTileBytes = 8 * kKColumnBlockBytes;              // 64 KB
constexpr int kKTiles = 2;  // chunk j in tile j % 2: the converters fill j + 1 while PV reads j
// QK^T: 32 k-steps of 16 dims, 16 per converter; PV: 4 k-steps of 16 candidates per chunk, 8
// m-tiles of 64 dims (one per column block of the K tile).
constexpr int kKStepsPerConverter = nvfp4::kHeadDim / 16 / kConverters;  // 16
constexpr int kPvKSteps = kChunkRows / 16;                               // 4
constexpr int kPvMTiles = nvfp4::kHeadDim / 64;                          // 8
// S partials are stored [head][candidate] with 4 floats of padding a head: the converters' stores
// (8 heads x 4 lane pairs a warp instruction) then hit 32 different banks.
constexpr int kSPartialStride = kChunkRows + 4;
// A row's dims in words of 8 (16 bytes of bf16 Q, 4 bytes of codes): the RoPE dims from word 56 on.
constexpr int kRopeFirstWord = nvfp4::kNopeDim / 8;  // 56

template <int kGroupHeads>
struct Geometry {
  static_assert(kGroupHeads == 16 || kGroupHeads == 32, "16 or 32 heads a unit");
  static constexpr int kHeads = kGroupHeads;
  // Each converter's Q half: kHeads rows x 256 dims (in the order its A fragments hold them), 4
  // column blocks of 64.
  static constexpr int kQColumnBlockBytes = kHeads * kTileRowBytes;
  static constexpr int kQHalfBytes = 4 * kQColumnBlockBytes;
  // The row table (RowTable below) gives both converters their rows' cache addresses, so that 64
  // threads a chunk load the indices and do the address math rather than every converter thread
  // for its own two rows. Its writer: at 16 heads a unit the attend warpgroup, four chunks ahead
  // (3-6% faster than the converters' own addresses there; a converter writing it instead was 1-2%
  // slower); at 32, where the attend's softmax is twice as long and its writes on the attend's
  // path cost 0-3%, converter 0's first 64 threads, two chunks ahead (4-5% faster at T = 4096 than
  // the converters' own addresses). H200, docs/hopper_small_kernel.md. The short split form of
  // 16-head units has converter 0 write it too (UnitForm, below); CAKE_SMALL_TABLE_BY_CONVERTER
  // does so at 16 heads everywhere (a development build, to trace who paces the chunk).
#ifdef CAKE_SMALL_TABLE_BY_CONVERTER
  static constexpr bool kAttendWritesTable = false;
#else
  static constexpr bool kAttendWritesTable = kHeads == 16;
#endif
  // S halves in two buffers by chunk parity at 16 heads a unit: the converters store chunk j's
  // while the attend warpgroup may still read chunk j - 1's, so they wait only for chunk j - 2's
  // (0.4-1.3% faster at T = 4096, H200). At 32 the second buffer's 17 KB take the shared memory
  // past the 196 KB carve-out (190,464 -> 207,872 bytes when timed, without the row table), the
  // L1 from 60 KB to 28 KB, and the kernel was 19-24% slower: one buffer there.
  static constexpr int kSBuffers = kHeads == 16 ? 2 : 1;
  // P^T, the B operand of PV: kHeads rows x 64 candidates (K-major), one column block.
  static constexpr int kPTileBytes = kHeads * kTileRowBytes;
  // n-blocks of 8 heads in the wgmma accumulators: S^T holds 4 * kHeadBlocks floats a thread, each
  // of the 8 O^T m-tiles as many.
  static constexpr int kHeadBlocks = kHeads / 8;
  static constexpr int kSAccumulators = 4 * kHeadBlocks;
  static constexpr int kOAccumulators = kPvMTiles * kSAccumulators;  // 4 * kHeads
  // The softmax runs 8 threads per head (8 candidates each); the attend warpgroup's thread t takes
  // heads t / 8 + 16 k, k < kSoftmaxHeads.
  static constexpr int kSoftmaxHeads = kHeads / 16;
  // setmaxnreg budgets: the attend warpgroup holds O^T and one head's softmax at a time (48 more
  // registers leave it without spills); the converters get the rest (capped at 200: they need
  // about 130).
  static constexpr int kAttendRegisters = kOAccumulators + 48;
  static constexpr int kConvertRegistersLeft = (3 * kLaunchRegisters - kAttendRegisters) / kConverters / 8 * 8;
  static constexpr int kConvertRegisters = kConvertRegistersLeft < 200 ? kConvertRegistersLeft : 200;
  static_assert(kAttendRegisters % 8 == 0 && kAttendRegisters <= 256, "setmaxnreg takes multiples of 8 up to 256");
  static_assert(kAttendRegisters + kConverters * kConvertRegisters <= 3 * kLaunchRegisters,
                "the roles' registers fit what the CTA was launched with");
};

// Short decode splits. A split of a few chunks runs each role's code about once, so what it costs is
// its start (the lengths, the indices, the rows: trips to memory one after another) and its code,
// not the chunk loop's steady rate. The 16-head split instance has a second form for them
// (kShortSplits): converter 0 writes the row table, two chunks ahead, instead of the attend
// warpgroup (whose table start loads four chunks' indices one after another), and the converters'
// row loads are predicated into the registers themselves (the 32-head units' loads) instead of
// `valid ? load : 0` selects. The two together cost the long loops (64 x 8 x 4096's 32-chunk
// splits 4%, the prefill's 16-head units 4.6-7.4%, H200) and take 0.94-0.96 of the time at two
// chunks a split (1 x 64 x 2048, 8 x 16 x 1024) and 0.96-0.97 at four (8 x 64 x 1024, 4 x 128 x
// 1024; H100, docs/hopper_small_kernel.md, "The short form of the split units"); which part of a
// short split they shorten was not traced. A decode of several splits whose largest split holds at
// most kShortSplitChunks chunks takes it (one split keeps the long form: its instance ends in the
// output).
#ifdef CAKE_SMALL_SHORT_SPLIT_CHUNKS
constexpr int kShortSplitChunks = CAKE_SMALL_SHORT_SPLIT_CHUNKS;  // a development build: another bound
#else
constexpr int kShortSplitChunks = 4;
#endif
template <int kGroupHeads, bool kShortSplits>
struct UnitForm {
  static_assert(!kShortSplits || kGroupHeads == 16, "the short form is a 16-head unit's");
  // Whether the attend warpgroup writes the row table (else converter 0's first 64 threads do).
  static constexpr bool kAttendWritesTable = Geometry<kGroupHeads>::kAttendWritesTable && !kShortSplits;
  // Whether the converters' row loads are predicated (a masked row keeps stale bytes, masked where
  // they are used) rather than selected (a masked row's registers zeroed).
  static constexpr bool kPredicatedLoads = kGroupHeads == 32 || kShortSplits;
};

// The row table: the cache addresses of each row of the CTA's chunks, by chunk c over the CTA's
// walk (slot c % kTableSlots), written ahead by one row a thread of 64 threads (the attend
// warpgroup's or converter 0's, UnitForm::kAttendWritesTable) and read by both converters a chunk
// before they convert c. A row's data row address with bit 0 set when the row is valid (data rows
// are 16-byte aligned), and its scale row's; a masked row has the list's base in both. 16-byte
// aligned, so that an entry is one LDS.128: behind the mbarriers the table is otherwise only 8-byte
// aligned, an entry two LDS.64, and that build was 3-6% slower at 16 heads (H200).
struct alignas(16) RowEntry {
  uint64_t data;
  uint64_t scale;
};
constexpr int kTableSlots = 4;
// A work unit's fields (../common/work_unit.h; work_unit in ../common/candidate_lists.cuh).
template <bool kSplitItems>
using Unit = WorkUnit<kSplitItems>;
// Where a unit's result goes: the output and out_lse (the prefill, and a decode of one split), or
// the split's fp32 partial and LSE in the scratch (a decode of several splits, merged afterwards).
// A template argument rather than a test of num_splits, so that each instance holds one epilogue:
// with both in the split instance its code grew by a tenth, and its short decode splits spend
// much of their time fetching instructions (docs/benchmarks.md).
enum class UnitEnd { kOutput, kPartial };
// A place in the CTA's chunks, in order over its units with candidates (seek_unit / advance in
// prefill_small_work.cuh): the converters' walk, and the row table's writer's (when the attend
// warpgroup writes it, two copies in the table by parity: its thread 0 advances one into the other).
template <bool kSplitItems>
struct ChunkCursor {
  int unit;  // >= the unit count: past the end
  int chunk;
  Unit<kSplitItems> u;
};
template <bool kAttendWrites, bool kSplitItems>
struct RowTable {
  RowEntry rows[kTableSlots][kChunkRows];
  ChunkCursor<kSplitItems> cursor[2];
};
template <bool kSplitItems>
struct RowTable<false, kSplitItems> {  // converter 0 keeps its cursor in registers
  RowEntry rows[kTableSlots][kChunkRows];
};

// kSplitItems: the decode's instance (units of one split each, partials into the scratch, or the
// output with one split); the prefill's has whole-list units.
template <int kGroupHeads, bool kSplitItems>
struct alignas(1024) SharedStorage {
  using G = Geometry<kGroupHeads>;
  uint8_t k[kKTiles][kKTileBytes];                   // K (= V) of two chunks, bf16, swizzled
  uint8_t q[kConverters][G::kQHalfBytes];            // the unit's Q, one half per converter
  // bf16 weights of the chunk, [head][candidate], per chunk parity: a warp's wgmma_wait need not
  // cover the other warps' share of PV, so P is rewritten for chunk j + 2 only after the kPReady
  // barrier of chunk j + 1, which every warp reaches after its PV of chunk j.
  uint8_t p[2][G::kPTileBytes];
  float s_partial[G::kSBuffers][kConverters][kGroupHeads][kSPartialStride];  // by chunk parity: each converter's half of S
  float rescale[2][kGroupHeads];                     // per chunk parity: each head's O rescale factor
  float out_scale[kGroupHeads];                      // unit epilogue: each head's output scale
  uint8_t valid[kKTiles][kChunkRows];                // candidate flags of the chunk in each K tile
  // mbarriers
  uint64_t k_full[kKTiles];   // both converters wrote the tile, their S halves and the flags
  uint64_t k_empty[kKTiles];  // PV of the tile's chunk retired
  uint64_t s_empty[G::kSBuffers];  // the attend warpgroup has read the S halves in the buffer
  uint64_t table_full[kTableSlots];  // by chunk % 4: the chunk's row entries are written
  // The rows' addresses, ahead. Sized by Geometry, not UnitForm: the short split form leaves the
  // attend's cursor copies unused, so that both 16-head split instances have one storage size.
  RowTable<G::kAttendWritesTable, kSplitItems> table;
};

template <int kGroupHeads, bool kSplitItems>
constexpr int smem_bytes() {
  return int(sizeof(SharedStorage<kGroupHeads, kSplitItems>));
}
constexpr int max_smem_bytes(int a, int b) { return a > b ? a : b; }
constexpr int kMaxSmemBytes = max_smem_bytes(max_smem_bytes(smem_bytes<16, false>(), smem_bytes<32, false>()),
                                             max_smem_bytes(smem_bytes<16, true>(), smem_bytes<32, true>()));
static_assert(kMaxSmemBytes <= 232448, "the small-heads prefill must fit 227 KB of shared memory");
template <int kGroupHeads, bool kSplitItems>
constexpr bool tiles_aligned() {
  using Storage = SharedStorage<kGroupHeads, kSplitItems>;
  return offsetof(Storage, q) % 1024 == 0 && offsetof(Storage, p) % 1024 == 0;
}
// The split instance's storage differs only in its last member (the row table's cursors carry the
// split fields), and is not standard-layout (offsetof would not apply).
static_assert(tiles_aligned<16, false>() && tiles_aligned<32, false>(), "swizzled tiles start on 1024-byte boundaries");

// Named barriers (id 0 is __syncthreads): among the attend warpgroup's 128 threads, and within
// each converter warpgroup.
enum NamedBarrier : int {
  kPReady = 1,          // P, the rescale factors and the "some head moved" flag are written
  // Unit epilogue, twice: the output scales are written; then every thread has read them (before
  // the next unit's epilogue rewrites them).
  kScalesReady = 2,
  kQBarrierFirst = 3,   // + converter: its warps are done with the previous Q / stored the new one
  kTableCursorMoved = 5,  // attend: the row table's cursor moved (its start only)
};

}  // namespace cake::cuda::hopper_small

namespace cake::cuda {

// What the host needs: the kernel's threads and its largest shared memory.
struct HopperSmallPrefillLayout {
  static constexpr int kThreads = hopper_small::kThreads;
  static constexpr int kMaxSmemBytes = hopper_small::kMaxSmemBytes;
};

}  // namespace cake::cuda
