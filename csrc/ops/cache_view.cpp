#include "cache_view.h"
#include "tensor_alignment.h"

#include <c10/util/Exception.h>

namespace cake {

nvfp4::CacheGeometry check_cache_view(const at::Tensor& cache, const char* name, PointerChecks pointers) {
  TORCH_CHECK_VALUE(cache.defined(), name, ": expected a tensor");
  TORCH_CHECK_VALUE(cache.scalar_type() == at::kByte, name, ": expected dtype uint8, got ", cache.scalar_type());
  const int64_t rank = cache.dim();
  TORCH_CHECK_VALUE(rank == 3 || rank == 4, name,
                    ": expected [num_pages, page_size, 384], HND [num_pages, 1, page_size, 384] or NHD "
                    "[num_pages, page_size, 1, 384], got shape ", cache.sizes());
  TORCH_CHECK_VALUE(cache.size(-1) == nvfp4::kTokenBytes, name, ": expected last dim 384 (bytes per token), got ",
                    cache.size(-1));
  int64_t token_dim = 1;
  if (rank == 4) {
    TORCH_CHECK_VALUE(cache.size(1) == 1 || cache.size(2) == 1, name,
                      ": a 4-D cache must be HND [num_pages, 1, page_size, 384] or NHD "
                      "[num_pages, page_size, 1, 384], got shape ", cache.sizes());
    // HND when dim 1 is the singleton head axis (a [P, 1, 1, 384] view is both and reads the same).
    token_dim = cache.size(1) == 1 ? 2 : 1;
  }
  nvfp4::CacheGeometry geometry{};
  geometry.num_pages = cache.size(0);
  geometry.page_size = cache.size(token_dim);
  TORCH_CHECK_VALUE(geometry.page_size >= 1, name, ": expected page_size >= 1, got ", geometry.page_size);
  TORCH_CHECK_VALUE(cache.stride(-1) == 1, name, ": expected stride 1 in the last dim, got ", cache.stride(-1));
  TORCH_CHECK_VALUE(geometry.page_size == 1 || cache.stride(token_dim) == nvfp4::kTokenBytes, name,
                    ": expected token stride 384 inside a page, got ", cache.stride(token_dim));
  const int64_t page_payload = geometry.page_size * nvfp4::kTokenBytes;
  // The stride of a single page is meaningless (PyTorch may report anything); use the payload.
  geometry.page_stride = geometry.num_pages > 1 ? cache.stride(0) : page_payload;
  TORCH_CHECK_VALUE(geometry.page_stride % 16 == 0, name, ": expected a page stride that is a multiple of 16 bytes, got ",
                    geometry.page_stride);
  TORCH_CHECK_VALUE(geometry.page_stride >= page_payload, name, ": expected a page stride >= page_size * 384 = ",
                    page_payload, ", got ", geometry.page_stride);
  check_data_alignment(cache, 16, name, pointers);
  return geometry;
}

}  // namespace cake
