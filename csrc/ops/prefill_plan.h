// The prefill planner: how many sixteen-head tiles a work item holds, which kernel runs and how
// many CTAs it launches. The only implementation of the rule and its tables: the op uses it when
// `head_tiles` is None and to describe an explicit choice; Python asks it through
// torch_ops._C (torch_ops/planner.py) and re-implements nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "../format/nvfp4_format.h"
#include "prefill_kernel.h"

namespace cake {

// Prefill instances exist for 16..128 heads in steps of 16; a work item holds 1, 2 or 4 tiles.
constexpr int64_t kMaxPrefillHeads = 128;
constexpr int64_t kMaxHeadTiles = 4;
// The most tokens a prefill plan takes: a plan's counts (work items, CTAs: at most 8 a token) then
// stay within 64 bits. Far past any q a GPU holds.
constexpr int64_t kMaxPrefillPlanTokens = int64_t(1) << 56;

inline bool is_prefill_head_count(int64_t num_heads) {
  return num_heads >= nvfp4::kHeadsPerTile && num_heads <= kMaxPrefillHeads && num_heads % nvfp4::kHeadsPerTile == 0;
}

// Sixteen-head tiles one work item may hold: 1 always, 2 when H % 32 == 0, 4 when H % 64 == 0.
std::vector<int64_t> prefill_head_tile_choices(int64_t num_heads);

// ValueError naming head_tiles unless it is among H's choices (whether a device's shared memory
// holds that tile is plan_prefill's further check).
void check_prefill_head_tile_choice(int64_t num_heads, int64_t head_tiles);

// A larger head tile shares each gathered and dequantized row among more heads, but makes fewer
// work items (tokens x head blocks). Use head tile `ht` only when it still gives at least
// `min_items_percent` / 100 items per SM; otherwise fall back to the next smaller choice.
// One table per kernel family, measured on the H200 (docs/planner.md):
//   - portable kernel (and the CPU): 4 tiles win from ~0.9 items per SM up, 2 tiles beat 1 tile
//     already at ~1 item per SM;
//   - Hopper kernel (serves 4 tiles, i.e. 64 heads per CTA, on sm_90): it beats the portable
//     kernel's 1 and 2 tiles at every T measured, down to 0.5 items per SM (T = 64, H = 64), so
//     its threshold is 0. Every other call runs the small-heads Hopper kernel, whose units do
//     not depend on head_tiles (the table only names the plan's work items there).
struct HeadTileThreshold {
  int64_t head_tiles;
  int64_t min_items_percent;  // of the SM count
};
const std::vector<HeadTileThreshold>& prefill_plan_table(PrefillKernel family);

// Work items per token: one per block of 16 * head_tiles heads.
inline int64_t prefill_items_per_token(int64_t num_heads, int64_t head_tiles) {
  return num_heads / (nvfp4::kHeadsPerTile * head_tiles);
}

// Where a plan runs: the kernel family whose table applies and what the device offers.
struct PrefillTarget {
  PrefillKernel family;    // kCpu (the portable table), kPortable or kHopper
  int64_t num_sms;         // multiprocessors; intra-op threads on the CPU
  // The largest head tile whose kernel instance fits the device's shared memory per block
  // (cuda/portable/prefill_variants.h).
  int64_t max_head_tiles;
  // Family kHopper only: whether the calls the 64-head kernel does not serve run the small-heads
  // kernel (a device whose shared memory fits it, and the family in general); else the portable
  // kernel.
  bool hopper_small = false;
};

struct PrefillPlan {
  int64_t head_tiles;
  int64_t num_ctas;   // work items: num_tokens * num_heads / (16 * head_tiles)
  // CTAs launched: num_ctas, except the Hopper kernels' persistent grids: min(num_ctas, SMs) for
  // the 64-head kernel, min(T * H / group_heads_for(H), SMs) for the small-heads kernel.
  int64_t grid_size;
  PrefillKernel kernel;
};

// The plan for `num_heads` (a prefill head count) on `target`: the table's choice capped at the
// target's largest head tile, or the explicit `head_tiles`, checked against the choices and the
// cap (ValueError naming head_tiles).
PrefillPlan plan_prefill(int64_t num_tokens, int64_t num_heads, std::optional<int64_t> head_tiles,
                         const PrefillTarget& target);

// The same plan for every token count at once, for callers that hold a symbolic token count
// (torch.compile): from `min_tokens` on (up to the next step's), the plan is head_tiles and
// kernel, num_ctas = T * ctas_per_token and grid_size = T * grid_per_token + grid_base.
struct PrefillPlanStep {
  int64_t min_tokens;
  int64_t head_tiles;
  PrefillKernel kernel;
  int64_t ctas_per_token;
  int64_t grid_per_token;
  int64_t grid_base;
};
std::vector<PrefillPlanStep> prefill_plan_steps(int64_t num_heads, std::optional<int64_t> head_tiles,
                                                const PrefillTarget& target);

// The checks of a plan request that does not come from tensors (the op checks these on q and
// the indices): ValueError naming num_tokens, num_heads, topk or extra_topk.
void check_prefill_plan_request(int64_t num_tokens, int64_t num_heads, int64_t topk, int64_t extra_topk);

}  // namespace cake
