// Geometry and shared-memory map of the Hopper (sm_90a) prefill kernel. Plain C++, so the host
// can check the fit and the planner can ask which heads it serves.
#pragma once

#include "../../format/nvfp4_format.h"

namespace cake::cuda {

struct HopperPrefillLayout {
  static constexpr int kHeads = 64;            // heads per work item: one wgmma M
  static constexpr int kBlockRows = 64;        // candidates per block (a chunk of the list)
  static constexpr int kStageRows = 16;        // candidates per gather stage (a quarter block)
  static constexpr int kStages = 4;            // raw gather stages: one block of lead

  // Threads: warpgroup 0 is the producer, warpgroups 1 and 2 the consumers.
  static constexpr int kWarpgroupThreads = 128;
  static constexpr int kProducerThreads = kWarpgroupThreads;
  static constexpr int kConsumerThreads = 2 * kWarpgroupThreads;
  static constexpr int kThreads = kProducerThreads + kConsumerThreads;  // 384
  // Registers per thread: at launch, __launch_bounds__(kThreads, 1) gives each thread its share of
  // the 64K register file (allocated 8 at a time): 168. setmaxnreg then moves them from the
  // producer (gathers only) to the consumers (128 O accumulators each), within that total.
  static constexpr int kLaunchRegisters = 65536 / kThreads / 8 * 8;
  static constexpr int kProducerRegisters = 56;
  static constexpr int kConsumerRegisters = 224;
  // A raw stage row is the 384 gathered bytes plus 16 of padding: with 384 (= 3 * 128) every
  // row would start on the same bank and the dequant's reads of 16 rows would serialise.
  static constexpr int kRawRowStride = nvfp4::kTokenBytes + 16;

  // Q and each K tile are [8 column blocks][64 rows][128 bytes], 128-byte swizzled (16-byte
  // chunk c of row r stored at chunk c ^ (r % 8)), the wgmma canonical form.
  static constexpr int kTileRowBytes = 128;  // 64 bf16: one row of one column block
  static constexpr int kColumnBlockBytes = 64 * kTileRowBytes;
  static constexpr int kTileBytes = 8 * kColumnBlockBytes;  // 64 x 512 bf16 = 64 KB
  static constexpr int kPTileBytes = kHeads * kTileRowBytes;  // P: 64 heads x 64 candidates bf16

  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kTileBytes;  // two K tiles (K is also V)
  static constexpr int kPOffset = kKOffset + 2 * kTileBytes;
  static constexpr int kRawOffset = kPOffset + kPTileBytes;
  static constexpr int kRawStageBytes = kStageRows * kRawRowStride;
  static constexpr int kBlockValidOffset = kRawOffset + kStages * kRawStageBytes;  // u8 [tile][row]
  // Row statistics the two consumers exchange, f32 [consumer][64 rows] each: the slice maxima of
  // a block, then at the end of an item the row sums of the rounded and of the exact weights.
  static constexpr int kRowStatsOffset = kBlockValidOffset + 2 * kBlockRows;
  static constexpr int kMaxExchange = 0;                  // float index from kRowStatsOffset
  static constexpr int kSumExchange = 2 * kHeads;
  static constexpr int kExactSumExchange = 4 * kHeads;
  // mbarriers: q_full, raw_full[kStages], raw_empty[kStages], q_empty.
  static constexpr int kMbarrierBytes = 8;
  static constexpr int kBarrierOffset = kRowStatsOffset + 3 * 2 * kHeads * 4;
  static constexpr int kQFullBarrier = kBarrierOffset;  // the item's Q tile has landed
  static constexpr int kRawFullBarriers = kQFullBarrier + kMbarrierBytes;  // [stage]: its copies landed
  static constexpr int kRawEmptyBarriers = kRawFullBarriers + kStages * kMbarrierBytes;  // [stage]: read
  static constexpr int kQEmptyBarrier = kRawEmptyBarriers + kStages * kMbarrierBytes;  // Q read by all
  static constexpr int kSmemBytes = kQEmptyBarrier + kMbarrierBytes;
};

// Named barriers among the consumers (bar.sync ids; 0 is __syncthreads, used once at setup).
enum HopperBarrier : int {
  // A shared-memory MMA operand is complete and visible to the tensor cores: the next K tile
  // (with its validity flags) after a dequant, or the P tile after the softmax.
  kOperandReadyBarrier = 2,
  // Row statistics exchanged through shared memory: both consumers' slice maxima (or row sums)
  // are visible, or both have read them before either overwrites them.
  kRowExchangeBarrier = 3,
};

static_assert(HopperPrefillLayout::kSmemBytes <= 232448, "the Hopper prefill must fit 227 KB of shared memory");
static_assert(HopperPrefillLayout::kBarrierOffset % 8 == 0, "mbarriers are 8-byte aligned");
static_assert(HopperPrefillLayout::kProducerThreads * HopperPrefillLayout::kProducerRegisters +
                      HopperPrefillLayout::kConsumerThreads * HopperPrefillLayout::kConsumerRegisters <=
                  HopperPrefillLayout::kThreads * HopperPrefillLayout::kLaunchRegisters,
              "setmaxnreg: the warpgroups' registers must fit what the CTA got at launch");
static_assert(HopperPrefillLayout::kStages * HopperPrefillLayout::kStageRows == HopperPrefillLayout::kBlockRows,
              "the kernel maps stage s of a block to raw buffer s % 4: one block of raw buffers");

}  // namespace cake::cuda
