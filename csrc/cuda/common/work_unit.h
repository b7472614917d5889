// A work unit of the Hopper kernels (the 64-head kernel's items, the small-heads kernel's units):
// one token, one head block, one split of its candidate chunks. Plain C++: the small-heads kernel
// keeps one in its shared-memory layout, which the host sizes.
#pragma once

#include <type_traits>

namespace cake::cuda {

// The split fields: a decode's split units carry their split and its first chunk in each list
// (csrc/common/decode_splits.h); units over the whole lists (the prefill, a decode that does not
// split) carry neither.
struct WorkUnitSplit {
  int split;
  int first0, first1;  // the split's first chunk of the main and of the extra list
};
struct WorkUnitWhole {};

// The unit's chunks: the main list's chunks0 (from first0), then the extra list's (from first1),
// num_chunks in all, each list cut at the token's clamped length (work_unit in
// candidate_lists.cuh fills it).
template <bool kSplit>
struct WorkUnit : std::conditional_t<kSplit, WorkUnitSplit, WorkUnitWhole> {
  int token;
  int head0;
  int length0, length1;  // valid prefixes of the main and extra lists
  int chunks0;           // 64-candidate chunks of the main list (of the split's, in a split unit)
  int num_chunks;        // main + extra
};

}  // namespace cake::cuda
