// Host side only: the driver's tensor-map encoder, reached through the runtime (no link against
// the driver library, which the extension does not otherwise need).
#include "tensor_map.h"

#include <c10/cuda/CUDAException.h>
#include <cudaTypedefs.h>

#include "../../format/nvfp4_format.h"

namespace cake::cuda {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    C10_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000, cudaEnableDefault, &found));
    TORCH_CHECK(found == cudaDriverEntryPointSuccess && entry != nullptr,
                "the CUDA driver has no cuTensorMapEncodeTiled (a driver for CUDA 12.0 or later is needed)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(entry);
  }();
  return encode;
}

}  // namespace

CUtensorMap head_rows_tensor_map(const void* data, int64_t num_tokens, int64_t num_heads, int64_t heads_per_token,
                                 uint32_t box_heads) {
  constexpr int kElementBytes = 2;  // bf16
  constexpr cuuint32_t kBoxDims = 64;
  constexpr uint32_t kMaxBoxSide = 256;  // the TMA's limit on each box dimension
  TORCH_CHECK(reinterpret_cast<uintptr_t>(data) % 16 == 0, "head_rows_tensor_map: data must be 16-byte aligned");
  TORCH_CHECK(num_tokens > 0 && num_heads > 0, "head_rows_tensor_map: empty tensor");
  TORCH_CHECK(heads_per_token >= num_heads, "head_rows_tensor_map: ", num_heads, " heads do not fit token rows of ",
              heads_per_token);
  TORCH_CHECK(box_heads > 0 && box_heads <= kMaxBoxSide, "head_rows_tensor_map: a box of ", box_heads, " heads");
  const cuuint64_t dims[3] = {cuuint64_t(nvfp4::kHeadDim), cuuint64_t(num_heads), cuuint64_t(num_tokens)};
  // Strides of dims 1 and 2 in bytes (dim 0 is contiguous): multiples of 16 as the TMA requires.
  const cuuint64_t strides[2] = {cuuint64_t(nvfp4::kHeadDim) * kElementBytes,
                                 cuuint64_t(heads_per_token) * nvfp4::kHeadDim * kElementBytes};
  const cuuint32_t box[3] = {kBoxDims, cuuint32_t(box_heads), 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  static_assert(kBoxDims * kElementBytes == 128, "a 128-byte swizzle takes boxes 128 bytes wide");
  CUtensorMap map;
  // OOB_FILL_NONE: elements outside the tensor load as zeros.
  const CUresult result = tensor_map_encoder()(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(data), dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TORCH_CHECK(result == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (CUresult ", int(result), ") for heads 0..",
              num_heads - 1, " of ", num_tokens, " rows of ", heads_per_token, " x 512 bf16, box ", box_heads, " heads");
  return map;
}

}  // namespace cake::cuda
