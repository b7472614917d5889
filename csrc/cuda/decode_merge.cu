// The decode's merge kernel: one (token, head) row at a time, the row's arithmetic in
// common/decode_merge_row.cuh (exactly the CPU merge's, csrc/cpu/decode_cpu.cpp). A NaN partial
// makes its weight, and so the row, NaN; a row whose splits are all empty is an empty row.
//
// Two mappings of a row onto warps, the same arithmetic in the same order (so the same bits):
// with few rows (a small decode) four warps share a row, 128 dims each, so the call spreads over
// more SMs (T = 1, H = 64: 64 CTAs instead of 16); with many rows one warp takes a row, four rows
// a CTA, so the grid does not pay four warps' fixed work per row (at T = 128, H = 128 the wide
// mapping took 44.5 us against 25.8). A lane issues the loads of several splits (LSE and values)
// before it uses the first; when they are all the row's splits it takes their maximum itself,
// with no pass over the LSEs before the values are loaded.
#include <c10/cuda/CUDAException.h>

#include "common/decode_merge_row.cuh"
#include "common/ptx_primitives.cuh"
#include "decode_merge_cuda.h"

namespace cake::cuda {
namespace {

constexpr int kMergeThreads = 128;

template <int kWarpsPerRow>
__global__ void __launch_bounds__(kMergeThreads)
    sparse_mla_decode_merge_kernel(const __grid_constant__ DecodeParams params) {
  constexpr int kRowsPerBlock = kMergeThreads / 32 / kWarpsPerRow;
  const int num_rows = params.num_tokens * params.num_heads;
  const int warp = threadIdx.x / 32;
  const int row = blockIdx.x * kRowsPerBlock + warp / kWarpsPerRow;
  if (row >= num_rows) return;
  // Launched while the split kernel may still run (programmatic dependent launch): nothing it
  // writes is read before this.
  wait_for_prerequisite_grids();
  merge_decode_row<kWarpsPerRow>(params, row, warp % kWarpsPerRow, threadIdx.x % 32);
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
