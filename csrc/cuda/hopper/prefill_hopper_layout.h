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
constexpr int kHalfRows = 32;   // candidates a dequant warpgroup converts per block: half a block
constexpr int kWarpgroupThreads = 128;
// Warpgroups 0 and 1 are the consumers: consumer c takes the blocks of each pair's position c
// (QK^T of the whole block, its softmax) and accumulates half c of the output dims over every
// block; warpgroups 2 and 3 gather and dequantize (2 the first half of each block's rows, 3 the
// second).
constexpr int kConsumers = 2;
constexpr int kDequantWarpgroups = 2;
constexpr int kThreads = (kConsumers + kDequantWarpgroups) * kWarpgroupThreads;  // 512
constexpr int kConsumerThreads = kConsumers * kWarpgroupThreads;
constexpr int kDequantThreads = kDequantWarpgroups * kWarpgroupThreads;
// setmaxnreg budgets, the whole register file between them. A consumer holds a 64 x 256 fp32 O
// accumulator (128) and a 64 x 64 S accumulator (32, then its bf16 weights: 16); a dequant
// thread holds a quarter row's codes of the next block (16). With CUDA 13.0: at 192 the split
// instance's consumers spill 8 bytes (the whole-list instance none; the dequant's conversion then
// uses up to 61 registers where it uses 54 at 56), at 184 ptxas serialises the wgmmas, at 208 the
// dequant, with 48, spills in its block loop. 200 / 56 is the split where no instance spills.
#ifndef CAKE_HOPPER_CONSUMER_REGISTERS
#define CAKE_HOPPER_CONSUMER_REGISTERS 200
#endif
constexpr int kConsumerRegisters = CAKE_HOPPER_CONSUMER_REGISTERS;
constexpr int kDequantRegisters = 256 - kConsumerRegisters;
static_assert(kConsumers * kWarpgroupThreads * kConsumerRegisters +
                      kDequantWarpgroups * kWarpgroupThreads * kDequantRegisters ==
                  65536,
              "the register budgets fill the register file exactly");

// Tiles are [8 column blocks][rows][128 bytes], 128-byte swizzled (16-byte chunk c of row r
// stored at chunk c ^ (r % 8)), the wgmma canonical layout: the Q tile (64 rows), the K tiles
// (64 rows, one block each; also V for PV) and the P tiles (64 x 64, one column block).
constexpr int kTileRowBytes = 128;
constexpr int kQColumnBlockBytes = kHeads * kTileRowBytes;      // 8 KB
constexpr int kKColumnBlockBytes = kBlockRows * kTileRowBytes;  // 8 KB
constexpr int kHalfTileBytes = kHalfRows * kTileRowBytes;       // half a block's rows in a column block: 4 KB
constexpr int kColumnBlocks = 8;                                 // of 64 dims: 512 / 64
constexpr int kColumnBlockDims = kTileRowBytes / 2;              // bf16: 64
constexpr int kQTileBytes = kColumnBlocks * kQColumnBlockBytes;
constexpr int kColumnBlocksPerConsumer = kColumnBlocks / kConsumers;  // of Q in, of O out: consumer c's dims 256 c ..
constexpr int kKTileBytes = 8 * kKColumnBlockBytes;
constexpr int kPTileBytes = kHeads * kBlockRows * 2;
// CAKE_HOPPER_MMA_ROW_SUMS (a development build): the leader's PV also multiplies its weights by
// a tile of bf16 ones (wgmma m64n8k16); every column of that product is a row's sum of the weights
// exactly as PV used them (bf16-rounded), which the epilogue divides O by, so the softmax keeps
// only the fp32 sums (the LSE's). One 128-byte-swizzle atom (8 rows of 128 bytes): any address
// the wgmma reads in it holds 1.0. (With CAKE_HOPPER_TRACE too the shared memory is full to the byte.)
constexpr int kOnesTileBytes = 1024;

// K tiles: block j of the CTA's walk (over all its items) lives in tile j % 2. The consumers
// work on a pair of blocks at once (one each), and each frees a block as soon as its last MMA
// on it retires, so the dequant writes a block while the consumers finish the other one.
constexpr int kKTiles = 2;
constexpr int kQkSteps = nvfp4::kHeadDim / 16;  // 32 k-steps of 16 dims
constexpr int kPvSteps = kBlockRows / 16;       // 4 k-steps of 16 candidates
// A consumer's PV of one block: its 256 dims (kColumnBlocksPerConsumer column blocks) as two
// m64n128k16 products, each over kPvSteps k-steps.
constexpr int kPvDimSteps = kColumnBlocksPerConsumer * kColumnBlockDims / 128;  // 2

// A K tile row is converted by four threads (parts). A row's NoPE codes are 14 units of 16 bytes
// (32 dims each): part p converts units p, p + 4, p + 8 and the quarter p of units 12, 13 (8
// bytes, 16 dims), and copies RoPE chunks 2 p, 2 p + 1 of the row's 8 (bf16 already) with cp.async.
constexpr int kPartsPerRow = 4;
constexpr int kCodeUnits = nvfp4::kNopeBytes / 16;                              // 14
constexpr int kRopeChunks = nvfp4::kRopeBytes / 16;                             // 8
constexpr int kRopeChunksPerPart = kRopeChunks / kPartsPerRow;                  // 2
constexpr int kRopeFirstChunk = nvfp4::kNopeBytes / 4;  // tile chunk (8 dims) of RoPE dim 0: 56
static_assert(kWarpgroupThreads == kHalfRows * kPartsPerRow, "a dequant warpgroup converts half a block");

