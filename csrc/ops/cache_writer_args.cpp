#include "cache_writer_args.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "cache_view.h"
#include "tensor_overlap.h"

namespace cake {

nvfp4::CacheGeometry check_pack_args(const at::Tensor& latent_kv, const at::Tensor& cache, PointerChecks pointers) {
  const nvfp4::CacheGeometry geometry = check_cache_view(cache, "cache", pointers);
  TORCH_CHECK_VALUE(latent_kv.device() == cache.device(), "latent_kv: expected a tensor on ", cache.device(),
                    " (the device of cache), got ", latent_kv.device());
  TORCH_CHECK_VALUE(latent_kv.scalar_type() == at::kBFloat16, "latent_kv: expected dtype bfloat16, got ",
                    latent_kv.scalar_type());
  TORCH_CHECK_VALUE(latent_kv.dim() == 3 && latent_kv.size(0) == geometry.num_pages &&
                        latent_kv.size(1) == geometry.page_size && latent_kv.size(2) == nvfp4::kHeadDim,
                    "latent_kv: expected shape [", geometry.num_pages, ", ", geometry.page_size,
                    ", 512] (pages and page size of cache), got ", latent_kv.sizes());
  check_cache_apart(latent_kv, cache, pointers);
  return geometry;
}

void check_cache_apart(const at::Tensor& latent_kv, const at::Tensor& cache, PointerChecks pointers) {
  check_apart(cache, "cache", latent_kv, "latent_kv", pointers);
}

CacheWriteJob prepare_pack_job(const at::Tensor& latent_kv, const at::Tensor& cache) {
  CacheWriteJob job;
  job.geometry = check_pack_args(latent_kv, cache);
  job.rows = latent_kv.contiguous().view({-1, nvfp4::kHeadDim});
  job.num_entries = job.rows.size(0);
  job.cache = cache;
  return job;
}

nvfp4::CacheGeometry check_append_args(const at::Tensor& latent_kv, const at::Tensor& slot_mapping,
                                       const at::Tensor& cache, PointerChecks pointers) {
  const nvfp4::CacheGeometry geometry = check_cache_view(cache, "cache", pointers);
  TORCH_CHECK_VALUE(latent_kv.device() == cache.device(), "latent_kv: expected a tensor on ", cache.device(),
                    " (the device of cache), got ", latent_kv.device());
  TORCH_CHECK_VALUE(slot_mapping.device() == cache.device(), "slot_mapping: expected a tensor on ", cache.device(),
                    " (the device of cache), got ", slot_mapping.device());
  TORCH_CHECK_VALUE(latent_kv.scalar_type() == at::kBFloat16, "latent_kv: expected dtype bfloat16, got ",
                    latent_kv.scalar_type());
  TORCH_CHECK_VALUE(latent_kv.dim() == 2 && latent_kv.size(1) == nvfp4::kHeadDim,
                    "latent_kv: expected shape [N, 512], got ", latent_kv.sizes());
  TORCH_CHECK_VALUE(slot_mapping.scalar_type() == at::kInt || slot_mapping.scalar_type() == at::kLong,
                    "slot_mapping: expected dtype int32 or int64, got ", slot_mapping.scalar_type());
  TORCH_CHECK_VALUE(slot_mapping.dim() == 1 && slot_mapping.size(0) == latent_kv.size(0),
                    "slot_mapping: expected shape [", latent_kv.size(0), "] (rows of latent_kv), got ",
                    slot_mapping.sizes());
  check_cache_apart(latent_kv, cache, pointers);
  return geometry;
}

CacheWriteJob prepare_append_job(const at::Tensor& latent_kv, const at::Tensor& slot_mapping, const at::Tensor& cache) {
  CacheWriteJob job;
  job.geometry = check_append_args(latent_kv, slot_mapping, cache);
  job.rows = latent_kv.contiguous();
  job.num_entries = job.rows.size(0);
  job.cache = cache;
  job.skip_repeats = true;
  // A stable sort puts repeated slots next to each other in input order; the writer keeps the
  // first of each run, which is the lowest input row, whatever the thread schedule.
  auto [sorted_slots, order] = slot_mapping.to(at::kLong).sort(/*stable=*/true, /*dim=*/0, /*descending=*/false);
  job.slots = sorted_slots.contiguous();
  job.source_rows = order.contiguous();
  return job;
}

}  // namespace cake
