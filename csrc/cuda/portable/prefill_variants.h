// Geometry of the portable prefill kernel and the table of its compiled instances. Plain C++
// (no CUDA types), so the planner and the Python module can ask what fits a device.
#pragma once

#include "../../format/nvfp4_format.h"

namespace cake::cuda {

struct PrefillTile {
  static constexpr int kThreadsPerHeadTile = 128;             // 4 warps: one per 128 of the 512 dims
  static constexpr int kSubtileRows = 32;                     // candidates per pipeline step
  static constexpr int kRowStride = nvfp4::kHeadDim + 8;      // bf16 elements; +16 B per row
                                                              // keeps ldmatrix conflict-free
  static constexpr int kRawStageBytes = kSubtileRows * nvfp4::kTokenBytes;

  static constexpr int kPStride = kSubtileRows + 8;  // bf16; +16 B per row for ldmatrix

  // Per head tile: the split-k partials of S, float4 [quarter][4 n-tiles][32 lanes], and the row
  // statistics the tile's warps exchange, float [section][quarter][16 rows] with the sections:
  // the slice maxima, then at the end the row sums of the rounded and of the exact weights.
  static constexpr int kPartialsPerTile = 4 * 4 * 32;
  static constexpr int kStatsSection = 4 * 16;
  static constexpr int kMaxStats = 0;
  static constexpr int kSumStats = kStatsSection;
  static constexpr int kExactSumStats = 2 * kStatsSection;
  static constexpr int kRowStatsPerTile = 3 * kStatsSection;

  // Shared memory: Q tile, K tiles, raw stages, split-k partials, P tile, row statistics, validity
  // masks.
  // `stages` raw buffers: gathers are issued stages - 1 subtiles ahead, since a random row
  // read from HBM takes longer than one subtile's math.
  // `k_tiles` bf16 K tiles: with two, the dequant of subtile s + 1 runs while other warps are
  // still multiplying subtile s (one CTA barrier per subtile instead of two).
  static constexpr int smem_bytes(int head_tiles, int stages, int k_tiles) {
    return (16 * head_tiles + k_tiles * kSubtileRows) * kRowStride * 2 + stages * kRawStageBytes +
           head_tiles * (kPartialsPerTile * 16 + 16 * kPStride * 2 + kRowStatsPerTile * 4) + 2 * stages * 4;
  }
};

// The pipeline shape of one kernel instance.
struct PrefillVariant {
  int head_tiles;
  int stages;   // raw-row buffers (gather lead = stages - 1 subtiles, or stages - 2 with 2 K tiles)
  int k_tiles;  // dequantized bf16 tiles (2: the dequant of the next subtile overlaps the MMAs)
  constexpr int smem_bytes() const { return PrefillTile::smem_bytes(head_tiles, stages, k_tiles); }
};

// Compiled instances, preferred first within each head tile. Measured on the H200
// (docs/benchmarks.md, "variant sweep"): a deeper raw pipeline or a second K tile costs CTAs per
// SM for 1 and 2 head tiles and loses there; with 4 head tiles (one CTA per SM anyway) the second
// K tile gains a little. {4, 2, 1} (162 KB) is the fallback for GPUs with less shared memory per
// block than Hopper's 227 KB (A100: 163 KB).
constexpr PrefillVariant kPrefillVariants[] = {{1, 2, 1}, {2, 2, 1}, {4, 3, 2}, {4, 2, 1}};

// The preferred instance for `head_tiles` that fits `smem_per_block` bytes; head_tiles 0 if none.
inline PrefillVariant prefill_variant_for(int head_tiles, long long smem_per_block) {
  for (const PrefillVariant& variant : kPrefillVariants) {
    if (variant.head_tiles == head_tiles && variant.smem_bytes() <= smem_per_block) return variant;
  }
  return {0, 0, 0};
}

// The largest head tile with an instance that fits (0: none), which caps the planner's choice.
inline int prefill_max_head_tiles(long long smem_per_block) {
  int best = 0;
  for (const PrefillVariant& variant : kPrefillVariants) {
    if (variant.smem_bytes() <= smem_per_block && variant.head_tiles > best) best = variant.head_tiles;
  }
  return best;
}

// The decode split kernel's instances (the same kernel body, attention_kernel.cuh), one per head
// tile: each head tile's smallest prefill pipeline, so that few instances are compiled and a
// device runs a head tile in the decode exactly when it runs it in the prefill (the planners'
// cap, prefill_max_head_tiles, holds for both ops; checked below).
constexpr PrefillVariant kDecodeVariants[] = {{1, 2, 1}, {2, 2, 1}, {4, 2, 1}};

// The decode instance for `head_tiles` if it fits `smem_per_block` bytes; head_tiles 0 if not.
inline PrefillVariant decode_variant_for(int head_tiles, long long smem_per_block) {
  for (const PrefillVariant& variant : kDecodeVariants) {
    if (variant.head_tiles == head_tiles && variant.smem_bytes() <= smem_per_block) return variant;
  }
  return {0, 0, 0};
}

constexpr bool decode_variants_fit_where_prefill_fits() {
  for (const PrefillVariant& prefill : kPrefillVariants) {
    bool smallest = false;
    for (const PrefillVariant& decode : kDecodeVariants) {
      if (decode.head_tiles == prefill.head_tiles) smallest = decode.smem_bytes() <= prefill.smem_bytes();
    }
    if (!smallest) return false;
  }
  return true;
}
static_assert(decode_variants_fit_where_prefill_fits(),
              "every prefill head tile needs a decode instance no larger than its smallest prefill instance");

}  // namespace cake::cuda
