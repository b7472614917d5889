// The 384-byte NVFP4 sparse-MLA cache format: constants, page/slot address math and the
// encode/decode of one 16-value NoPE group. This is the only place the byte layout is written
// down in code; the CPU kernels, the CUDA kernels and the cache writers all include it.
// docs/contract.md sections 3 to 5 describe the format and the writers' rounding in prose.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define CAKE_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define CAKE_HOST_DEVICE inline
#endif

namespace cake::nvfp4 {

// Logical row: 448 NoPE values (FP4 + block scales) followed by 64 RoPE values (raw bf16).
constexpr int kHeadDim = 512;
constexpr int kNopeDim = 448;
constexpr int kRopeDim = 64;
constexpr int kGroupSize = 16;                      // NoPE values per E4M3 block scale
constexpr int kNumGroups = kNopeDim / kGroupSize;   // 28 scales per token

// Physical bytes per token. A page stores all data rows first, then all scale rows.
constexpr int kNopeBytes = kNopeDim / 2;                  // 224: two E2M1 codes per byte
constexpr int kRopeBytes = kRopeDim * 2;                  // 128: bf16
constexpr int kDataRowBytes = kNopeBytes + kRopeBytes;    // 352
constexpr int kScaleRowBytes = 32;                        // 28 scales + 4 zero bytes
constexpr int kTokenBytes = kDataRowBytes + kScaleRowBytes;  // 384

// Candidate lists are processed in chunks of 64; a token may have at most 16 chunks.
constexpr int kChunkSize = 64;
constexpr int kMaxChunks = 16;
// Chunks of a list of `width >= 0` positions, ceil(width / 64) without overflow for any width.
constexpr int64_t list_chunks(int64_t width) { return width / kChunkSize + (width % kChunkSize != 0); }
constexpr int kHeadsPerTile = 16;

// Where a slot's bytes are. Slot `slot` of a view is row slot_row(slot, page, page_size) of page
// `page` = slot_page(slot, page_size). In page `page` (at page_offset from the view's base) all
// page_size 352-byte data rows come first, then all 32-byte scale rows.
CAKE_HOST_DEVICE int64_t slot_page(int64_t slot, int64_t page_size) { return slot / page_size; }
// slot_page for 0 <= slot < 2^31 by a multiply and a shift, for the GPU kernels' gathers (a
// 32-bit division is ~15 instructions there, with a reciprocal of the page size each time). For d
// = page_size < 2^31, s = ceil(log2 d) and m = ceil(2^(31 + s) / d) < 2^32, m * d lies in
// [2^(31 + s), 2^(31 + s) + d], so floor(slot / d) = (slot * m) >> (31 + s) for every slot < 2^31
// (Granlund and Montgomery, "Division by invariant integers using multiplication", 1994). A page
// size of 2^31 or more holds every such slot in page 0: multiplier 0.
struct SlotPageDivisor {
  uint32_t multiplier;
  uint32_t shift;
};
inline SlotPageDivisor slot_page_divisor(int64_t page_size) {
  if (page_size >= (int64_t(1) << 31)) return {0u, 0u};
  uint32_t s = 0;
  while ((int64_t(1) << s) < page_size) ++s;
  const uint64_t numerator = uint64_t(1) << (31 + s);
  const uint64_t d = uint64_t(page_size);
  return {uint32_t((numerator + d - 1) / d), 31 + s};
}
CAKE_HOST_DEVICE int64_t divided_slot_page(int64_t slot, const SlotPageDivisor& divisor) {
  return int64_t((uint64_t(uint32_t(slot)) * divisor.multiplier) >> divisor.shift);
}
CAKE_HOST_DEVICE int64_t slot_row(int64_t slot, int64_t page, int64_t page_size) { return slot - page * page_size; }
CAKE_HOST_DEVICE int64_t page_offset(int64_t page, int64_t page_stride) { return page * page_stride; }
// Offsets of row `row`'s data row and scale row from the start of its page.
CAKE_HOST_DEVICE int64_t data_row_in_page(int64_t row) { return row * kDataRowBytes; }
CAKE_HOST_DEVICE int64_t scale_row_in_page(int64_t row, int64_t page_size) {
  return page_size * kDataRowBytes + row * kScaleRowBytes;
}

// A slot's data row and scale row as byte offsets from its view's base, for 0 <= slot < 2^31 (an
// int32 index): the page by multiply and shift (divided_slot_page), and the page and the row within
// it in 32 bits (both are at most the slot; slot_row's arithmetic without the 64-bit multiply). The
// CUDA gathers' per-block address math; the same values as CacheGeometry::data_offset and
// scale_offset.
struct SlotRowOffsets {
  uint64_t data;
  uint64_t scale;
};
CAKE_HOST_DEVICE SlotRowOffsets slot_row_offsets(uint32_t slot, const SlotPageDivisor& divisor, int64_t page_size,
                                                 int64_t page_stride) {
  const uint32_t page = uint32_t(divided_slot_page(slot, divisor));
  const uint32_t row = slot - page * uint32_t(page_size);  // page 0 wherever page_size >= 2^31
  const int64_t page_base = page_offset(page, page_stride);
  return {uint64_t(page_base + data_row_in_page(row)), uint64_t(page_base + scale_row_in_page(row, page_size))};
}

// Geometry of one cache view, read from the tensor at run time.
struct CacheGeometry {
  int64_t page_size;    // tokens per page
  int64_t page_stride;  // bytes between consecutive pages (>= page_size * 384, multiple of 16)
  int64_t num_pages;

