// The decode's merge: four warps per (token, head) row, warp w folding dims 128 w .. 128 w + 127
// (one float4 a lane), a CTA a row, so that a small call spreads over more SMs (T = 1, H = 64:
// 64 CTAs, where one warp a row gave 16), and each lane keeps kMergeSplitsInFlight splits' loads
// in flight. The row's splits are candidates with base-2 logit mid_lse[s] and value mid_out[s]:
// weights 2^(mid_lse[s] - reference) against the largest partial LSE (decode_merge_reference),
// summed in split order with the partials, then the softmax end every kernel shares
// (finalize_softmax: the sink, the non-finite rules), exactly as the CPU merge
// (csrc/cpu/decode_cpu.cpp) does. A NaN partial makes its weight, and so the row, NaN; a row whose
// splits are all empty is an empty row.
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>

#include "../common/decode_splits.h"
#include "common/prefill_epilogue.cuh"
#include "common/ptx_primitives.cuh"
#include "decode_merge_cuda.h"

namespace cake::cuda {
namespace {

constexpr int kMergeWarpsPerRow = nvfp4::kHeadDim / (4 * 32);  // 128 dims a warp, one float4 a lane
constexpr int kMergeRowsPerBlock = 1;
constexpr int kMergeThreads = kMergeRowsPerBlock * kMergeWarpsPerRow * 32;
// Loads a lane issues before it uses the first of them (each split: its LSE and one float4).
constexpr int kMergeSplitsInFlight = 8;

__global__ void __launch_bounds__(kMergeThreads)
    sparse_mla_decode_merge_kernel(const __grid_constant__ DecodeParams params) {
  // token * H + head, and the stride between splits: below 2^30 (the op checks T * H).
  const int num_rows = params.num_tokens * params.num_heads;
  const int warp = threadIdx.x / 32;
  const int row = blockIdx.x * kMergeRowsPerBlock + warp / kMergeWarpsPerRow;
  const int quarter = warp % kMergeWarpsPerRow;  // dims 128 quarter ..
  const int lane = threadIdx.x % 32;
  if (row >= num_rows) return;
  const int token = row / params.num_heads;
  const int head = row % params.num_heads;
  const int num_splits = params.num_splits;
  // Launched while the split kernel may still run (programmatic dependent launch): nothing it
  // writes is read before this.
  wait_for_prerequisite_grids();

  // The largest partial LSE: lanes take splits lane, lane + 32, ...; the max does not depend on
  // the order (fmaxf drops NaN: a NaN partial shows in the weight sum instead).
  float max_lse = -INFINITY;
  for (int s = lane; s < num_splits; s += 32) max_lse = fmaxf(max_lse, __ldg(params.mid_lse + int64_t(s) * num_rows + row));
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffffu, max_lse, offset));
  const float reference = decode_merge_reference(max_lse);

  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float weight_sum = 0.0f;
  const float4* partials = reinterpret_cast<const float4*>(params.mid_out) + quarter * 32 + lane;
  const int64_t split_stride = int64_t(num_rows) * (nvfp4::kHeadDim / 4);  // float4s between splits
  for (int s0 = 0; s0 < num_splits; s0 += kMergeSplitsInFlight) {
    float lse[kMergeSplitsInFlight];
    float4 value[kMergeSplitsInFlight];
#pragma unroll
    for (int j = 0; j < kMergeSplitsInFlight; ++j) {
      if (s0 + j < num_splits) {
        const int64_t split_row = int64_t(s0 + j) * num_rows + row;
        lse[j] = __ldg(params.mid_lse + split_row);
        value[j] = __ldg(partials + (s0 + j) * split_stride + int64_t(row) * (nvfp4::kHeadDim / 4));
      }
    }
    // In split order, as the CPU merge adds them.
#pragma unroll
    for (int j = 0; j < kMergeSplitsInFlight; ++j) {
      if (s0 + j < num_splits) {
        const float weight = exp2f(lse[j] - reference);
        weight_sum += weight;
        acc.x += weight * value[j].x, acc.y += weight * value[j].y;
        acc.z += weight * value[j].z, acc.w += weight * value[j].w;
      }
    }
  }

  const float sink2 = params.sink != nullptr ? __ldg(params.sink + head) * kLog2e : 0.0f;
  const SoftmaxFinal final_row = finalize_softmax(max_lse, weight_sum, params.sink != nullptr, sink2);
  uint32_t* out = reinterpret_cast<uint32_t*>(output_row(params, token, head) + 4 * (quarter * 32 + lane));
  out[0] = pack_bf16x2(acc.x * final_row.out_scale, acc.y * final_row.out_scale);
  out[1] = pack_bf16x2(acc.z * final_row.out_scale, acc.w * final_row.out_scale);
  if (quarter == 0 && lane == 0) store_lse(params, token, head, final_row.lse2);
}

// Whether the merge's image on the current device has the programmatic-launch wait (built for
// sm_90 or later): only then may it be launched before the split kernel ends. Asked once per
// device (the image does not change while the process runs).
bool merge_waits_for_split_grid() {
  constexpr int kMaxDevices = 64;
  static int answer[kMaxDevices];  // 0: not asked yet, 1: no, 2: yes
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  if (device >= kMaxDevices) return false;
  if (answer[device] == 0) {
    cudaFuncAttributes attributes;
    C10_CUDA_CHECK(cudaFuncGetAttributes(&attributes, sparse_mla_decode_merge_kernel));
    answer[device] = attributes.binaryVersion >= 90 ? 2 : 1;
  }
  return answer[device] == 2;
}

}  // namespace

void launch_sparse_mla_decode_merge(const DecodeParams& params, cudaStream_t stream) {
  const int64_t num_rows = int64_t(params.num_tokens) * params.num_heads;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned((num_rows + kMergeRowsPerBlock - 1) / kMergeRowsPerBlock));
  config.blockDim = dim3(kMergeThreads);
  config.stream = stream;
  // Programmatic dependent launch: the merge's CTAs may be scheduled once every split CTA has run
  // launch_dependent_grids (or exited), and they wait in the kernel for the split grid's end, so
  // the launch gap between the two kernels can be hidden; stream capture records it as a
  // programmatic edge of the graph.
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = merge_waits_for_split_grid() ? 1 : 0;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, sparse_mla_decode_merge_kernel, params));
}

}  // namespace cake::cuda
