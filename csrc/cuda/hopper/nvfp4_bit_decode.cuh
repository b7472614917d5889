// NVFP4 -> bf16 by bit placement (no tables): the decode of both Hopper kernels (the 64-head
// kernel's dequant warpgroups, the small-heads kernel's converters). Exact: every E2M1 value times
// an E4M3 scale (times 2^-9, below) is a bf16.
#pragma once

#include <cstdint>

#include "../common/nvfp4_dequant.cuh"
#include "../common/ptx_primitives.cuh"

namespace cake::cuda::hopper {

// A nibble's three magnitude bits placed in a bf16's two lowest exponent bits and its top
// mantissa bit read as 2^-126 times the E2M1 value (the E = 0 codes become bf16 subnormals, which
// bf16 multiplication keeps). Undoing that bias and applying the block scale in one multiply
// would need 2^126 times a scale of up to 448, past bf16's range; 2^117 times the scale fits
// (< 2^126), so one multiply gives the value times the scale times 2^-9, still exact (its
// smallest nonzero magnitude is 2^-19). The kernels that use this decode take K (= V) as
// 2^-9 times the cache's values in the NoPE dims (the RoPE dims as stored) and undo the factor
// where a power of two is exact: the 64-head kernel scales Q's RoPE dims by 2^-9 and its scores
// by 2^9, the small-heads kernel Q's NoPE dims by 2^9; both the NoPE dims' output scale by 2^9.
constexpr float kBitDecodeScaleBias = 0x1p117f;  // the block scale's factor (e4m3_to_decode_scale)
constexpr float kBitDecodeUnscale = 0x1p9f;      // 1 / (2^117 / 2^126): what the kernels undo
constexpr uint32_t kBitDecodeFactorBf16x2 = 0x3B003B00u;   // 2^-9 as a bf16 pair
constexpr uint32_t kBitDecodeUnscaleBf16x2 = 0x44004400u;  // 2^9 as a bf16 pair

// An E4M3 block scale times 2^117 as a bf16 pair, for the decode below (exact; NaN stays NaN).
__device__ __forceinline__ uint32_t e4m3_to_decode_scale(uint8_t scale_byte) {
  const float scale = e4m3_scale_to_float(scale_byte) * kBitDecodeScaleBias;
  return pack_bf16x2(scale, scale);
}

// A unit's two E4M3 block scales (byte 0 and byte 1 of `scale_pair`) times 2^117 in one bf16 pair,
// byte 0's in the low half, by one two-byte conversion: the same values as e4m3_to_decode_scale
// of each byte (NaN stays NaN). decode_scale_half<h> puts half h in both halves, the form the
// decode below multiplies by; fed straight to that multiply it costs no instruction (ptxas reads
// the half through the multiply's operand selector), so a unit's scales take one conversion, two
// widenings, two multiplies and one pack instead of twice four and the byte extraction.
__device__ __forceinline__ uint32_t e4m3x2_to_decode_scales(uint16_t scale_pair) {
  const uint32_t halves = e4m3x2_to_f16x2(scale_pair);
  return pack_bf16x2(f16_bits_to_float(halves) * kBitDecodeScaleBias, f16_bits_to_float(halves >> 16) * kBitDecodeScaleBias);
}
template <int kHalf>
__device__ __forceinline__ uint32_t decode_scale_half(uint32_t scales) {
  static_assert(kHalf == 0 || kHalf == 1, "a pair has two halves");
  uint32_t both;
  if constexpr (kHalf == 0) {
    asm("{\n .reg .b16 low, high;\n mov.b32 {low, high}, %1;\n mov.b32 %0, {low, low};\n}\n" : "=r"(both) : "r"(scales));
  } else {
    asm("{\n .reg .b16 low, high;\n mov.b32 {low, high}, %1;\n mov.b32 %0, {high, high};\n}\n" : "=r"(both) : "r"(scales));
  }
  return both;
}

// How a word's nibbles reach their bf16 bit places (same bits either way).
enum class BitPlacement {
  // Per pair: one shift brings nibbles k and k + 4 to bits 12..15 and 28..31 (signs in place),
  // another brings their magnitudes to bits 6..8 and 22..24; two masks merge them (one LOP3).
  kShifts,
  // Per pair: nibbles k and k + 4 isolated by one mask, then one integer multiply by
  // 2^a + 2^(a + 6) writes two copies of them (which cannot overlap or carry: the isolated word
  // has four bits a half) whose magnitude bits land in bits 6..8 / 22..24 of the first copy and
  // whose signs in bits 15 / 31 of the second; one mask keeps those. Pairs 2 and 3 take the word
  // moved down by one byte. Three instructions a pair (one on the FMA pipe) and one shift a
  // word, against two shifts and two masks a pair.
  kMultiply,
};

// Eight E2M1 codes (element i in bits 4i..4i+3) times a block scale times 2^-9 -> four bf16
// pairs, pair[k] = (element k, element k + 4) (element k in the low half); `decode_scale` is
// e4m3_to_decode_scale of the scale byte; one bf16 multiply a pair after the placement. The
// small-heads kernel uses the pairs as they come (its K order follows them), with kShifts: the
// multiply form moved it by -1.5% to +1.4% (0-1.4% slower at 16 heads), where the 64-head
// kernel's dequant gains up to 2.4% by it (docs/benchmarks.md, "The four dequant changes and the
// multiply placement ...").
// `sign_mask` 0 drops the codes' signs: with a zero scale the pairs are then +0 whatever the code
// bits (the small-heads kernel's masked rows, whose registers hold stale codes).
template <BitPlacement kPlacement = BitPlacement::kShifts>
__device__ __forceinline__ void e2m1x8_to_bf16_pairs(uint32_t codes, uint32_t decode_scale, uint32_t (&pair)[4],
                                                     uint32_t sign_mask = 0x80008000u) {
  if constexpr (kPlacement == BitPlacement::kMultiply) {
    const uint32_t upper = codes >> 8;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t source = k < 2 ? codes : upper;
      const uint32_t isolated = source & (k % 2 == 0 ? 0x000F000Fu : 0x00F000F0u);
      const uint32_t copies = isolated * (k % 2 == 0 ? 0x1040u : 0x0104u);
      pair[k] = bf16x2_mul(copies & (sign_mask | 0x01C001C0u), decode_scale);
    }
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t signs = codes << (12 - 4 * k);
      const int magnitude_shift = 6 - 4 * k;
      const uint32_t magnitudes = magnitude_shift >= 0 ? codes << magnitude_shift : codes >> -magnitude_shift;
      const uint32_t placed = (signs & sign_mask) | (magnitudes & 0x01C001C0u);
      pair[k] = bf16x2_mul(placed, decode_scale);
    }
  }
}

// The same eight values in element order (the 64-head kernel's dequant): byte permutes of the
// pairs. About 2.7 instructions a value in SASS.
__device__ __forceinline__ void e2m1x8_to_bf16x8(uint32_t codes, uint32_t decode_scale, uint32_t (&out)[4]) {
  uint32_t pair[4];
  e2m1x8_to_bf16_pairs<BitPlacement::kMultiply>(codes, decode_scale, pair);
  out[0] = byte_perm(pair[0], pair[1], 0x5410u);
  out[1] = byte_perm(pair[2], pair[3], 0x5410u);
  out[2] = byte_perm(pair[0], pair[1], 0x7632u);
  out[3] = byte_perm(pair[2], pair[3], 0x7632u);
}

}  // namespace cake::cuda::hopper
