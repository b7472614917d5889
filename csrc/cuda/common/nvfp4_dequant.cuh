// Register-level NVFP4 -> bf16 conversion for the CUDA kernels. Exact: every E2M1 value is a
// normal bf16 and so is every E4M3 scale, and their product has at most 4 significant bits.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "../../format/nvfp4_format.h"
#include "ptx_primitives.cuh"

namespace cake::cuda {

// The bf16 bit patterns of the 8 E2M1 magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6} are
// 0x0000 3F00 3F80 3FC0 4000 4040 4080 40C0: two 8-byte tables (high bytes, low bytes) that a
// byte permute indexes with the nibble's 3 magnitude bits, four nibbles per instruction.
constexpr uint32_t kE2m1HighBytes0 = 0x3F3F3F00u, kE2m1HighBytes1 = 0x40404040u;
constexpr uint32_t kE2m1LowBytes0 = 0xC0800000u, kE2m1LowBytes1 = 0xC0804000u;

// Four nibbles (the low 16 bits of `nibbles`, element order) -> two bf16x2 words. Eight
// instructions: the magnitudes index the two byte tables; the sign comes from a third permute in
// its sign-replicate mode (selector bit 3 = the nibble's sign bit): it returns the replicated msb
// of 0x7F (0x00) for negative nibbles and 0x7F for positive ones; bit 6 shifted to bit 7 and
// complemented is the sign (a shift and a three-input LOP3 that also merges it).
// (ptxas copies a table into a register before most permutes: PRMT takes only its last table
// operand as an immediate. Hoisting the tables, shuffles and constant-memory loads did not stop it.)
__device__ __forceinline__ void e2m1x4_to_bf16x4(uint32_t nibbles, uint32_t& out01, uint32_t& out23) {
  const uint32_t index = nibbles & 0x7777u;
  const uint32_t positive = byte_perm(0x7F7F7F7Fu, 0x7F7F7F7Fu, nibbles);  // 0x7F: positive, 0x00: negative
  const uint32_t high = byte_perm(kE2m1HighBytes0, kE2m1HighBytes1, index) | (~(positive << 1) & 0x80808080u);
  const uint32_t low = byte_perm(kE2m1LowBytes0, kE2m1LowBytes1, index);
  out01 = byte_perm(low, high, 0x5140u);  // interleave low/high bytes into bf16 pairs
  out23 = byte_perm(low, high, 0x7362u);
}

// Two E4M3 bytes (byte 0 in the low half) -> two fp16 (exact, subnormals and NaN included), by
// one hardware conversion: sm_89+ device code only.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint16_t pair) {
  uint32_t halves;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(halves) : "h"(pair));
  return halves;
}
// The fp16 in the low half of `bits` as a float.
__device__ __forceinline__ float f16_bits_to_float(uint32_t bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xFFFFu)));
}

// An E4M3 block scale as a float (exact). sm_89+ converts in hardware (subnormals and NaN
// included); older GPUs use the format header's decoder.
__device__ __forceinline__ float e4m3_scale_to_float(uint8_t scale_byte) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  return f16_bits_to_float(e4m3x2_to_f16x2(scale_byte));
#else
  return nvfp4::e4m3_to_float(scale_byte);
#endif
}
// The same as a bf16 pair (exact).
__device__ __forceinline__ uint32_t e4m3_to_bf16x2(uint8_t scale_byte) {
  const float scale = e4m3_scale_to_float(scale_byte);
  return pack_bf16x2(scale, scale);
}

// One 16-value group: 8 code bytes + its E4M3 scale -> 8 bf16x2 words (element order).
__device__ __forceinline__ void dequantize_group(uint2 codes, uint8_t scale_byte, uint32_t (&out)[8]) {
  const uint32_t scale_bf16 = e4m3_to_bf16x2(scale_byte);
  const uint32_t words[2] = {codes.x, codes.y};
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    e2m1x4_to_bf16x4(words[w], out[4 * w + 0], out[4 * w + 1]);
    e2m1x4_to_bf16x4(words[w] >> 16, out[4 * w + 2], out[4 * w + 3]);
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = bf16x2_mul(out[i], scale_bf16);
}

}  // namespace cake::cuda
