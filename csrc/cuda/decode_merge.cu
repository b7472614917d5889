// The decode's merge, one (token, head) row at a time. Its splits are candidates with base-2
// logit mid_lse[s] and value mid_out[s]: weights 2^(mid_lse[s] - reference) against the largest
// partial LSE (decode_merge_reference), summed in split order with the partials, then the
// softmax end every kernel shares (finalize_softmax: the sink, the non-finite rules), exactly as
// the CPU merge (csrc/cpu/decode_cpu.cpp) does. A NaN partial makes its weight, and so the row,
// NaN; a row whose splits are all empty is an empty row.
//
// Two mappings of a row onto warps, the same arithmetic in the same order (so the same bits):
// with few rows (a small decode) four warps share a row, 128 dims each, so the call spreads over
// more SMs (T = 1, H = 64: 64 CTAs instead of 16); with many rows one warp takes a row, four rows
// a CTA, so the grid does not pay four warps' fixed work per row (at T = 128, H = 128 the wide
// mapping took 44.5 us against 25.8). A lane issues the loads of several splits (LSE and values)
// before it uses the first; when they are all the row's splits it takes their maximum itself,
// with no pass over the LSEs before the values are loaded.
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>

#include "../common/decode_splits.h"
#include "common/prefill_epilogue.cuh"
#include "common/ptx_primitives.cuh"
#include "decode_merge_cuda.h"

namespace cake::cuda {
namespace {

constexpr int kMergeThreads = 128;

template <int kWarpsPerRow>
__global__ void __launch_bounds__(kMergeThreads)
    sparse_mla_decode_merge_kernel(const __grid_constant__ DecodeParams params) {
  constexpr int kVectorsPerLane = nvfp4::kHeadDim / (4 * 32 * kWarpsPerRow);  // float4s of a split
  constexpr int kRowsPerBlock = kMergeThreads / 32 / kWarpsPerRow;
  // Splits whose loads a lane issues before it uses the first of them.
  constexpr int kSplitsInFlight = kVectorsPerLane == 1 ? 8 : 2;  // 8 float4s and 8 or 2 LSEs
  // token * H + head, and the stride between splits: below 2^30 (the op checks T * H).
  const int num_rows = params.num_tokens * params.num_heads;
  const int warp = threadIdx.x / 32;
  const int row = blockIdx.x * kRowsPerBlock + warp / kWarpsPerRow;
  const int part = warp % kWarpsPerRow;  // dims 512 / kWarpsPerRow * part ..
  const int lane = threadIdx.x % 32;
  if (row >= num_rows) return;
  const int token = row / params.num_heads;
  const int head = row % params.num_heads;
  const int num_splits = params.num_splits;
  // Launched while the split kernel may still run (programmatic dependent launch): nothing it
  // writes is read before this.
  wait_for_prerequisite_grids();

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

  const float sink2 = params.sink != nullptr ? __ldg(params.sink + head) * kLog2e : 0.0f;
  const SoftmaxFinal final_row = finalize_softmax(max_lse, weight_sum, params.sink != nullptr, sink2);
  __nv_bfloat16* out_row = output_row(params, token, head);
#pragma unroll
  for (int v = 0; v < kVectorsPerLane; ++v) {
    uint32_t* out = reinterpret_cast<uint32_t*>(out_row + 4 * (part * 32 * kVectorsPerLane + 32 * v + lane));
    out[0] = pack_bf16x2(acc[v].x * final_row.out_scale, acc[v].y * final_row.out_scale);
    out[1] = pack_bf16x2(acc[v].z * final_row.out_scale, acc[v].w * final_row.out_scale);
  }
  if (part == 0 && lane == 0) store_lse(params, token, head, final_row.lse2);
}

// What the launch needs to know of the current device, asked once per device (neither the image
// nor the SM count changes while the process runs): whether the merge's image has the
// programmatic-launch wait (built for sm_90 or later; only then may it be launched before the
// split kernel ends), and how many SMs there are.
struct MergeDevice {
  bool waits_for_split_grid = false;
  int num_sms = 1;
};

const MergeDevice& merge_device() {
  constexpr int kMaxDevices = 64;
  static MergeDevice devices[kMaxDevices];
  static bool asked[kMaxDevices];
  static const MergeDevice unknown;  // beyond kMaxDevices: no programmatic launch
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  if (device >= kMaxDevices) return unknown;
  if (!asked[device]) {
    cudaFuncAttributes attributes;
    C10_CUDA_CHECK(cudaFuncGetAttributes(&attributes, sparse_mla_decode_merge_kernel<1>));
    devices[device].waits_for_split_grid = attributes.binaryVersion >= 90;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&devices[device].num_sms, cudaDevAttrMultiProcessorCount, device));
    asked[device] = true;
  }
  return devices[device];
}

// Four warps a row while the rows' warps fill at most a quarter of the GPU's warp slots (8 rows
// an SM: 32 warps of 64), one warp a row beyond.
constexpr int kWideRowsPerSm = 8;

template <int kWarpsPerRow>
void launch_merge(const DecodeParams& params, int64_t num_rows, bool programmatic, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kMergeThreads / 32 / kWarpsPerRow;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned((num_rows + kRowsPerBlock - 1) / kRowsPerBlock));
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
  config.numAttrs = programmatic ? 1 : 0;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, sparse_mla_decode_merge_kernel<kWarpsPerRow>, params));
}

}  // namespace

void launch_sparse_mla_decode_merge(const DecodeParams& params, cudaStream_t stream) {
  const int64_t num_rows = int64_t(params.num_tokens) * params.num_heads;
  const MergeDevice& device = merge_device();
  if (num_rows <= int64_t(kWideRowsPerSm) * device.num_sms) {
    launch_merge<4>(params, num_rows, device.waits_for_split_grid, stream);
  } else {
    launch_merge<1>(params, num_rows, device.waits_for_split_grid, stream);
  }
}

}  // namespace cake::cuda
