// One (token, head) row of the decode's merge (decode_merge.cu): its splits are candidates with
// base-2 logit mid_lse[s] and value mid_out[s], weighted 2^(mid_lse[s] - reference) against the
// largest partial LSE (decode_merge_reference), summed in split order, then the softmax end every
// kernel shares (finalize_softmax: the sink, the non-finite rules), as the CPU merge
// (csrc/cpu/decode_cpu.cpp) does. kWarpsPerRow warps share the row, warp `part` taking dims
// 512 / kWarpsPerRow * part .. The partials come by the read-only path, which is only right because
// an earlier launch (the split kernel) wrote them.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "../../common/decode_splits.h"
#include "decode_params.h"
#include "prefill_epilogue.cuh"
#include "ptx_primitives.cuh"

namespace cake::cuda {

template <int kWarpsPerRow>
__device__ __forceinline__ void merge_decode_row(const DecodeParams& params, int row, int part, int lane) {
  constexpr int kVectorsPerLane = nvfp4::kHeadDim / (4 * 32 * kWarpsPerRow);  // float4s of a split
  // Splits whose loads a lane issues before it uses the first of them. A row of more splits than
  // this takes a pass over the LSEs first, then one round of loads per kSplitsInFlight splits, each
  // a trip to memory after the last (the loop is not unrolled).
  constexpr int kSplitsInFlight = kVectorsPerLane == 1 ? 8 : 2;  // 8 float4s and 8 or 2 LSEs
  // token * H + head, and the stride between splits: below 2^30 (the op checks T * H).
  const int num_rows = params.num_tokens * params.num_heads;
  const int token = row / params.num_heads;
  const int head = row % params.num_heads;
  const int num_splits = params.num_splits;

  // The largest partial LSE. With more splits than one round of loads: a pass first, lanes taking
  // splits lane, lane + 32, ...; otherwise from the round's own loads, below. The max does not
  // depend on the order (fmaxf drops NaN: a NaN partial shows in the weight sum instead).
  const bool one_round = num_splits <= kSplitsInFlight;
  float max_lse = -INFINITY;
  if (!one_round) {
    for (int s = lane; s < num_splits; s += 32) max_lse = fmaxf(max_lse, __ldg(params.mid_lse + int64_t(s) * num_rows + row));
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffffu, max_lse, offset));
  }

  float4 acc[kVectorsPerLane];
#pragma unroll
  for (int v = 0; v < kVectorsPerLane; ++v) acc[v] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float weight_sum = 0.0f;
  // Lane l, vector v: float4 32 v + l of the warp's part (coalesced per v).
  const float4* partials = reinterpret_cast<const float4*>(params.mid_out) + part * (32 * kVectorsPerLane) + lane;
  const int64_t split_stride = int64_t(num_rows) * (nvfp4::kHeadDim / 4);  // float4s between splits
  for (int s0 = 0; s0 < num_splits; s0 += kSplitsInFlight) {
    float lse[kSplitsInFlight];
    float4 value[kSplitsInFlight][kVectorsPerLane];
#pragma unroll
    for (int j = 0; j < kSplitsInFlight; ++j) {
      if (s0 + j < num_splits) {
        const int64_t split_row = int64_t(s0 + j) * num_rows + row;
        lse[j] = __ldg(params.mid_lse + split_row);
#pragma unroll
        for (int v = 0; v < kVectorsPerLane; ++v) {
          value[j][v] = __ldg(partials + (s0 + j) * split_stride + int64_t(row) * (nvfp4::kHeadDim / 4) + 32 * v);
        }
      }
    }
    if (one_round) {
#pragma unroll
      for (int j = 0; j < kSplitsInFlight; ++j) {
        if (j < num_splits) max_lse = fmaxf(max_lse, lse[j]);
      }
    }
    const float reference = decode_merge_reference(max_lse);
    // In split order, as the CPU merge adds them.
#pragma unroll
    for (int j = 0; j < kSplitsInFlight; ++j) {
      if (s0 + j < num_splits) {
        const float weight = exp2f(lse[j] - reference);
        weight_sum += weight;
#pragma unroll
        for (int v = 0; v < kVectorsPerLane; ++v) {
          acc[v].x += weight * value[j][v].x, acc[v].y += weight * value[j][v].y;
          acc[v].z += weight * value[j][v].z, acc[v].w += weight * value[j][v].w;
        }
      }
    }
  }

  const SoftmaxFinal final_row = finalize_softmax(max_lse, weight_sum, params.sink != nullptr, row_sink2(params, head));
  __nv_bfloat16* out_row = output_row(params, token, head);
#pragma unroll
  for (int v = 0; v < kVectorsPerLane; ++v) {
    uint32_t* out = reinterpret_cast<uint32_t*>(out_row + 4 * (part * 32 * kVectorsPerLane + 32 * v + lane));
    out[0] = pack_bf16x2(acc[v].x * final_row.out_scale, acc[v].y * final_row.out_scale);
    out[1] = pack_bf16x2(acc[v].z * final_row.out_scale, acc[v].w * final_row.out_scale);
  }
  if (part == 0 && lane == 0) store_lse(params, token, head, final_row.lse2);
}

}  // namespace cake::cuda
