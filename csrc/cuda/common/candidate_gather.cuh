// The gather of one candidate into shared memory, shared by the CUDA prefill kernels: the global
// addresses of its two rows (from the format's address math) and the 16-byte cp.async copies of
// its 384 bytes, data row first, then scale row. Each kernel splits the copies among its threads
// in its own way. A masked candidate's copies read nothing and zero-fill their destination.
#pragma once

#include <cstdint>

#include "../../format/nvfp4_format.h"
#include "prefill_params.h"
#include "ptx_primitives.cuh"

namespace cake::cuda {

constexpr int kGatherChunks = nvfp4::kTokenBytes / 16;        // 24 copies of 16 bytes a candidate
constexpr int kGatherDataChunks = nvfp4::kDataRowBytes / 16;  // the first 22 from the data row

struct CandidateRows {
  const uint8_t* data;   // its 352-byte data row
  const uint8_t* scale;  // its 32-byte scale row
  bool valid;            // false: masked
};

// The rows of slot `slot` of `list` (from candidate_slot; -1: masked, page 0 row 0 stand in).
__device__ __forceinline__ CandidateRows candidate_rows(const CandidateListParams& list, int64_t slot) {
  const bool valid = slot >= 0;
  const int64_t page = !valid ? 0 : nvfp4::divided_slot_page(slot, list.page_divisor);
  const int64_t row = valid ? nvfp4::slot_row(slot, page, list.page_size) : 0;
  const uint8_t* page_base = list.cache + nvfp4::page_offset(page, list.page_stride);
  return {page_base + nvfp4::data_row_in_page(row), page_base + nvfp4::scale_row_in_page(row, list.page_size), valid};
}

// The rows of a candidate given by its raw int32 index (masked when negative or >= num_slots; a
// masked candidate's rows are the view's base, never read). The same addresses as candidate_rows
// of candidate_slot's slot, in the format's 32-bit slot arithmetic (nvfp4::slot_row_offsets) and
// without a branch (a masked index computes slot 0's rows, then selects the base), so that a
// kernel's per-block address math is a short chain. kSelectMasked false leaves out that last
// select: a masked candidate then gets slot 0's rows, its data row the view's base all the same,
// its scale row slot 0's, for a caller that reads nothing of a masked row and takes the data row's
// address for it.
template <bool kSelectMasked = true>
__device__ __forceinline__ CandidateRows candidate_rows_of_index(const CandidateListParams& list, int32_t index) {
  const bool valid = index >= 0 && int64_t(index) < list.num_slots;
  const nvfp4::SlotRowOffsets offsets =
      nvfp4::slot_row_offsets(valid ? uint32_t(index) : 0u, list.page_divisor, list.page_size, list.page_stride);
  if constexpr (!kSelectMasked) return {list.cache + offsets.data, list.cache + offsets.scale, valid};
  return {valid ? list.cache + offsets.data : list.cache, valid ? list.cache + offsets.scale : list.cache, valid};
}

// Copies 16-byte chunk `chunk` (0 .. kGatherChunks - 1) of a candidate of `list` to `dst_row` +
// 16 * chunk in shared memory. A masked candidate's copy zero-fills it; the view's base stands in
// as its (never read) source address.
__device__ __forceinline__ void gather_chunk(uint8_t* dst_row, const CandidateListParams& list,
                                             const CandidateRows& rows, int chunk) {
  const uint8_t* src =
      chunk < kGatherDataChunks ? rows.data + chunk * 16 : rows.scale + (chunk - kGatherDataChunks) * 16;
  cp_async_16(smem_address(dst_row + chunk * 16), rows.valid ? src : list.cache, rows.valid);
}

}  // namespace cake::cuda
