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

// Contiguous rows of num_heads x 512 elements of `element_bytes` each, as a 3-D map (512,
// num_heads, num_rows) whose box is 128 bytes of dims x kHeadRowsBoxHeads heads x 1, 128-byte
// swizzled.
CUtensorMap encode_head_rows(const void* data, CUtensorMapDataType type, int element_bytes, int64_t num_rows,
                             int64_t num_heads) {
  constexpr int kSwizzleBytes = 128;
  TORCH_CHECK(tma_addressable(data), "head_rows_tensor_map: data must be ", kTmaAlignment, "-byte aligned");
  TORCH_CHECK(num_rows > 0 && num_heads > 0, "head_rows_tensor_map: empty tensor");
  const cuuint64_t dims[3] = {cuuint64_t(nvfp4::kHeadDim), cuuint64_t(num_heads), cuuint64_t(num_rows)};
  // Strides of dims 1 and 2 in bytes (dim 0 is contiguous): multiples of 16 as the TMA requires.
  const cuuint64_t strides[2] = {cuuint64_t(nvfp4::kHeadDim) * element_bytes,
                                 cuuint64_t(num_heads) * nvfp4::kHeadDim * element_bytes};
  const cuuint32_t box[3] = {cuuint32_t(kSwizzleBytes / element_bytes), kHeadRowsBoxHeads, 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  CUtensorMap map;
  // OOB_FILL_NONE: elements outside the tensor load as zeros.
  const CUresult result = tensor_map_encoder()(
      &map, type, 3, const_cast<void*>(data), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TORCH_CHECK(result == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (CUresult ", int(result), ") for heads 0..",
              num_heads - 1, " of ", num_rows, " rows of ", num_heads, " x 512 elements of ", element_bytes,
              " bytes");
  return map;
}

}  // namespace

CUtensorMap head_rows_tensor_map(const void* data, int64_t num_tokens, int64_t num_heads) {
  return encode_head_rows(data, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, num_tokens, num_heads);
}

CUtensorMap partial_rows_tensor_map(const float* data, int64_t num_rows, int64_t num_heads) {
  return encode_head_rows(data, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, num_rows, num_heads);
}

}  // namespace cake::cuda
