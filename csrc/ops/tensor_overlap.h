// The overlap check the argument validators share: an op must not write memory that it also reads
// or writes through another argument. Its CTAs (or CPU tasks) write rows while others read the
// caches, the lists and q, so the result would depend on their order; torch's own out= operations
// refuse the same.
#pragma once

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>

#include "tensor_alignment.h"

namespace cake {

// The bytes [first, last] a tensor's elements span from `first`, the address of its first element
// (non-negative strides: every tensor the validators pass here has them).
struct ByteSpan {
  uintptr_t first;
  uintptr_t last;
};
inline ByteSpan byte_span(const at::Tensor& tensor, uintptr_t first) {
  int64_t extent = 0;
  for (int64_t d = 0; d < tensor.dim(); ++d) extent += (tensor.size(d) - 1) * tensor.stride(d);
  return {first, first + uintptr_t((extent + 1) * int64_t(tensor.element_size())) - 1};
}

// Whether two tensors' byte spans meet: by data pointers, or, for tensors without data (views of one
// storage), by storage offsets, which place them the same way within it.
inline bool spans_meet(const at::Tensor& a, const at::Tensor& b, PointerChecks pointers) {
  const auto start = [pointers](const at::Tensor& tensor) {
    return pointers == PointerChecks::kCheck ? reinterpret_cast<uintptr_t>(tensor.data_ptr())
                                             : uintptr_t(tensor.storage_offset() * int64_t(tensor.element_size()));
  };
  const ByteSpan x = byte_span(a, start(a)), y = byte_span(b, start(b));
  return x.first <= y.last && y.first <= x.last;
}

// ValueError naming `written` (a tensor the op writes, contiguous) when it shares memory with
// `other`. Where `other` is not dense (a cache view with padded pages), torch cannot tell whether
// the two share an element, and a written tensor inside `other`'s span counts as sharing. Two
// storages can hold the same bytes too (two tensors made by torch.frombuffer or torch.from_numpy
// over one buffer): across storages the byte spans are compared. Tensors without data (the fake
// implementations' checks) are compared only where they are views of one storage, by the spans their
// storage offsets give. Skipped for empty or absent tensors.
inline void check_apart(const at::Tensor& written, const char* written_name, const at::Tensor& other,
                        const char* other_name, PointerChecks pointers) {
  if (!written.defined() || !other.defined()) return;
  if (written.numel() == 0 || other.numel() == 0) return;
  at::MemOverlapStatus status = at::MemOverlapStatus::No;
  if (pointers == PointerChecks::kWithoutData) {
    if (written.storage().unsafeGetStorageImpl() == other.storage().unsafeGetStorageImpl() &&
        spans_meet(written, other, pointers)) {
      status = at::MemOverlapStatus::Partial;
    }
  } else if (written.storage().is_alias_of(other.storage())) {
    status = at::get_overlap_status(written, other);
    if (status == at::MemOverlapStatus::TooHard) {
      status = spans_meet(written, other, pointers) ? at::MemOverlapStatus::Partial : at::MemOverlapStatus::No;
    }
  } else if (written.device() == other.device() && spans_meet(written, other, pointers)) {
    status = at::MemOverlapStatus::Partial;
  }
  TORCH_CHECK_VALUE(status == at::MemOverlapStatus::No, written_name, ": shares memory with ", other_name,
                    ", which the op reads or writes while it writes ", written_name,
                    "; pass tensors that do not overlap");
}

}  // namespace cake
