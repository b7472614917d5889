// The decode's merge: one warp per (token, head) row. The row's splits are candidates with
// base-2 logit mid_lse[s] and value mid_out[s]: weights 2^(mid_lse[s] - reference) against the
// largest partial LSE (decode_merge_reference), summed in split order with the partials, then the
// softmax end every kernel shares (finalize_softmax: the sink, the non-finite rules), exactly as
// the CPU merge (csrc/cpu/decode_cpu.cpp) does. A NaN partial makes its weight, and so the row,
// NaN; a row whose splits are all empty is an empty row.
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>

#include "../common/decode_splits.h"
#include "common/prefill_epilogue.cuh"
#include "common/ptx_primitives.cuh"
#include "decode_merge_cuda.h"

namespace cake::cuda {
namespace {

constexpr int kMergeWarpsPerBlock = 4;
// Each lane holds kMergeVectors float4 of the 512 values: lane + 32 k, so each load and store of
// a warp is one contiguous row segment.
constexpr int kMergeVectors = nvfp4::kHeadDim / (4 * 32);

__global__ void __launch_bounds__(kMergeWarpsPerBlock * 32)
    sparse_mla_decode_merge_kernel(const __grid_constant__ DecodeParams params) {
  // token * H + head, and the stride between splits: below 2^30 (the op checks T * H).
  const int num_rows = params.num_tokens * params.num_heads;
  const int row = blockIdx.x * kMergeWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= num_rows) return;
  const int token = row / params.num_heads;
  const int head = row % params.num_heads;

  float max_lse = -INFINITY;  // fmaxf drops NaN: a NaN partial shows in the weight sum instead
  for (int s = 0; s < params.num_splits; ++s) max_lse = fmaxf(max_lse, __ldg(params.mid_lse + int64_t(s) * num_rows + row));
  const float reference = decode_merge_reference(max_lse);

  float4 acc[kMergeVectors];
#pragma unroll
  for (int k = 0; k < kMergeVectors; ++k) acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float weight_sum = 0.0f;
  for (int s = 0; s < params.num_splits; ++s) {
    const int64_t split_row = int64_t(s) * num_rows + row;
    const float weight = exp2f(__ldg(params.mid_lse + split_row) - reference);
    const float4* partial = reinterpret_cast<const float4*>(params.mid_out + split_row * nvfp4::kHeadDim);
    weight_sum += weight;
#pragma unroll
    for (int k = 0; k < kMergeVectors; ++k) {
      const float4 value = __ldg(partial + lane + 32 * k);
      acc[k].x += weight * value.x, acc[k].y += weight * value.y;
      acc[k].z += weight * value.z, acc[k].w += weight * value.w;
    }
  }

  const float sink2 = params.sink != nullptr ? __ldg(params.sink + head) * kLog2e : 0.0f;
  const SoftmaxFinal final_row = finalize_softmax(max_lse, weight_sum, params.sink != nullptr, sink2);
  __nv_bfloat16* out_row = output_row(params, token, head);
#pragma unroll
  for (int k = 0; k < kMergeVectors; ++k) {
    uint32_t* out = reinterpret_cast<uint32_t*>(out_row + 4 * (lane + 32 * k));
    out[0] = pack_bf16x2(acc[k].x * final_row.out_scale, acc[k].y * final_row.out_scale);
    out[1] = pack_bf16x2(acc[k].z * final_row.out_scale, acc[k].w * final_row.out_scale);
  }
  if (lane == 0) store_lse(params, token, head, final_row.lse2);
}

}  // namespace

void launch_sparse_mla_decode_merge(const DecodeParams& params, cudaStream_t stream) {
  const int64_t num_rows = int64_t(params.num_tokens) * params.num_heads;
  const unsigned num_blocks = unsigned((num_rows + kMergeWarpsPerBlock - 1) / kMergeWarpsPerBlock);
  sparse_mla_decode_merge_kernel<<<num_blocks, kMergeWarpsPerBlock * 32, 0, stream>>>(params);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace cake::cuda