  CAKE_HOST_DEVICE int64_t num_slots() const { return num_pages * page_size; }
  CAKE_HOST_DEVICE bool slot_is_valid(int64_t slot) const { return slot >= 0 && slot < num_slots(); }
  // Byte offset of the 352-byte data row of `slot` (slot must be valid).
  CAKE_HOST_DEVICE int64_t data_offset(int64_t slot) const {
    const int64_t page = slot_page(slot, page_size);
    const int64_t row = slot_row(slot, page, page_size);
    return page_offset(page, page_stride) + data_row_in_page(row);
  }
  // Byte offset of the 32-byte scale row of `slot` (slot must be valid).
  CAKE_HOST_DEVICE int64_t scale_offset(int64_t slot) const {
    const int64_t page = slot_page(slot, page_size);
    const int64_t row = slot_row(slot, page, page_size);
    return page_offset(page, page_stride) + scale_row_in_page(row, page_size);
  }
};

// ---------------------------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------------------------

CAKE_HOST_DEVICE float bits_to_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  __builtin_memcpy(&value, &bits, sizeof(value));
  return value;
#endif
}

CAKE_HOST_DEVICE uint32_t float_to_bits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  uint32_t bits;
  __builtin_memcpy(&bits, &value, sizeof(bits));
  return bits;
#endif
}

CAKE_HOST_DEVICE float bf16_bits_to_float(uint16_t bits) { return bits_to_float(uint32_t(bits) << 16); }

// E2M1 nibble -> float. Bit 3 is the sign, bits 0..2 index {0, .5, 1, 1.5, 2, 3, 4, 6}.
CAKE_HOST_DEVICE float e2m1_to_float(uint32_t nibble) {
  const uint32_t magnitude = nibble & 7u;
  // exponent field = magnitude >> 1, mantissa bit = magnitude & 1 (bias 1, subnormal at 0).
  const float value = (magnitude < 2u) ? 0.5f * float(magnitude)
                                       : float(2u + (magnitude & 1u)) * float(1u << ((magnitude >> 1) - 1u)) * 0.5f;
  return (nibble & 8u) ? -value : value;
}

// FP8 E4M3 (OCP "fn": bias 7, no infinities, 0x7F/0xFF are NaN) -> float.
CAKE_HOST_DEVICE float e4m3_to_float(uint32_t byte) {
  const uint32_t exponent = (byte >> 3) & 0xFu;
  const uint32_t mantissa = byte & 7u;
  float value;
  if ((byte & 0x7Fu) == 0x7Fu) {
    value = bits_to_float(0x7FC00000u);
  } else if (exponent == 0) {
    value = float(mantissa) * (1.0f / 512.0f);  // subnormal: m * 2^-9
  } else {
    value = bits_to_float(((exponent + 120u) << 23) | (mantissa << 20));  // re-bias 7 -> 127
  }
  return (byte & 0x80u) ? -value : value;
}

// ---------------------------------------------------------------------------------------------
// Encoding (the cache writers). Computed in fp32, round-to-nearest-even, saturating.
// ---------------------------------------------------------------------------------------------

// Round a non-negative float to the nearest integer, ties to even, without depending on the
// host's floating-point rounding mode.
CAKE_HOST_DEVICE float round_half_even_nonneg(float x) {
  const float floor_x = float(int64_t(x));
  const float fraction = x - floor_x;
  if (fraction > 0.5f) return floor_x + 1.0f;
  if (fraction < 0.5f) return floor_x;
  return (int64_t(floor_x) & 1) ? floor_x + 1.0f : floor_x;
}

