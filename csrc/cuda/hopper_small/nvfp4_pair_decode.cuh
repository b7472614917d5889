// NVFP4 -> bf16 for the small-heads Hopper prefill: the bit-placement decode of
// ../hopper/nvfp4_bit_decode.cuh without its final byte permutes. The converted values feed the
// QK^T wgmma as its register A operand, whose order along K is free as long as Q is stored in the
// same order, and the K tile, whose column order the kernel's epilogue follows: so the pairs can
// stay in the order the bit placement makes them, four instructions a word (half an instruction a
// value) fewer.
#pragma once

#include <cstdint>

#include "../common/ptx_primitives.cuh"
#include "../hopper/nvfp4_bit_decode.cuh"

namespace cake::cuda::hopper_small {

// Eight E2M1 codes (element i in bits 4i..4i+3) times `scale_bf16x2` -> four bf16 pairs,
// pair[k] = (element k, element k + 4) (element k in the low half). Exact. One shift brings
// nibbles k and k + 4 to bits 12..15 and 28..31 (signs in place), another their magnitudes to bits
// 6..8 and 22..24; two masks merge them; a multiply by 2^126 fixes the exponent bias and one by
// the scale applies it (see hopper::e2m1x8_to_bf16x8).
__device__ __forceinline__ void e2m1x8_to_bf16_pairs(uint32_t codes, uint32_t scale_bf16x2, uint32_t (&pair)[4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t signs = codes << (12 - 4 * k);
    const int magnitude_shift = 6 - 4 * k;
    const uint32_t magnitudes = magnitude_shift >= 0 ? codes << magnitude_shift : codes >> -magnitude_shift;
    const uint32_t placed = (signs & 0x80008000u) | (magnitudes & 0x01C001C0u);
    pair[k] = bf16x2_mul(bf16x2_mul(placed, hopper::kE2m1BiasBf16x2), scale_bf16x2);
  }
}

}  // namespace cake::cuda::hopper_small
