// NVFP4 -> bf16 by bit placement (no tables): the decode of both Hopper kernels (the 64-head
// kernel's dequant warpgroups, the small-heads kernel's converters). Exact: every E2M1 value times
// an E4M3 scale is a bf16.
#pragma once

#include <cstdint>

#include "../common/ptx_primitives.cuh"

namespace cake::cuda::hopper {

// 2^126 as a bf16 pair. A nibble's three magnitude bits placed in a bf16's two lowest exponent
// bits and its top mantissa bit read as 2^-126 times the E2M1 value (the E = 0 codes become bf16
// subnormals, which bf16 multiplication keeps).
constexpr uint32_t kE2m1BiasBf16x2 = 0x7E807E80u;

// Eight E2M1 codes (element i in bits 4i..4i+3) times `scale_bf16x2` -> four bf16 pairs,
// pair[k] = (element k, element k + 4) (element k in the low half). One shift brings nibbles k and
// k + 4 to bits 12..15 and 28..31 (signs in place), another brings their magnitudes to bits 6..8
// and 22..24; two masks merge them; two multiplies fix the exponent bias and apply the scale.
// The small-heads kernel uses the pairs as they come (its K order follows them).
__device__ __forceinline__ void e2m1x8_to_bf16_pairs(uint32_t codes, uint32_t scale_bf16x2, uint32_t (&pair)[4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t signs = codes << (12 - 4 * k);
    const int magnitude_shift = 6 - 4 * k;
    const uint32_t magnitudes = magnitude_shift >= 0 ? codes << magnitude_shift : codes >> -magnitude_shift;
    const uint32_t placed = (signs & 0x80008000u) | (magnitudes & 0x01C001C0u);
    pair[k] = bf16x2_mul(bf16x2_mul(placed, kE2m1BiasBf16x2), scale_bf16x2);
  }
}

// The same eight values in element order: byte permutes of the pairs. About 3.5 instructions a
// value in SASS.
__device__ __forceinline__ void e2m1x8_to_bf16x8(uint32_t codes, uint32_t scale_bf16x2, uint32_t (&out)[4]) {
  uint32_t pair[4];
  e2m1x8_to_bf16_pairs(codes, scale_bf16x2, pair);
  out[0] = byte_perm(pair[0], pair[1], 0x5410u);
  out[1] = byte_perm(pair[2], pair[3], 0x5410u);
  out[2] = byte_perm(pair[0], pair[1], 0x7632u);
  out[3] = byte_perm(pair[2], pair[3], 0x7632u);
}

}  // namespace cake::cuda::hopper
