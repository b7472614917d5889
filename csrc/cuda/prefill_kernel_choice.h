// Which CUDA prefill kernel serves a call. Plain C++ (no CUDA headers): the op, the planner and
// the Python module (torch_ops._C.prefill_kernel_for, used by tests) ask the same functions.
#pragma once

#include "../ops/prefill_kernel.h"
#include "../ops/prefill_kernel_override.h"
#include "hopper/prefill_hopper_layout.h"
#include "hopper_small/prefill_small_layout.h"
#include "portable/prefill_variants.h"

namespace cake::cuda {

// True when this build contains sm_90a code (setup.py defines CAKE_WITH_SM90A then).
constexpr bool hopper_prefill_compiled() {
#if defined(CAKE_WITH_SM90A)
  return true;
#else
  return false;
#endif
}

// Whether this device runs the Hopper kernels at all: an sm_90a build, compute capability 9.x,
// the 64-head kernel's shared memory, and no override keeping it on the portable kernel (the
// planner then uses the Hopper kernel's table).
inline bool device_runs_hopper_prefill(int cc_major, long long smem_per_block, const PrefillKernelOverride& knobs) {
  return hopper_prefill_compiled() && cc_major == 9 && smem_per_block >= HopperPrefillLayout::kSmemBytes &&
         !knobs.forces_portable();
}

// Whether such a device runs the small-heads kernel too: it needs its own shared memory (190 KB at
// most, less than the 64-head kernel's 223 KB; every sm_90 part offers 227 KB a block) and, for the
// heads it leaves to the 64-head kernel, that one's.
inline bool device_runs_hopper_small_prefill(int cc_major, long long smem_per_block,
                                             const PrefillKernelOverride& knobs) {
  return device_runs_hopper_prefill(cc_major, smem_per_block, knobs) &&
         smem_per_block >= HopperSmallPrefillLayout::kMaxSmemBytes;
}

// The shapes it serves: 64 heads per work item (head_tiles 4).
inline bool hopper_prefill_serves(long long num_heads, long long head_tiles) {
  return head_tiles * nvfp4::kHeadsPerTile == HopperPrefillLayout::kHeads && num_heads % HopperPrefillLayout::kHeads == 0;
}

// In a call the small-heads kernel serves, the heads the 64-head kernel runs instead, in blocks of
// 64 from head 0:
// - H = 48, 112 (H % 64 == 48): all of them, the last block padded (48 of its 64 rows are
//   heads; the padding rows get zero q and are never stored). Measured on the H200 at T = 4096,
//   topk 512, a 64-head block took 888 us (H = 64) against 1206 us for 48 heads on the small-heads
//   kernel (docs/hopper_small_kernel.md), so the padding costs less than the small kernel saves.
// - H = 80, 96 (H % 64 == 16, 32): heads 0..63, the rest on the small-heads kernel (faster there
//   than padding: 888 + 565 / 717 us against 1723 us for 128 heads).
// - Otherwise (16, 32; and 64, 128, which reach this kernel only with head_tiles below 4): none.
inline long long hopper_small_wide_heads(long long num_heads) {
  constexpr long long kBlock = HopperPrefillLayout::kHeads;
  if (num_heads % kBlock == 0) return 0;
  if (num_heads % kBlock == 48) return (num_heads / kBlock + 1) * kBlock;
  return num_heads / kBlock * kBlock;
}

// The heads of such a call left to the small-heads kernel (0: it does not run).
inline long long hopper_small_narrow_heads(long long num_heads) {
  const long long wide = hopper_small_wide_heads(num_heads);
  return wide < num_heads ? num_heads - wide : 0;
}

// The work items per token of the (one or two) persistent grids of a small-heads call, launched
// one after the other: the 64-head kernel's items over the wide heads, then the small-heads
// kernel's units (a token and G heads, G = 32 where it divides the heads left, else 16); 0 where
// that grid is not launched.
struct SmallHeadsGrids {
  long long wide_items;
  long long narrow_units;
};
inline SmallHeadsGrids hopper_small_grids(long long num_heads) {
  const long long rest = hopper_small_narrow_heads(num_heads);
  return {hopper_small_wide_heads(num_heads) / HopperPrefillLayout::kHeads,
          rest > 0 ? rest / hopper_small::group_heads_for(rest) : 0};
}

// Whether a small-heads call runs two grids one after the other (H = 80, 96 of the multiples of 16).
inline bool hopper_small_runs_two_grids(long long num_heads) {
  const SmallHeadsGrids grids = hopper_small_grids(num_heads);
  return grids.wide_items > 0 && grids.narrow_units > 0;
}

// What each grid of a small-heads call walks per token, at most: the larger of the two above.
inline long long hopper_small_units_per_token(long long num_heads) {
  const SmallHeadsGrids grids = hopper_small_grids(num_heads);
  return grids.narrow_units > grids.wide_items ? grids.narrow_units : grids.wide_items;
}

// The time of a work item's 64-candidate chunk on the Hopper kernels by the heads the item holds,
// relative to a 16-head unit's (100): 16 and 32 heads (the small-heads kernel's units), 64 (the
// 64-head kernel's items). From the H200's decode rows at 2048 candidates (docs/planner.md, "One
// split in two grids"): about 2.34 us a chunk for a 64-head item in one wave of them, and 1.65 and
// 2.1 us a chunk-wave of the cost model for the 16- and 32-head units of splits over several waves.
inline long long hopper_chunk_weight(long long heads) { return heads >= 64 ? 142 : heads >= 32 ? 127 : 100; }

// The kernel of a call in the Hopper family: the 64-head kernel for its shapes; the small-heads
// kernel for every other call where the device runs it (16 or 32 heads a unit,
// prefill_small_layout.h: group_heads_for, several units per token above 32 heads; in the prefill
// whatever head_tiles says, in the decode's split form 16 at head tile 1, decode_unit_heads;
// faster than the portable kernel at every shape measured on the H200,
// docs/hopper_small_kernel.md); else the portable kernel. The planner (csrc/ops/prefill_plan.cpp)
// and select_prefill_kernel both ask it.
inline PrefillKernel hopper_family_kernel(bool runs_small_heads, long long num_heads, long long head_tiles) {
  if (hopper_prefill_serves(num_heads, head_tiles)) return PrefillKernel::kHopper;
  return runs_small_heads ? PrefillKernel::kHopperSmall : PrefillKernel::kPortable;
}

// A device's kernel for a call: the Hopper family's on a device that runs the Hopper kernels;
// elsewhere, or under the override "portable" or a variant, the portable kernel. The overrides
// "hopper" and "hopper_small" choose the same way.
inline PrefillKernel select_prefill_kernel(int cc_major, long long smem_per_block, long long num_heads,
                                           long long head_tiles, const PrefillKernelOverride& knobs) {
  if (!device_runs_hopper_prefill(cc_major, smem_per_block, knobs)) return PrefillKernel::kPortable;
  return hopper_family_kernel(device_runs_hopper_small_prefill(cc_major, smem_per_block, knobs), num_heads,
                              head_tiles);
}

// The fewest chunks the largest split of a decode that splits must hold for a Hopper kernel to run
// the splits. Measured on the H200 for the 64-head kernel (docs/benchmarks.md, decode): with one
// chunk a split, the portable body was faster (T = 8, H = 64, 1024 candidates in 16 splits: 28 us
// against 35 us; T = 4, H = 128: 28 against 35), because a Hopper CTA pays for a whole Q tile and
// a pipeline fill to convert one block; from two chunks a split on, the Hopper kernel was faster
// (T = 1, H = 64, 2048 candidates in 16 splits: 31 against 34 us; 8 chunks a split: 101 against
// 162 us). The small-heads kernel's split form takes the same rule (its CTA also loads the unit's
// Q and fills a pipeline before its first chunk). The decode planner plans no split below this on
// a device that runs these kernels (decode_split_rules, ../ops/decode_plan.h): half as
// many two-chunk splits beat the one-chunk splits on the portable body there.
constexpr long long kHopperDecodeMinChunksPerSplit = 2;

// Whether a decode plan gives the Hopper kernels enough work a split: one split always (it runs
// as the prefill does, so at the prefill's head counts its bits are the prefill's), several when
// the largest holds at least kHopperDecodeMinChunksPerSplit chunks.
inline bool decode_splits_fit_hopper(long long num_splits, long long most_chunks_per_split) {
  return num_splits == 1 || most_chunks_per_split >= kHopperDecodeMinChunksPerSplit;
}

// The decode's split kernel, on a device that runs the Hopper kernels, where the plan fits them
// (decode_splits_fit_hopper) or under the override "hopper" (so that one-chunk splits can be timed
// on them): the 64-head Hopper kernel where it serves the call (its split items); for the other
// calls, where the device runs the small-heads kernel, that one: with one split at 16, 32, ...,
// 128 heads as the prefill runs them (the op launches the prefill's small-heads dispatch), else its
// split form (every head of the call in units of 16 or 32, H = 8, 24, ... padded; with one split
// it writes the output). Else the portable kernel's body. Measured on the H200 before one-split
// calls took the small-heads kernel, their portable body was 1.3-2.1x slower than two splits on
// the split form (T = 128, H = 16, 1024 candidates: 97.5 against 45.5 us; docs/benchmarks.md).
inline PrefillKernel select_decode_split_kernel(int cc_major, long long smem_per_block, long long num_heads,
                                                long long head_tiles, long long num_splits,
                                                long long most_chunks_per_split, const PrefillKernelOverride& knobs) {
  if (!device_runs_hopper_prefill(cc_major, smem_per_block, knobs)) return PrefillKernel::kPortable;
  const bool fits = knobs.requires_hopper() || decode_splits_fit_hopper(num_splits, most_chunks_per_split);
  if (!fits) return PrefillKernel::kPortable;
  if (hopper_prefill_serves(num_heads, head_tiles)) return PrefillKernel::kHopper;
  return device_runs_hopper_small_prefill(cc_major, smem_per_block, knobs) ? PrefillKernel::kHopperSmall
                                                                          : PrefillKernel::kPortable;
}

// Whether some compiled portable instance has this pipeline (what a variant override may ask).
inline bool prefill_pipeline_compiled(int stages, int k_tiles) {
  for (const PrefillVariant& variant : kPrefillVariants) {
    if (variant.stages == stages && variant.k_tiles == k_tiles) return true;
  }
  return false;
}

}  // namespace cake::cuda
