// The alignment check the argument validators share: the CUDA kernels read or write some tensors
// in vectors of several bytes, so a view whose storage offset breaks that alignment is rejected
// (on every device, so the contract does not depend on where a call runs).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>

namespace cake {

// Whether the validators look at data pointers. The fake implementations (torch_ops.meta) run the
// same checks on tensors without data (meta and fake tensors, whose pointers say nothing): they
// skip the alignment, and compare views of one storage by their storage offsets instead of their
// pointers (tensor_overlap.h); the ops themselves always check the pointers.
enum class PointerChecks { kCheck, kWithoutData };

// ValueError naming `name` unless the tensor's data pointer is a multiple of `bytes`.
inline void check_data_alignment(const at::Tensor& tensor, int64_t bytes, const char* name,
                                 PointerChecks pointers = PointerChecks::kCheck) {
  if (pointers == PointerChecks::kWithoutData) return;
  TORCH_CHECK_VALUE(reinterpret_cast<uintptr_t>(tensor.data_ptr()) % bytes == 0, name, ": expected a ", bytes,
                    "-byte aligned data pointer (storage offset ", tensor.storage_offset(), ")");
}

}  // namespace cake