#ifdef CAKE_HOPPER_TRACE
constexpr int kTraceBlocks = 48;  // the first blocks of CTA 0's walk traced
constexpr int kTraceEvents = 11;  // points a role and block (the follower's pair rows use all)
constexpr int kDequantTraceEvents = 8;  // of them the dequant's (kept in shared memory: it must fit)
#endif

struct alignas(1024) SharedStorage {
  // The item's Q, 64 heads x 512, swizzled; in a split item's epilogue its fp32 partial.
  uint8_t q[kQTileBytes];
  // K (= V) of two blocks, by block parity; after a whole-list item's last PV, that block's tile
  // holds the item's bf16 O until its TMA stores have read it.
  uint8_t k[kKTiles][kKTileBytes];
  // The bf16 weights of a pair's blocks, for the other consumer's PV. The leader's alternate by the
  // pair's parity in the CTA's walk: the follower hands its own over before its PV of the
  // leader's block has read them, so the leader's next weights must not land on them.
  uint8_t leader_p[2][kPTileBytes];
  uint8_t follower_p[kPTileBytes];
  float reference_exchange[kConsumers][kHeads];  // each row's softmax reference after consumer c's block
  // Item epilogue: row sums of the bf16 weights and of the fp32 weights (the LSE).
  float sum_exchange[kConsumers][kHeads];
  float exact_exchange[kConsumers][kHeads];
  // Scale rows of the block halves being converted, by block parity and half: copied one block ahead.
  uint8_t scales[2][kDequantWarpgroups][kHalfRows][nvfp4::kScaleRowBytes];
  // Candidate flags of each block parity: a dequant warp's ballot of its 8 rows' flags, row r in
  // bit 4 (r % 8) of word r / 8 (lane 4 k is in row k in every dequant lane order); every bit is
  // some row's flag, so a word is all ones only when its eight rows are valid. A consumer reads
  // them in two loads.
  alignas(16) uint32_t valid[2][kBlockRows / 8];
  // The cache slot of each row of block k (-1: masked), by k's parity: copied two blocks ahead,
  // so the dequant's first use of it does not wait on a load of its own registers.
  int32_t row_index[2][kDequantWarpgroups][kHalfRows];
  // mbarriers
  uint64_t q_full;  // the item's Q landed (each consumer's TMA loads of its half complete on it)
  // By block parity and dim half (kLowDims: dims 0..255 and the candidate flags, kHighDims: dims
  // 256..511, RoPE included), so a half is rewritten as soon as its last reader is done.
  uint64_t half_full[2][2];   // the half is written (stores; for the high half also the RoPE copies)
  uint64_t half_empty[2][2];  // no consumer reads the half any more
#ifdef CAKE_HOPPER_TRACE
  // The dequant warpgroups' trace points (prefill_hopper_trace.cuh): the clock's low 32 bits, in
  // shared memory so that a point costs the dequant (56 registers) one register and a 32-bit
  // address, not a 64-bit value and a 64-bit global address (spills in its loop).
  uint32_t dequant_trace[kDequantWarpgroups][kDequantTraceEvents][kTraceBlocks];
#endif
#if defined(CAKE_HOPPER_MMA_ROW_SUMS)
  alignas(1024) uint8_t ones[kOnesTileBytes];  // bf16 1.0 everywhere (kOnesTileBytes)
#endif
};
constexpr int kSmemBytes = int(sizeof(SharedStorage));
static_assert(sizeof(SharedStorage) <= 232448, "the Hopper prefill must fit 227 KB of shared memory");
static_assert(offsetof(SharedStorage, k) % 1024 == 0 && offsetof(SharedStorage, leader_p) % 1024 == 0 &&
                  offsetof(SharedStorage, follower_p) % 1024 == 0,
              "swizzled tiles start on 1024-byte boundaries");

// The two dim halves of a K tile: QK^T reads both (low first), PV's consumer c reads half c.
enum DimHalf : int { kLowDims = 0, kHighDims = 1 };
constexpr int kQkStepsPerHalf = kQkSteps / 2;

// Named barriers among the 256 consumer threads (id 0 is __syncthreads). kWeightsReady + c:
// consumer c arrives, the other waits (one-sided). kOutputStaged + c: consumer c's threads only.
enum ConsumerBarrier : int {
  kWeightsReady = 1,    // + c: consumer c's weights are in its P tile (and the follower's reference in reference_exchange[1])
  kSumsExchanged = 3,   // item epilogue: both consumers' row sums are in sum/exact_exchange
  kOutputStaged = 4,    // + c: consumer c's 128 threads wrote a round of its split partial into its half of the Q tile
  // The leader's reference after the pair's first block is in reference_exchange[0] (pairs with a
  // second block; in the item's last pair without one, kWeightsReady + 0 hands it over).
  kReferenceReady = 6,
  kScoresIssued = 7,  // the leader has issued the QK^T of the pair's first block (pairs with a second block)
  kQRopeScaled = 8,   // item start: Q's RoPE dims are scaled by 2^-9 (scale_q_rope), for both QK^Ts
  kOutputTiled = 9,   // whole lists: the leader's half of O is in the item's last K tile (one-sided)
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
