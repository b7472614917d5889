// Geometry, thread roles, register budgets, shared-memory plan and barrier ids of the Hopper
// (sm_90a) prefill kernel. Plain C++: the host checks the fit and the kernel choice asks which
// heads it serves (HopperPrefillLayout at the end).
#pragma once

#include <cstddef>
#include <cstdint>

#include "../../format/nvfp4_format.h"

namespace cake::cuda::hopper {

constexpr int kHeads = 64;      // heads per work item: the wgmma M of QK^T and PV
constexpr int kBlockRows = 64;  // candidates per block (one list chunk)
constexpr int kWarpgroupThreads = 128;
// Warpgroups 0 and 1 are the consumers (QK^T of one block of each pair, softmax, PV for half of
// the output dims); warpgroups 2 and 3 gather and dequantize (2 the even blocks, 3 the odd ones).
constexpr int kConsumers = 2;
constexpr int kDequantWarpgroups = 2;
constexpr int kThreads = (kConsumers + kDequantWarpgroups) * kWarpgroupThreads;  // 512
constexpr int kConsumerThreads = kConsumers * kWarpgroupThreads;
constexpr int kDequantThreads = kDequantWarpgroups * kWarpgroupThreads;
// setmaxnreg budgets, the whole register file between them. A consumer holds a 64 x 256 fp32 O
// accumulator (128) and a 64 x 64 S accumulator (32); a dequant thread holds one block's codes
// for its half row in flight (28). At 184 / 72 the consumers spill; at 192 / 64 the dequant
// threads spill a few words around the quarter hand-overs.
constexpr int kConsumerRegisters = 192;
constexpr int kDequantRegisters = 64;
static_assert(kConsumers * kWarpgroupThreads * kConsumerRegisters +
                      kDequantWarpgroups * kWarpgroupThreads * kDequantRegisters ==
                  65536,
              "the register budgets fill the register file exactly");

// A K tile (which is also V) and the Q tile: [8 column blocks][64 rows][128 bytes], 128-byte
// swizzled (16-byte chunk c of row r stored at chunk c ^ (r % 8)), the wgmma canonical layout.
constexpr int kTileRowBytes = 128;
constexpr int kColumnBlockBytes = kBlockRows * kTileRowBytes;
constexpr int kTileBytes = 8 * kColumnBlockBytes;
constexpr int kPTileBytes = kHeads * kBlockRows * 2;  // bf16 weights of one block, swizzled likewise

// A quarter of a tile (128 dims, two column blocks) is the unit the dequant hands over. Consumer
// 0's PV reads quarters 0 then 1, consumer 1's quarters 3 then 2, so quarters 0 and 3 are free
// half-way through PV: the dequant fills them first and QK^T reads them first, so the MMAs on
// them hide the conversion of quarters 1 and 2. The RoPE dims (the last 64 of quarter 3) are
// copied from global memory when quarter 3 is free, and QK^T reads them last.
constexpr int kQuarters = 4;
constexpr int kStepsPerQuarter = 8;                                 // QK^T k-steps of 16 dims
constexpr int kRopeSteps = nvfp4::kRopeDim / 16;                    // 4
constexpr int kNopeStepsOfQuarter3 = kStepsPerQuarter - kRopeSteps;  // 4
constexpr int fill_order(int step) { return step == 0 ? 0 : step == 1 ? 3 : step == 2 ? 1 : 2; }

// A row's NoPE codes are 14 units of 16 bytes (two 16-value groups each), split over the row's
// two dequant threads: thread `side` takes units side, side + 2, ..., so each has two units in
// quarters 0..2 and one in quarter 3 (dims 384..447), and four of the eight RoPE chunks.
constexpr int kCodeUnits = nvfp4::kNopeBytes / 16;   // 14
constexpr int kUnitsPerThread = kCodeUnits / 2;       // 7
constexpr int kRopeChunks = nvfp4::kRopeBytes / 16;  // 8
constexpr int kRopeFirstChunk = nvfp4::kNopeBytes / 4;  // tile chunk (8 dims) of RoPE dim 0: 56
constexpr int first_unit(int quarter) { return 2 * quarter; }
constexpr int end_unit(int quarter) { return quarter == 3 ? kUnitsPerThread : 2 * quarter + 2; }

struct alignas(1024) SharedStorage {
  uint8_t q[kTileBytes];                     // the item's Q, 64 heads x 512, swizzled
  uint8_t k[2][kTileBytes];                  // K (= V) of the pair's two blocks
  uint8_t p[kConsumers][kPTileBytes];        // bf16 weights of each consumer's block
  float max_exchange[kConsumers][kHeads];    // each consumer's block max per head
  float sum_exchange[kConsumers][kHeads];    // item epilogue: row sums of the bf16 weights
  float exact_exchange[kConsumers][kHeads];  // and of the fp32 weights (the LSE)
  // Scale rows of the pair's candidates, by pair parity and block: copied one pair ahead.
  uint8_t scales[2][2][kBlockRows][nvfp4::kScaleRowBytes];
  uint8_t valid[2][kBlockRows];  // candidate flags of the pair's two blocks
  // mbarriers
  uint64_t q_full;                    // the item's Q landed (one cp.async arrival per dequant thread)
  uint64_t q_empty;                   // both consumers finished the item's last QK^T
  uint64_t quarter_full[kQuarters];   // the NoPE dims of quarter q of both K tiles are written
  uint64_t rope_full;                 // the RoPE dims (in quarter 3) landed (cp.async arrivals)
  uint64_t quarter_empty[kQuarters];  // no consumer reads quarter q of either tile any more
};
constexpr int kSmemBytes = int(sizeof(SharedStorage));
static_assert(sizeof(SharedStorage) <= 232448, "the Hopper prefill must fit 227 KB of shared memory");
static_assert(offsetof(SharedStorage, k) % 1024 == 0 && offsetof(SharedStorage, p) % 1024 == 0,
              "swizzled tiles start on 1024-byte boundaries");

// Named barriers among the 256 consumer threads (id 0 is __syncthreads).
enum ConsumerBarrier : int {
  kMaxExchanged = 1,   // both consumers' block maxima are in max_exchange
  kPReady = 2,         // both P tiles are written
  kSumsExchanged = 3,  // item epilogue: both consumers' row sums are in sum/exact_exchange
};

}  // namespace cake::cuda::hopper

namespace cake::cuda {

// What the host needs: which calls the kernel serves, and whether the device fits it.
struct HopperPrefillLayout {
  static constexpr int kHeads = hopper::kHeads;
  static constexpr int kThreads = hopper::kThreads;
  static constexpr int kSmemBytes = hopper::kSmemBytes;
};

}  // namespace cake::cuda
