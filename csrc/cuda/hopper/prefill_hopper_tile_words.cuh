// One dequant thread's NVFP4 -> bf16 conversion into a K tile row of the 64-head kernel: how a
// row's dims are split into four parts, and the conversion of a code unit (32 dims, one 16-byte
// chunk of codes) and of a half unit (16 dims) into swizzled 16-byte tile chunks.
#pragma once

#include <cstdint>

#include "nvfp4_bit_decode.cuh"
#include "prefill_hopper_layout.h"
#include "prefill_hopper_work.cuh"
#include "sm90_primitives.cuh"

namespace cake::cuda::hopper {

// What part p of a row converts: full code units p, p + 4, p + 8 (units 0..11, 32 dims each) and
// half h = p of units 12, 13 (8 bytes, 16 dims: dims 384 + 16 p ..), so the four parts convert
// 112 dims each.
constexpr int kFullUnitsPerPart = 3;
constexpr int kLowUnitsPerPart = 2;  // units part and part + 4: dims 0..255
constexpr int kHalfUnitFirstByte = 16 * kFullUnitsPerPart * kPartsPerRow;  // 192
constexpr int kHalfUnitFirstChunk = kHalfUnitFirstByte / 4;                // tile chunk 48
constexpr int kHalfUnitFirstScale = kHalfUnitFirstByte / 8;                // scale byte 24
static_assert(kFullUnitsPerPart * kPartsPerRow + kPartsPerRow / 2 == kCodeUnits, "the parts cover the row");

// Where a part's 16-byte chunks go in the 32-row half of a K tile that holds its row (offsets from
// the half's start, row within the half). The swizzle XORs a row's chunk index with row % 8; the
// XOR's two low bits only flip bits 4..5 of an offset, which nothing else sets, so chunk w of a
// unit is one XOR away from chunk 0 and the units and column blocks are immediate offsets on top.
//   unit_store_offset: chunk 0 of full unit `part` (unit part + 4 i: + 2 i column blocks; chunk w:
//     ^ 16 w).
//   tail_store_offset: the part's first chunk of units 12, 13 (its second: ^ 16); its RoPE chunks
//     are the same two one column block further.
__device__ __forceinline__ uint32_t unit_store_offset(int row, int part) {
  return swizzled_chunk_offset<kKColumnBlockBytes>(row, 4 * part);
}
__device__ __forceinline__ uint32_t tail_store_offset(int row, int part) {
  return swizzled_chunk_offset<kKColumnBlockBytes>(row, kHalfUnitFirstChunk + 2 * part);
}
// Full unit i's offset from unit 0's: two column blocks a unit (units part + 4 i).
__device__ __forceinline__ uint32_t unit_step(int i) { return uint32_t(i) * 2 * kKColumnBlockBytes; }

// Eight codes (one word) times a scale (times 2^-9: nvfp4_bit_decode.cuh) into the 16-byte chunk
// at `address`.
__device__ __forceinline__ void store_tile_word(uint32_t address, uint32_t word, uint32_t decode_scale) {
  uint32_t out[4];
#if defined(CAKE_HOPPER_NO_CONVERSION)  // development timing only: wrong results
  // The loaded codes still reach a store, as tiny values (no softmax reference moves on them).
  out[0] = out[1] = out[2] = out[3] = (word ^ decode_scale) & 0x00010001u;
#else
  e2m1x8_to_bf16x8(word, decode_scale, out);
#endif
#if defined(CAKE_HOPPER_NO_TILE_STORES)  // development timing only: wrong results
  sm90::keep_registers(out);  // converted, not stored
#else
  sm90::st_shared_16(address, out[0], out[1], out[2], out[3]);
#endif
}

// A full unit's four words with its two scale bytes (the low byte: its first 16 dims) into the
// chunks (chunk0 ^ 16 w) + step.
__device__ __forceinline__ void store_unit_words(uint32_t chunk0, uint32_t step, const uint4& codes,
                                                 uint16_t scale_pair) {
  static_assert(kPartsPerRow * 4 == 2 * 8, "a unit's four chunks stay in one column block, unit + 4 is two blocks on");
  const uint32_t scale_low = e4m3_to_decode_scale(uint8_t(scale_pair & 0xFFu));
  const uint32_t scale_high = e4m3_to_decode_scale(uint8_t(scale_pair >> 8));
  store_tile_word((chunk0 ^ 0u) + step, codes.x, scale_low);
  store_tile_word((chunk0 ^ 16u) + step, codes.y, scale_low);
  store_tile_word((chunk0 ^ 32u) + step, codes.z, scale_high);
  store_tile_word((chunk0 ^ 48u) + step, codes.w, scale_high);
}

// A part's half of units 12, 13 (two words, one scale byte) into the chunks tail, tail ^ 16.
__device__ __forceinline__ void store_tail_words(uint32_t tail, const uint2& codes, uint8_t scale_byte) {
  const uint32_t scale = e4m3_to_decode_scale(scale_byte);
  store_tile_word(tail, codes.x, scale);
  store_tile_word(tail ^ 16u, codes.y, scale);
}

}  // namespace cake::cuda::hopper
