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
  static constexpr int kThreads = 384;         // producer warpgroup + two consumer warpgroups
  // A raw stage row is the 384 gathered bytes plus 16 of padding: with 384 (= 3 * 128) every
  // row would start on the same bank and the dequant's reads of 16 rows would serialise.
  static constexpr int kRawRowStride = nvfp4::kTokenBytes + 16;

  // Q and each K tile are [8 column blocks][64 rows][128 bytes], 128-byte swizzled (16-byte
  // chunk c of row r stored at chunk c ^ (r % 8)), the wgmma canonical form.
  static constexpr int kColumnBlockBytes = 64 * 128;
  static constexpr int kTileBytes = 8 * kColumnBlockBytes;  // 64 x 512 bf16 = 64 KB
  static constexpr int kPTileBytes = 64 * 128;              // P: 64 heads x 64 candidates bf16

  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kTileBytes;  // two K tiles (K is also V)
  static constexpr int kPOffset = kKOffset + 2 * kTileBytes;
  static constexpr int kRawOffset = kPOffset + kPTileBytes;
  static constexpr int kBlockValidOffset = kRawOffset + kStages * kStageRows * kRawRowStride;  // u8 [tile][row]
  static constexpr int kRowStatsOffset = kBlockValidOffset + 2 * kBlockRows;  // f32 [max|sum|exact][wg][64]
  // mbarriers: q_full, raw_full[kStages], raw_empty[kStages], q_empty
  static constexpr int kBarrierOffset = kRowStatsOffset + 3 * 2 * kHeads * 4;
  static constexpr int kSmemBytes = kBarrierOffset + (2 + 2 * kStages) * 8;
};

static_assert(HopperPrefillLayout::kSmemBytes <= 232448, "the Hopper prefill must fit 227 KB of shared memory");
static_assert(HopperPrefillLayout::kBarrierOffset % 8 == 0, "mbarriers are 8-byte aligned");
static_assert(HopperPrefillLayout::kStages * HopperPrefillLayout::kStageRows == HopperPrefillLayout::kBlockRows,
              "the kernel maps stage s of a block to raw buffer s % 4: one block of raw buffers");

}  // namespace cake::cuda
