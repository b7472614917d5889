// Geometry, roles, register budgets, shared-memory plan and barrier ids of the fused 64-head Hopper
// (sm_90a) prefill kernel, a development kernel (built with -DCAKE_HOPPER_FUSED, which makes the
// 64-head kernel's whole-list launches run this one instead; docs/hopper_kernel.md, "What would
// close the gap", item 4, and "Development builds"). Plain C++: the host checks the fit.
//
// The converters that turn a chunk's NVFP4 rows into bf16 also multiply them: S^T = K Q^T with the
// freshly converted K as the register A operand of wgmma (M = 64 candidates, N = 64 heads), so QK^T
// reads only Q from shared memory and no K tile has to be complete before it starts. Converter c
// takes the chunks of parity c whole (all 64 rows, all 512 dims), runs the chunk's softmax on its
// S^T and writes P; two accumulator warpgroups run O = P V for every chunk in order, each for half
// of the dims.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../../format/nvfp4_format.h"
#include "../common/work_unit.h"

namespace cake::cuda::hopper_fused {

constexpr int kChunkRows = nvfp4::kChunkSize;  // 64 candidates: the M of QK^T, the K of PV
constexpr int kHeads = 64;                     // a work item's heads: the N of QK^T, the M of PV
constexpr int kWarpgroupThreads = 128;
constexpr int kWarpsPerWarpgroup = kWarpgroupThreads / 32;

// Warpgroups 0 and 1 accumulate (O = P V over dims half p, the item's epilogue; accumulator 0
// also writes the row table, accumulator 1 copies the RoPE dims into the K tiles); warpgroups 2
// and 3 convert (converter c: the chunks of parity c).
constexpr int kAccumulators = 2;
constexpr int kConverters = 2;
constexpr int kThreads = (kAccumulators + kConverters) * kWarpgroupThreads;  // 512
// __launch_bounds__(512, 1): 128 registers a thread at launch; setmaxnreg moves them to the
// accumulators (O: 64 heads x 256 dims in fp32 is 128 a thread).
constexpr int kLaunchRegisters = 128;
#ifdef CAKE_FUSED_ACCUMULATOR_REGISTERS
constexpr int kAccumulatorRegisters = CAKE_FUSED_ACCUMULATOR_REGISTERS;
#else
constexpr int kAccumulatorRegisters = 160;
#endif
constexpr int kConverterRegisters = 2 * kLaunchRegisters - kAccumulatorRegisters;  // 96
static_assert(kAccumulatorRegisters % 8 == 0 && kConverterRegisters % 8 == 0, "setmaxnreg takes multiples of 8");

// Every wait of this kernel sleeps rather than polls (sm90::mbarrier_wait's suspend-time hint: 10 ms,
// far longer than any hand-over, so a warp wakes when its phase completes): the polling loops were
// ~20% of this kernel's issued instructions (docs/benchmarks.md, "The fused 64-head design rebuilt ...").
constexpr uint32_t kWaitSuspendHintNs = 10000000;

// Tiles are [column blocks][rows][128 bytes], 128-byte swizzled (16-byte chunk k of row r at chunk
// k ^ (r % 8)), each starting on a 1024-byte boundary.
constexpr int kTileRowBytes = 128;
// K tile: 64 candidate rows x 512 positions (bf16), 8 column blocks of 64. Positions 0..447 hold
// the NoPE dims in the order the converters produce them (the small-heads kernel's order,
// ../hopper_small/prefill_small_work.cuh: converter half h's k-step s in 16-byte chunks 32 h + 2 s
// and + 1); positions 448..511 (column block 7) the RoPE dims in their own order, copied from the
// cache by accumulator 1. It is V too: PV reads it MN-major as the B operand.
constexpr int kKColumnBlockBytes = kChunkRows * kTileRowBytes;  // 8 KB
constexpr int kKTileBytes = 8 * kKColumnBlockBytes;              // 64 KB
constexpr int kRopeColumnBlock = 7;
// QK^T: 32 k-steps, in two halves of 16 (the small-heads kernel's converter halves: half 0 NoPE
// groups 0..15, half 1 groups 16..27 then the 4 RoPE k-steps).
constexpr int kKStepsPerHalf = 16;
constexpr int kRopeKStep = 12;  // half 1's first RoPE k-step
// Q: the item's 64 heads x 512 positions in the K tile's order, as two halves of 4 column blocks.
constexpr int kQColumnBlockBytes = kHeads * kTileRowBytes;  // 8 KB
constexpr int kQHalfBytes = 4 * kQColumnBlockBytes;          // 32 KB
// P: the chunk's bf16 weights [64 heads][64 candidates], K-major: the A operand of PV.
constexpr int kPTileBytes = kHeads * kTileRowBytes;  // 8 KB
// PV: each accumulator's 256 positions as two m64n128k16 halves, 4 k-steps of 16 candidates.
constexpr int kPvKSteps = kChunkRows / 16;
constexpr int kAccumulatorPositions = 256;

// The row table: each row's data-row address (bit 0: valid) and its 32-byte scale row (copied by
// cp.async; zeros for a masked row), by chunk over the CTA's walk (slot c % kTableSlots), written
// four chunks ahead by accumulator 0's threads 0..63; and each chunk's place in its item
// (ChunkInfo, by its thread 0). The converters read a chunk's addresses two chunks ahead (their
// code loads) and its scales at its start.
using RowEntry = uint64_t;
constexpr int kTableSlots = 4;
// Entries are written four chunks ahead and a converter reads chunk g + 2's while converting g:
// fewer than 3 slots would have a writer wait for a read that waits for it.
static_assert(kTableSlots >= 3, "the row table's hand-overs need 3 slots or more");
// Flags of ChunkInfo.
constexpr int kFirstChunk = 1;   // the item's first chunk (the reference restarts; its converter loads Q)
constexpr int kSecondChunk = 2;  // the item's second (the other converter's first: it waits for Q)
constexpr int kLastChunk = 4;    // the item's last (its converter frees Q once its QK^T retired)
struct alignas(16) ChunkInfo {
  int item;     // the work item (-1: past the CTA's chunks)
  int ordinal;  // how many items with chunks came before it in the CTA's walk (Q's barrier phases)
  int flags;
  int pad;
};
// A place in the CTA's chunks (the table writer's; in shared memory, advanced by one thread).
using Unit = WorkUnit<false>;
struct ChunkCursor {
  int item;  // >= the item count: past the end
  int chunk;
  int ordinal;
  Unit u;
};

struct alignas(1024) SharedStorage {
  uint8_t k[2][kKTileBytes];     // K (= V) of chunk j in tile j % 2
  uint8_t q[2][kQHalfBytes];     // the item's Q, by QK^T half
  uint8_t p[2][kPTileBytes];     // P of chunk j in p[j % 2] (written by converter j % 2)
  uint8_t scale_rows[kTableSlots][kChunkRows][nvfp4::kScaleRowBytes];
  RowEntry rows[kTableSlots][kChunkRows];
  ChunkInfo info[kTableSlots];
  ChunkCursor cursor[2];         // the table writer's, by chunk parity
  // Per chunk parity (written by that converter's softmax, read by the accumulators and by the
  // other converter): each head's reference after the chunk, its O rescale factor, and the
  // chunk's weight sums by converter warp (exact fp32 weights; the bf16-rounded ones PV multiplies).
  float reference[2][kHeads];
  float rescale[2][kHeads];
  float exact_sums[2][kWarpsPerWarpgroup][kHeads];
  float rounded_sums[2][kWarpsPerWarpgroup][kHeads];
  // When a head may move: a converter's warps' head maxima, then the new references (a copy per warp).
  float chunk_max[2][kWarpsPerWarpgroup][kHeads];
  float out_scale[kHeads];                         // the item's epilogue
  // mbarriers
  uint64_t p_full[2];      // converter c: chunk's K tile (NoPE), P, the sums and the factors written (128)
  // [tile][p]: accumulator p's PV of the tile's chunk retired (128): column blocks 4 p .. 4 p + 3,
  // which the converter's half p writes (P, the sums and the factors are rewritten only after both).
  uint64_t k_empty[2][kAccumulators];
  uint64_t rope_full[2];   // accumulator 1's RoPE copies of the tile's chunk landed (64, cp.async)
  uint64_t table_full[kTableSlots];   // the slot's chunk's rows and info written (64)
  uint64_t scales_full[kTableSlots];  // the slot's chunk's scale rows landed (64, cp.async)
  uint64_t q_full;         // the item's Q stored by its first chunk's converter (128)
  uint64_t q_free;         // the item's last QK^T retired (128, by its last chunk's converter)
};
static_assert(sizeof(SharedStorage) <= 232448, "the fused kernel must fit 227 KB of shared memory");
static_assert(offsetof(SharedStorage, q) % 1024 == 0 && offsetof(SharedStorage, p) % 1024 == 0,
              "swizzled tiles start on 1024-byte boundaries");

// Named barriers (id 0 is __syncthreads).
enum NamedBarrier : int {
  kQStored = 1,            // + converter: its warps stored the item's Q
  kMayMove = 3,            // + converter: whether some head of the chunk may move its reference (bar.red.or)
  kMaximaStored = 5,       // + converter: its warps' head maxima are in chunk_max
  kAccumulatorScales = 7,  // both accumulators: the item's output scales written / read
  kTableCursorMoved = 8,   // accumulator 0: the table's cursor moved (its start only)
};

}  // namespace cake::cuda::hopper_fused

namespace cake::cuda {

struct HopperFusedPrefillLayout {
  static constexpr int kThreads = hopper_fused::kThreads;
  static constexpr int kSmemBytes = int(sizeof(hopper_fused::SharedStorage));
};

}  // namespace cake::cuda
