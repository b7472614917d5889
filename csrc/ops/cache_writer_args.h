// Validation and slot resolution for the cache writers, shared by the CPU and CUDA kernels.
#pragma once

#include <ATen/core/Tensor.h>

#include "../format/nvfp4_format.h"
#include "tensor_alignment.h"

namespace cake {

// What a writer kernel does: for each entry i of `slots`, quantize row `source_rows[i]` of `rows`
// into cache slot `slots[i]`, skipping invalid slots and, when `skip_repeats`, an entry whose slot
// equals the previous entry's (slots are sorted stably, so the lowest input row wins).
struct CacheWriteJob {
  at::Tensor rows;         // [N, 512] bf16, contiguous
  at::Tensor slots;        // [M] int64 target slots; undefined: entry i writes row i to slot i
  at::Tensor source_rows;  // [M] int64 row of `rows` for each entry; undefined when `slots` is
  int64_t num_entries = 0;
  bool skip_repeats = false;
  at::Tensor cache;        // uint8 view
  nvfp4::CacheGeometry geometry;
};

// latent_kv [P, page_size, 512] bf16 -> every slot of `cache` (P pages of page_size tokens).
CacheWriteJob prepare_pack_job(const at::Tensor& latent_kv, const at::Tensor& cache);
// latent_kv [N, 512] bf16, slot_mapping [N] int32/int64 -> the addressed slots of `cache`.
CacheWriteJob prepare_append_job(const at::Tensor& latent_kv, const at::Tensor& slot_mapping, const at::Tensor& cache);

// The checks of the two prepare_*_job functions alone (ValueError naming the argument), which read
// no data: the writers' fake implementations run them on meta and fake tensors (`pointers`
// kWithoutData skips the cache's alignment check there). They return the cache's geometry.
nvfp4::CacheGeometry check_pack_args(const at::Tensor& latent_kv, const at::Tensor& cache,
                                     PointerChecks pointers = PointerChecks::kCheck);
nvfp4::CacheGeometry check_append_args(const at::Tensor& latent_kv, const at::Tensor& slot_mapping,
                                       const at::Tensor& cache, PointerChecks pointers = PointerChecks::kCheck);
// Their overlap check alone: the cache apart from latent_kv (slot_mapping is sorted into a new
// tensor before anything is written); cake::check_call_apart runs it on its own too.
void check_cache_apart(const at::Tensor& latent_kv, const at::Tensor& cache, PointerChecks pointers);

}  // namespace cake