// Non-negative float -> E4M3 byte, round-to-nearest-even, saturating at 448 (0x7E), +inf
// included. NaN and values <= 0 encode as 0 (the writer only encodes amax / 6 of a group
// without NaN).
CAKE_HOST_DEVICE uint8_t encode_e4m3_nonneg(float value) {
  if (!(value > 0.0f)) return 0;
  if (value >= 448.0f) return 0x7E;
  const uint32_t bits = float_to_bits(value);
  const int exponent = int((bits >> 23) & 0xFFu) - 127;
  if (exponent < -6) {
    // Subnormal range: multiples of 2^-9 (the scaling is exact). 8 * 2^-9 is the smallest
    // normal, whose code 0x08 is exactly 8, so rounding up into it needs no special case.
    return uint8_t(round_half_even_nonneg(value * 512.0f));
  }
  const uint32_t mantissa = bits & 0x7FFFFFu;
  uint32_t kept = mantissa >> 20;  // 3 mantissa bits
  const uint32_t dropped = mantissa & 0xFFFFFu;
  if (dropped > 0x80000u || (dropped == 0x80000u && (kept & 1u))) ++kept;
  // A carry out of the mantissa bumps the exponent, which the addition does by itself.
  const uint32_t code = (uint32_t(exponent + 7) << 3) + kept;
  return uint8_t(code > 0x7Eu ? 0x7Eu : code);
}

// Float -> E2M1 nibble, round-to-nearest-even on the code grid {0,.5,1,1.5,2,3,4,6}, saturating
// at 6 (+-inf included). The sign bit is kept even when the magnitude rounds to zero; NaN encodes
// magnitude 0 (the writer never passes one: a group with a NaN gets the NaN scale instead).
CAKE_HOST_DEVICE uint8_t encode_e2m1(float value) {
  const uint32_t sign = (float_to_bits(value) >> 31) ? 8u : 0u;
  const float magnitude = value < 0.0f ? -value : value;
  uint32_t code;
  if (!(magnitude == magnitude)) code = 0;       // NaN
  else if (magnitude <= 0.25f) code = 0;         // tie 0.25 -> 0 (even)
  else if (magnitude < 0.75f) code = 1;          // tie 0.75 -> 1.0
  else if (magnitude <= 1.25f) code = 2;         // tie 1.25 -> 1.0
  else if (magnitude < 1.75f) code = 3;          // tie 1.75 -> 2.0
  else if (magnitude <= 2.5f) code = 4;          // tie 2.5 -> 2.0
  else if (magnitude < 3.5f) code = 5;           // tie 3.5 -> 4.0
  else if (magnitude <= 5.0f) code = 6;          // tie 5 -> 4.0
  else code = 7;                                 // saturate at 6
  return uint8_t(sign | code);
}

// The E4M3 NaN pattern: the scale byte of a group that holds a NaN.
constexpr uint8_t kE4m3NanByte = 0x7F;

// Quantize one group of 16 NoPE values: 8 bytes of codes (even element in the low nibble) and
// one E4M3 scale byte. Non-finite values:
// - a NaN anywhere in the group makes the scale byte the E4M3 NaN (0x7F) and the codes zero, so
//   the whole group decodes to NaN: a NaN is never turned into a number;
// - +-inf saturates like any large value: the scale becomes 448 (0x7E) and the value's code +-6,
//   so it decodes to +-2688 (the rest of the group is quantized against that scale).
CAKE_HOST_DEVICE void quantize_group(const float (&values)[kGroupSize], uint8_t (&codes)[kGroupSize / 2],
                                     uint8_t& scale_byte) {
  float amax = 0.0f;
  bool has_nan = false;
  for (int i = 0; i < kGroupSize; ++i) {
    const float magnitude = values[i] < 0.0f ? -values[i] : values[i];
    has_nan = has_nan || !(magnitude == magnitude);
    amax = magnitude > amax ? magnitude : amax;
  }
  if (has_nan) {
    scale_byte = kE4m3NanByte;
    for (int i = 0; i < kGroupSize / 2; ++i) codes[i] = 0;
    return;
  }
  scale_byte = encode_e4m3_nonneg(amax / 6.0f);
  const float scale = e4m3_to_float(scale_byte);
  const float inverse = scale == 0.0f ? 0.0f : 1.0f / scale;
  for (int i = 0; i < kGroupSize; i += 2) {
    codes[i / 2] = uint8_t(encode_e2m1(values[i] * inverse) | (encode_e2m1(values[i + 1] * inverse) << 4));
  }
}

}  // namespace cake::nvfp4
