// Per-token candidate-list helpers shared by the CUDA attention kernels: the clamped length of a
// list, the positions of it a CTA walks, and the slot of one candidate (-1 when masked: past the
// length or the CTA's range, negative, or beyond the cache). Masked candidates are never read.
#pragma once

#include <cstdint>

#include "../../common/decode_splits.h"
#include "../../format/nvfp4_format.h"
#include "decode_params.h"
#include "prefill_params.h"
#include "work_unit.h"

namespace cake::cuda {

// The token's valid prefix of one list: clamp(lengths[t], 0, width), or width.
__device__ __forceinline__ int list_length(const CandidateListParams& list, int token) {
  if (list.width == 0) return 0;
  if (list.lengths == nullptr) return list.width;
  const int length = __ldg(list.lengths + token);
  return length < 0 ? 0 : (length > list.width ? list.width : length);
}

// The positions [begin, limit) of a list that one CTA walks, in `subtiles` steps of `step`
// positions from `begin`: the prefill takes [0, width), a decode split its range [begin, end)
// (chunk-aligned, csrc/common/decode_splits.h); limit = min(end, the token's clamped length), so
// nothing at or past it is read (the last step's positions from `limit` on are masked).
struct ListWalk {
  int begin;
  int limit;
  int subtiles;
};

__device__ __forceinline__ ListWalk list_walk(const CandidateListParams& list, int token, int begin, int end, int step) {
  const int length = list_length(list, token);
  const int limit = end < length ? end : length;
  const int count = limit > begin ? limit - begin : 0;
  return {begin, limit, (count + step - 1) / step};
}

// Chunks [first, end) of a list, cut at its first `valid` chunks: the count (>= 0). A decode
// split's chunks of one list (csrc/common/decode_splits.h) that the token's length leaves.
__device__ __forceinline__ int chunk_count(int first, int end, int valid) {
  const int last = end < valid ? end : valid;
  return last > first ? last - first : 0;
}

// The work of a Hopper kernel's launch (the 64-head kernel's items, the small-heads kernel's
// units): tokens x head blocks x splits, numbered (token * num_head_blocks + head block) *
// num_splits + split; kSplit false: one split, the whole lists.
template <bool kSplit>
__device__ __forceinline__ int num_work_units(const DecodeParams& params) {
  return params.num_tokens * params.num_head_blocks * (kSplit ? params.num_splits : 1);
}
// Whose rows work unit `index` computes: its token, its first head (head blocks of kBlockHeads)
// and its split (0 for whole lists). Cheap enough to recompute where needed (an epilogue, a Q
// load) rather than keep in registers across a unit.
struct WorkRows {
  int token;
  int head0;
  int split;
};
// value / divisor and value % divisor for value >= 0, divisor > 0: by a shift where the divisor is
// a power of two (a launch's head-block count mostly is: 1 or 2 for every 64-head launch). An
// integer division by a run-time value goes through the reciprocal unit (MUFU.RCP), whose queue
// the Hopper kernels' shared-memory traffic keeps busy: a few such divisions an item cost the
// 64-head kernel several percent at topk 128 (docs/benchmarks.md).
struct QuotientRemainder {
  int quotient;
  int remainder;
};
__device__ __forceinline__ QuotientRemainder divide_small(int value, int divisor) {
  if ((divisor & (divisor - 1)) == 0) {
    return {value >> (__ffs(divisor) - 1), value & (divisor - 1)};
  }
  const int quotient = value / divisor;
  return {quotient, value - quotient * divisor};
}
// kShift false: the plain divisions, for the small-heads kernel: its short decode splits ran ~4%
// slower with the shifts' code, while its units gained nothing from them (docs/benchmarks.md).
template <int kBlockHeads, bool kSplit, bool kShift = true>
__device__ __forceinline__ WorkRows work_rows(const DecodeParams& params, int index) {
  if constexpr (!kShift) {
    const int row_index = kSplit ? index / params.num_splits : index;
    return {row_index / params.num_head_blocks, (row_index % params.num_head_blocks) * kBlockHeads,
            kSplit ? index % params.num_splits : 0};
  }
  const QuotientRemainder split = kSplit ? divide_small(index, params.num_splits) : QuotientRemainder{index, 0};
  const QuotientRemainder rows = divide_small(split.quotient, params.num_head_blocks);
  return {rows.quotient, rows.remainder * kBlockHeads, split.remainder};
}

// A (token, split) work unit's 64-candidate chunks (nvfp4::kChunkSize) of both lists: the token's
// clamped lengths, and per list the first chunk and the number the unit takes, the main list's
// chunks before the extra list's. kSplit false: the whole lists (one split, both firsts 0); true:
// split `split`'s chunk range (csrc/common/decode_splits.h), cut at the token's lengths. The
// Hopper kernels' work items and units are this plus their token and heads.
struct UnitChunks {
  int length0, length1;  // valid prefixes of the main and extra lists
  int first0, chunks0;   // the main list's first chunk and count
  int first1;            // the extra list's first chunk
  int num_chunks;        // main + extra
};
template <bool kSplit>
__device__ __forceinline__ UnitChunks unit_chunks(const DecodeParams& params, int token, int split) {
  constexpr int kRows = nvfp4::kChunkSize;
  UnitChunks c;
  c.length0 = list_length(params.lists[0], token);
  c.length1 = list_length(params.lists[1], token);
  const int valid0 = (c.length0 + kRows - 1) / kRows;
  const int valid1 = (c.length1 + kRows - 1) / kRows;
  if constexpr (!kSplit) {
    c.first0 = c.first1 = 0;
    c.chunks0 = valid0;
    c.num_chunks = valid0 + valid1;
  } else {
    // decode_split_positions' ranges in 32 bits from the launch's constants: no 64-bit division
    // (a call of ~100 instructions each) in the seek, which a short split runs once.
    const uint32_t width_chunks0 = uint32_t(params.lists[0].width + kRows - 1) / kRows;
    const uint32_t first = decode_split_first_chunk_u32(split, params.num_splits, params.split_chunks_quotient,
                                                        params.split_chunks_remainder);
    const uint32_t last = decode_split_first_chunk_u32(split + 1, params.num_splits, params.split_chunks_quotient,
                                                       params.split_chunks_remainder);
    c.first0 = int(min(first, width_chunks0));
    c.chunks0 = chunk_count(c.first0, int(min(last, width_chunks0)), valid0);
    c.first1 = int(first > width_chunks0 ? first - width_chunks0 : 0u);
    c.num_chunks = c.chunks0 + chunk_count(c.first1, int(last > width_chunks0 ? last - width_chunks0 : 0u), valid1);
  }
  return c;
}

// Work unit `index` of a launch (work_rows) with its chunks (unit_chunks).
template <int kBlockHeads, bool kSplit, bool kShift = true>
__device__ __forceinline__ WorkUnit<kSplit> work_unit(const DecodeParams& params, int index) {
  WorkUnit<kSplit> u;
  const WorkRows rows = work_rows<kBlockHeads, kSplit, kShift>(params, index);
  u.token = rows.token;
  u.head0 = rows.head0;
  const UnitChunks c = unit_chunks<kSplit>(params, u.token, rows.split);
  u.length0 = c.length0;
  u.length1 = c.length1;
  u.chunks0 = c.chunks0;
  u.num_chunks = c.num_chunks;
  if constexpr (kSplit) {
    u.split = rows.split;
    u.first0 = c.first0;
    u.first1 = c.first1;
  }
  return u;
}

// The whole list, [0, length) for the token's clamped `length` (list_length).
__device__ __forceinline__ ListWalk whole_list_walk(int length, int step) { return {0, length, (length + step - 1) / step}; }

// Slot of candidate `position` of a list, or -1 when it is at or past `limit` (the token's
// length, or a walk's limit) or out of range.
__device__ __forceinline__ int64_t candidate_slot(const CandidateListParams& list, int token, int limit,
                                                  int position) {
  if (position >= limit) return -1;
  const int64_t slot = __ldg(list.indices + int64_t(token) * list.width + position);
  return (slot >= 0 && slot < list.num_slots) ? slot : -1;
}

}  // namespace cake::cuda
