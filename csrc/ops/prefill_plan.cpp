#include "prefill_plan.h"

#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "../cuda/prefill_kernel_choice.h"

namespace cake {
namespace {

// The table rule, before the target's cap: the largest choice whose work items reach its
// threshold, else 1.
int64_t table_head_tiles(int64_t num_tokens, int64_t num_heads, const PrefillTarget& target) {
  const std::vector<int64_t> choices = prefill_head_tile_choices(num_heads);
  for (auto it = choices.rbegin(); it != choices.rend(); ++it) {
    const int64_t head_tiles = *it;
    if (head_tiles == 1) return 1;
    for (const HeadTileThreshold& threshold : prefill_plan_table(target.family)) {
      // In 128 bits: up to 2^56 tokens times 8 items times 100 and any SM count times a percent
      // pass 64 bits.
      if (threshold.head_tiles == head_tiles &&
          __int128(num_tokens) * prefill_items_per_token(num_heads, head_tiles) * 100 >=
              __int128(threshold.min_items_percent) * target.num_sms) {
        return head_tiles;
      }
    }
  }
  return 1;
}

PrefillKernel kernel_for(const PrefillTarget& target, int64_t num_heads, int64_t head_tiles) {
  if (target.family == PrefillKernel::kHopper) {
    return cuda::hopper_family_kernel(target.hopper_small, num_heads, head_tiles);
  }
  return target.family == PrefillKernel::kCpu ? PrefillKernel::kCpu : PrefillKernel::kPortable;
}

// What a kernel's grid walks per token: the work items, except a small-heads call's (its units
// of 16 or 32 heads, whatever head_tiles says, and the 64-head kernel's items over its
// leading heads where H is not a multiple of 64: two grids, the larger counted).
int64_t grid_units_per_token(PrefillKernel kernel, int64_t num_heads, int64_t head_tiles) {
  return kernel == PrefillKernel::kHopperSmall ? cuda::hopper_small_units_per_token(num_heads)
                                               : prefill_items_per_token(num_heads, head_tiles);
}

// CTAs launched: one per unit of the grid, except the Hopper kernels' persistent grids of one CTA
// per SM at most.
int64_t grid_size_for(PrefillKernel kernel, int64_t num_tokens, int64_t num_heads, int64_t head_tiles,
                      int64_t num_sms) {
  const int64_t units = num_tokens * grid_units_per_token(kernel, num_heads, head_tiles);
  return is_hopper_family(kernel) ? std::min(units, num_sms) : units;
}

}  // namespace

std::vector<int64_t> prefill_head_tile_choices(int64_t num_heads) {
  if (!is_prefill_head_count(num_heads)) return {};
  std::vector<int64_t> choices;
  for (int64_t head_tiles = 1; head_tiles <= kMaxHeadTiles; head_tiles *= 2) {
    if (num_heads % (nvfp4::kHeadsPerTile * head_tiles) == 0) choices.push_back(head_tiles);
  }
  return choices;
}

const std::vector<HeadTileThreshold>& prefill_plan_table(PrefillKernel family) {
  static const std::vector<HeadTileThreshold> portable{{2, 50}, {4, 90}};
  static const std::vector<HeadTileThreshold> hopper{{2, 50}, {4, 0}};
  return is_hopper_family(family) ? hopper : portable;
}

void check_prefill_head_tile_choice(int64_t num_heads, int64_t head_tiles) {
  const std::vector<int64_t> choices = prefill_head_tile_choices(num_heads);
  TORCH_CHECK_VALUE(std::find(choices.begin(), choices.end(), head_tiles) != choices.end(),
                    "head_tiles: expected one of ", c10::IntArrayRef(choices), " for H = ", num_heads, ", got ",
                    head_tiles);
}

PrefillPlan plan_prefill(int64_t num_tokens, int64_t num_heads, std::optional<int64_t> head_tiles,
                         const PrefillTarget& target) {
  TORCH_CHECK_VALUE(is_prefill_head_count(num_heads), "num_heads: expected 16, 32, ..., 128 (a prefill instance), got ",
                    num_heads);
  TORCH_CHECK_VALUE(num_tokens >= 0, "num_tokens: expected >= 0, got ", num_tokens);
  TORCH_CHECK_VALUE(num_tokens <= kMaxPrefillPlanTokens, "num_tokens: expected <= 2^56 = ", kMaxPrefillPlanTokens, ", got ", num_tokens);
  TORCH_CHECK_VALUE(target.num_sms >= 1, "num_sms: expected >= 1, got ", target.num_sms);
  TORCH_CHECK_VALUE(target.max_head_tiles >= 1, "device: its shared memory per block fits no prefill kernel instance");
  PrefillPlan plan{};
  if (head_tiles.has_value()) {
    check_prefill_head_tile_choice(num_heads, *head_tiles);
    TORCH_CHECK_VALUE(*head_tiles <= target.max_head_tiles, "head_tiles: ", *head_tiles, " needs more shared memory "
                      "per block than this device has; it runs at most ", target.max_head_tiles);
    plan.head_tiles = *head_tiles;
  } else {
    // Choices nest (1 | 2 | 4), so the cap is a minimum.
    plan.head_tiles = std::min(table_head_tiles(num_tokens, num_heads, target), target.max_head_tiles);
  }
  plan.kernel = kernel_for(target, num_heads, plan.head_tiles);
  plan.num_ctas = num_tokens * prefill_items_per_token(num_heads, plan.head_tiles);
  plan.grid_size = grid_size_for(plan.kernel, num_tokens, num_heads, plan.head_tiles, target.num_sms);
  return plan;
}

std::vector<PrefillPlanStep> prefill_plan_steps(int64_t num_heads, std::optional<int64_t> head_tiles,
                                                const PrefillTarget& target) {
  using Key = std::tuple<int, bool, int64_t, int64_t, int64_t, int64_t>;
  static std::mutex mutex;
  static std::map<Key, std::vector<PrefillPlanStep>> cache;
  const Key key{int(target.family), target.hopper_small, target.num_sms, target.max_head_tiles, num_heads,
                head_tiles.value_or(0)};
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto found = cache.find(key);
    if (found != cache.end()) return found->second;
  }
  // Walk plan_prefill itself: a step is a run of token counts with the same head tiles, kernel
  // and grid regime (one CTA per item, or a persistent grid already at its SM count). Larger T
  // never goes back to an earlier step, so each step's end is found by bisection.
  constexpr int64_t kMaxTokens = int64_t(1) << 40;
  const auto grid_full = [&](int64_t num_tokens, const PrefillPlan& plan) {
    return plan.grid_size < num_tokens * grid_units_per_token(plan.kernel, num_heads, plan.head_tiles);
  };
  const auto regime = [&](int64_t num_tokens) {
    const PrefillPlan plan = plan_prefill(num_tokens, num_heads, head_tiles, target);
    return std::make_tuple(plan.head_tiles, plan.kernel, grid_full(num_tokens, plan));
  };
  std::vector<PrefillPlanStep> steps;
  for (int64_t start = 0;;) {
    const PrefillPlan plan = plan_prefill(start, num_heads, head_tiles, target);
    const bool persistent_full = grid_full(start, plan);
    const int64_t ctas_per_token = prefill_items_per_token(num_heads, plan.head_tiles);
    const int64_t grid_per_token = grid_units_per_token(plan.kernel, num_heads, plan.head_tiles);
    steps.push_back({start, plan.head_tiles, plan.kernel, ctas_per_token, persistent_full ? 0 : grid_per_token,
                     persistent_full ? plan.grid_size : 0});
    const auto current = regime(start);
    if (regime(kMaxTokens) == current) break;
    int64_t same = start;
    int64_t next = kMaxTokens;
    while (next - same > 1) {
      const int64_t middle = same + (next - same) / 2;
      (regime(middle) == current ? same : next) = middle;
    }
    start = next;
  }
  const std::lock_guard<std::mutex> lock(mutex);
  cache.emplace(key, steps);
  return steps;
}

void check_prefill_plan_request(int64_t num_tokens, int64_t num_heads, int64_t topk, int64_t extra_topk) {
  TORCH_CHECK_VALUE(is_prefill_head_count(num_heads), "num_heads: expected 16, 32, ..., 128 (a prefill instance), got ",
                    num_heads);
  TORCH_CHECK_VALUE(num_tokens >= 0, "num_tokens: expected >= 0, got ", num_tokens);
  TORCH_CHECK_VALUE(num_tokens <= kMaxPrefillPlanTokens, "num_tokens: expected <= 2^56 = ", kMaxPrefillPlanTokens, ", got ", num_tokens);
  TORCH_CHECK_VALUE(topk >= 1, "topk: expected >= 1, got ", topk);
  TORCH_CHECK_VALUE(extra_topk >= 0, "extra_topk: expected >= 0, got ", extra_topk);
  const int64_t chunks = nvfp4::list_chunks(topk) + nvfp4::list_chunks(extra_topk);
  TORCH_CHECK_VALUE(chunks <= nvfp4::kMaxChunks, "topk/extra_topk: expected ceil(topk/64) + ceil(extra_topk/64) <= ",
                    nvfp4::kMaxChunks, ", got ", chunks);
}

}  // namespace cake
