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
constexpr int kSlotRows = 32;   // candidates per K slot: half a block
constexpr int kWarpgroupThreads = 128;
// Warpgroups 0 and 1 are the consumers (QK^T of one half of each block, softmax, PV of the whole
// block for half of the output dims); warpgroups 2 and 3 gather and dequantize (2 the first half
// of each block, 3 the second).
constexpr int kConsumers = 2;
constexpr int kDequantWarpgroups = 2;
constexpr int kThreads = (kConsumers + kDequantWarpgroups) * kWarpgroupThreads;  // 512
constexpr int kConsumerThreads = kConsumers * kWarpgroupThreads;
constexpr int kDequantThreads = kDequantWarpgroups * kWarpgroupThreads;
// setmaxnreg budgets, the whole register file between them. A consumer holds a 64 x 256 fp32 O
// accumulator (128) and a 64 x 32 S accumulator (16); a dequant thread holds a quarter row's
// codes of the next block (16).
constexpr int kConsumerRegisters = 192;
constexpr int kDequantRegisters = 64;
static_assert(kConsumers * kWarpgroupThreads * kConsumerRegisters +
                      kDequantWarpgroups * kWarpgroupThreads * kDequantRegisters ==
                  65536,
              "the register budgets fill the register file exactly");

// Tiles are [8 column blocks][rows][128 bytes], 128-byte swizzled (16-byte chunk c of row r
// stored at chunk c ^ (r % 8)), the wgmma canonical layout: the Q tile (64 rows), the K slots
// (32 rows; a slot is also V for PV) and the P tile (64 x 64, one column block).
constexpr int kTileRowBytes = 128;
constexpr int kQColumnBlockBytes = kHeads * kTileRowBytes;        // 8 KB
constexpr int kSlotColumnBlockBytes = kSlotRows * kTileRowBytes;  // 4 KB
constexpr int kQTileBytes = 8 * kQColumnBlockBytes;
constexpr int kSlotBytes = 8 * kSlotColumnBlockBytes;
constexpr int kPTileBytes = kHeads * kBlockRows * 2;

// K slots: block j of the CTA's walk (over all its items) lives in slots 2 (j % 2) and
// 2 (j % 2) + 1 (its two halves), so the dequant writes block j + 1 while the consumers read
// block j: a full block of slack on each side.
constexpr int kSlots = 4;
constexpr int kQkSteps = nvfp4::kHeadDim / 16;       // 32 k-steps of 16 dims
constexpr int kPvStepsPerSlot = kSlotRows / 16;      // 2

// A slot row is converted by four threads (parts). A row's NoPE codes are 14 units of 16 bytes
// (32 dims each): part p converts units p, p + 4, p + 8 (and p + 12 for parts 0, 1), and copies
// RoPE chunks 2 p, 2 p + 1 of the row's 8 (bf16 already) with cp.async.
constexpr int kPartsPerRow = 4;
constexpr int kCodeUnits = nvfp4::kNopeBytes / 16;                              // 14
constexpr int kRopeChunks = nvfp4::kRopeBytes / 16;                             // 8
constexpr int kRopeChunksPerPart = kRopeChunks / kPartsPerRow;                  // 2
constexpr int kRopeFirstChunk = nvfp4::kNopeBytes / 4;  // tile chunk (8 dims) of RoPE dim 0: 56
static_assert(kWarpgroupThreads == kSlotRows * kPartsPerRow, "a dequant warpgroup converts one slot");

struct alignas(1024) SharedStorage {
  uint8_t q[kQTileBytes];       // the item's Q, 64 heads x 512, swizzled
  uint8_t k[kSlots][kSlotBytes];  // K (= V) of two blocks, by halves
  uint8_t p[kPTileBytes];       // bf16 weights of the block: consumer c writes columns 32c ..
  float max_exchange[kConsumers][kHeads];    // each consumer's half-block max per head
  float sum_exchange[kConsumers][kHeads];    // item epilogue: row sums of the bf16 weights
  float exact_exchange[kConsumers][kHeads];  // and of the fp32 weights (the LSE)
  // Scale rows of the slots being converted, by block parity and half: copied one block ahead.
  uint8_t scales[2][kDequantWarpgroups][kSlotRows][nvfp4::kScaleRowBytes];
  uint8_t valid[2][kBlockRows];  // candidate flags of each block parity
  // mbarriers
  uint64_t q_full;         // the item's Q landed (one cp.async arrival per dequant thread)
  uint64_t q_empty;        // both consumers finished the item's last QK^T
  uint64_t block_full[2];  // both slots of the block of this parity are written (stores + RoPE copies)
  uint64_t block_empty[2];  // no consumer reads the block of this parity any more
};
constexpr int kSmemBytes = int(sizeof(SharedStorage));
static_assert(sizeof(SharedStorage) <= 232448, "the Hopper prefill must fit 227 KB of shared memory");
static_assert(offsetof(SharedStorage, k) % 1024 == 0 && offsetof(SharedStorage, p) % 1024 == 0,
              "swizzled tiles start on 1024-byte boundaries");

// Named barriers among the 256 consumer threads (id 0 is __syncthreads).
enum ConsumerBarrier : int {
  kMaxExchanged = 1,   // both consumers' half-block maxima are in max_exchange
  kPReady = 2,         // both halves of the P tile are written
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
