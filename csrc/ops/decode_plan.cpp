#include "decode_plan.h"

#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include "../cuda/prefill_kernel_choice.h"
#include "prefill_plan.h"

namespace cake {

std::vector<int64_t> decode_head_tile_choices(int64_t num_heads) {
  if (!is_decode_head_count(num_heads)) return {};
  std::vector<int64_t> choices;
  const int64_t tiles = decode_head_tiles_per_token(num_heads);
  for (int64_t head_tiles = 1; head_tiles <= kMaxHeadTiles; head_tiles *= 2) {
    if (tiles % head_tiles == 0) choices.push_back(head_tiles);
  }
  return choices;
}

void check_decode_lists(int64_t topk, int64_t extra_topk, int64_t max_splits) {
  TORCH_CHECK_VALUE(topk >= 1, "topk: expected >= 1, got ", topk);
  TORCH_CHECK_VALUE(extra_topk >= 0, "extra_topk: expected >= 0, got ", extra_topk);
  TORCH_CHECK_VALUE(max_splits >= 1, "max_splits: expected >= 1, got ", max_splits);
  const int64_t chunks = decode_num_chunks(topk, extra_topk);
  const int64_t limit = decode_list_chunk_limit(max_splits);
  TORCH_CHECK_VALUE(chunks <= limit, "topk/extra_topk: expected ceil(topk/64) + ceil(extra_topk/64) <= 16 * max_splits = ",
                    limit, ", got ", chunks);
}

void check_decode_request(int64_t num_tokens, int64_t num_heads, int64_t topk, int64_t extra_topk, int64_t max_splits,
                          std::optional<int64_t> num_sms) {
  TORCH_CHECK_VALUE(num_tokens >= 0, "num_tokens: expected >= 0, got ", num_tokens);
  TORCH_CHECK_VALUE(is_decode_head_count(num_heads), "num_heads: expected 8, 16, ..., 128 (a multiple of 8), got ",
                    num_heads);
  check_decode_lists(topk, extra_topk, max_splits);
  if (num_sms.has_value()) TORCH_CHECK_VALUE(*num_sms >= 1, "num_sms: expected >= 1, got ", *num_sms);
}

int64_t plan_decode_head_tiles(int64_t num_heads, std::optional<int64_t> head_tiles, int64_t max_head_tiles) {
  const std::vector<int64_t> choices = decode_head_tile_choices(num_heads);
  TORCH_CHECK_VALUE(!choices.empty(), "num_heads: expected 8, 16, ..., 128 (a multiple of 8), got ", num_heads);
  if (!head_tiles.has_value()) {
    int64_t largest = choices.front();  // 1
    for (const int64_t choice : choices) {
      if (choice <= max_head_tiles) largest = choice;
    }
    return largest;
  }
  TORCH_CHECK_VALUE(std::find(choices.begin(), choices.end(), *head_tiles) != choices.end(), "head_tiles: expected one "
                    "of ", c10::IntArrayRef(choices), " for H = ", num_heads, " in the decode, got ", *head_tiles);
  TORCH_CHECK_VALUE(*head_tiles <= max_head_tiles, "head_tiles: ", *head_tiles, " needs more shared memory per block "
                    "than this device has (it runs at most ", max_head_tiles, ")");
  return *head_tiles;
}

namespace {

// The work items a token gives a plan of `head_tiles` under `rules`: the small-heads split form's
// units where the rules count them, else the head blocks.
int64_t decode_items_per_token(const DecodeSplitRules& rules, int64_t num_heads, int64_t head_tiles) {
  return rules.split_items_per_token > 0 ? rules.split_items_per_token : decode_head_blocks(num_heads, head_tiles);
}

}  // namespace

__int128 decode_split_cost(__int128 items, int64_t num_chunks, int64_t num_sms, int64_t num_splits) {
  // The waves in two parts, so that no product passes 2^127 (items / num_sms is below the items a
  // token where the model runs, at most 8).
  const __int128 whole = items / num_sms, rest = items % num_sms;
  const __int128 waves = whole * num_splits + (rest * num_splits + num_sms - 1) / num_sms;
  const int64_t chunks_per_split = (num_chunks + num_splits - 1) / num_splits;
  return waves * (chunks_per_split + kDecodeItemCostChunks) + (num_splits > 1 ? kDecodeMergeCostChunks : 0);
}

DecodePlan plan_decode(int64_t num_tokens, int64_t num_heads, int64_t num_chunks, int64_t num_sms, int64_t max_splits,
                       int64_t head_tiles, std::optional<int64_t> num_splits, const DecodeSplitRules& rules) {
  TORCH_CHECK_VALUE(rules.min_chunks_per_split >= 1, "min_chunks_per_split: expected >= 1, got ",
                    rules.min_chunks_per_split);
  TORCH_CHECK_VALUE(rules.max_unsplit_chunks >= 1, "max_unsplit_chunks: expected >= 1, got ", rules.max_unsplit_chunks);
  const DecodeSplitBounds bounds = decode_split_bounds(num_chunks, max_splits);  // what a call may ask for
  const int64_t fits = bounds.fits, most = bounds.most;
  DecodePlan plan{head_tiles, 0, 0};
  if (num_splits.has_value()) {
    TORCH_CHECK_VALUE(*num_splits >= fits && *num_splits <= most, "num_splits: expected ", fits, " to ", most,
                      " for ", num_chunks, " chunks of 64 candidates (at most 32 chunks per split, at least one, "
                      "and at most max_splits = ", max_splits, " splits), got ", *num_splits);
    plan.num_splits = *num_splits;
    plan.chunks_per_block = (num_chunks + plan.num_splits - 1) / plan.num_splits;
    return plan;
  }
  // The planner's fewest: one split only where it may hold the lists (max_unsplit_chunks), else two
  // (where max_splits allows: with 16 or 32 for max_unsplit_chunks, the lists' capacity of 16 x
  // max_splits chunks leaves room for two).
  const int64_t fewest = fits == 1 && num_chunks > rules.max_unsplit_chunks ? std::min<int64_t>(2, most) : fits;
  if (num_tokens == 0) {
    plan.num_splits = fewest;
  } else {
    // At most C / min_chunks_per_split splits, so that each holds that many chunks, but never
    // fewer than `fewest` (a split holds 32 at most).
    const int64_t by_chunks = std::max<int64_t>(1, num_chunks / rules.min_chunks_per_split);
    const int64_t planned_most = std::max(fewest, std::min(most, by_chunks));
    const int64_t items_per_token = decode_items_per_token(rules, num_heads, head_tiles);
    const int64_t unsplit_items_per_token = rules.unsplit_grid_items > 0 ? rules.unsplit_grid_items : items_per_token;
    plan.num_splits = fewest;
    if (__int128(num_tokens) * unsplit_items_per_token < num_sms) {  // less than a wave unsplit: the cheapest count
      const __int128 items = __int128(num_tokens) * items_per_token;
      // In hundredths of the model's unit, for the one-split form's share.
      const auto cost_of = [&](int64_t splits) -> __int128 {
        if (splits == 1 && rules.unsplit_grid_items > 0) {
          return rules.unsplit_cost_percent *
                 decode_split_cost(__int128(num_tokens) * rules.unsplit_grid_items, num_chunks, num_sms, 1);
        }
        return 100 * decode_split_cost(items, num_chunks, num_sms, splits);
      };
      // The smallest of the least costs is a count ceil(C / q) for some q = 1 .. 32: for a count n
      // whose splits hold at most q = ceil(C / n) chunks, n' = ceil(C / q) <= n splits hold at most
      // q too, in no more waves and with no more merge, so n' costs no more than n (and n' >= 2
      // when n >= 2, so a fewest of 2 keeps this). Counts in increasing order, the first of equal
      // costs kept.
      __int128 best_cost = -1;
      for (int64_t q = kMaxChunksPerSplit; q >= 1; --q) {
        const int64_t splits = std::clamp((num_chunks + q - 1) / q, fewest, planned_most);
        const __int128 cost = cost_of(splits);
        if (best_cost < 0 || cost < best_cost) best_cost = cost, plan.num_splits = splits;
      }
    }
  }
  plan.chunks_per_block = (num_chunks + plan.num_splits - 1) / plan.num_splits;
  return plan;
}

namespace {

// The kernel family that runs a call's splits of `head_tiles`: a Hopper kernel (the 64-head or the
// small-heads one) or the portable kernel (also on every target outside the Hopper family).
PrefillKernel decode_split_family(const PrefillTarget& target, int64_t num_heads, int64_t head_tiles) {
  return target.family == PrefillKernel::kHopper ? cuda::hopper_family_kernel(target.hopper_small, num_heads, head_tiles)
                                                 : PrefillKernel::kPortable;
}

}  // namespace

DecodeSplitRules decode_split_rules(const PrefillTarget& target, int64_t num_heads, int64_t head_tiles) {
  const PrefillKernel family = decode_split_family(target, num_heads, head_tiles);
  DecodeSplitRules rules;
  if (family != PrefillKernel::kPortable) rules.min_chunks_per_split = cuda::kHopperDecodeMinChunksPerSplit;
  if (family != PrefillKernel::kHopperSmall) return rules;
  // The small-heads kernel's split form runs units of G heads (G = 32 where it divides H and the
  // head tile is 2 or more, else 16: cuda::launch_sparse_mla_decode_hopper_small), ceil(H / G) a token.
  const int64_t unit_heads = cuda::hopper_small::decode_unit_heads(num_heads, head_tiles);
  rules.split_items_per_token = (num_heads + unit_heads - 1) / unit_heads;
  if (is_prefill_head_count(num_heads)) {
    // One split runs the prefill's launches (run_decode_cuda): one grid, or two one after the
    // other (a 64-head item and a unit of the rest's heads a token), costed against the splits'
    // units by their chunk weights.
    if (cuda::hopper_small_runs_two_grids(num_heads)) {
      const cuda::SmallHeadsGrids grids = cuda::hopper_small_grids(num_heads);
      const int64_t narrow_heads = cuda::hopper_small_narrow_heads(num_heads);
      rules.unsplit_grid_items = std::max<int64_t>(grids.wide_items, grids.narrow_units);
      rules.unsplit_cost_percent =
          100 * (cuda::hopper_chunk_weight(cuda::HopperPrefillLayout::kHeads) + cuda::hopper_chunk_weight(narrow_heads)) /
          cuda::hopper_chunk_weight(unit_heads);
    }
  }
  return rules;
}

namespace {

// A plan's time in the split rule's model, in hundredths of a 16-head unit's chunk: its work items'
// waves (decode_split_cost) times the chunk weight of the heads each item runs, so that plans of
// different head tiles (64-head blocks, the small-heads kernel's 32- or 16-head units) compare.
__int128 decode_plan_weighted_cost(const PrefillTarget& target, int64_t num_tokens, int64_t num_heads,
                                   int64_t num_chunks, const DecodePlan& plan) {
  const DecodeSplitRules rules = decode_split_rules(target, num_heads, plan.head_tiles);
  const int64_t item_heads = rules.split_items_per_token > 0
                                 ? cuda::hopper_small::decode_unit_heads(num_heads, plan.head_tiles)
                                 : nvfp4::kHeadsPerTile * plan.head_tiles;
  const __int128 items = __int128(num_tokens) * decode_items_per_token(rules, num_heads, plan.head_tiles);
  return cuda::hopper_chunk_weight(item_heads) * decode_split_cost(items, num_chunks, target.num_sms, plan.num_splits);
}

}  // namespace

DecodePlan plan_decode_on_target(const PrefillTarget& target, int64_t num_tokens, int64_t num_heads,
                                 int64_t num_chunks, int64_t max_splits, std::optional<int64_t> head_tiles,
                                 std::optional<int64_t> num_splits) {
  const auto plan_with = [&](int64_t tiles) {
    return plan_decode(num_tokens, num_heads, num_chunks, target.num_sms, max_splits, tiles, num_splits,
                       decode_split_rules(target, num_heads, tiles));
  };
  const int64_t tiles = plan_decode_head_tiles(num_heads, head_tiles, target.max_head_tiles);
  const DecodePlan plan = plan_with(tiles);
  // Narrowing to 16-head units: only where no head tile was asked for, the 64-head kernel runs the
  // planned blocks, and they are less than a wave of the SMs unsplit (the split rule's domain).
  // (Head tile 2, 32-head units, measured slower than both at every row where it was timed.)
  constexpr int64_t kNarrowTiles = 1;
  const bool narrows = !head_tiles.has_value() && num_tokens > 0 &&
                       decode_split_family(target, num_heads, tiles) == PrefillKernel::kHopper &&
                       __int128(num_tokens) * decode_head_blocks(num_heads, tiles) < target.num_sms;
  if (!narrows) return plan;
  // Only onto the small-heads kernel's split form: several splits of two chunks or more (one-chunk
  // splits would run the portable kernel's body, cuda::select_decode_split_kernel; one split, the
  // prefill's small-heads kernels, was not measured against 64-head blocks).
  if (decode_split_family(target, num_heads, kNarrowTiles) != PrefillKernel::kHopperSmall) return plan;
  const DecodePlan narrow = plan_with(kNarrowTiles);
  if (narrow.num_splits <= 1 || !cuda::decode_splits_fit_hopper(narrow.num_splits, narrow.chunks_per_block)) {
    return plan;
  }
  return decode_plan_weighted_cost(target, num_tokens, num_heads, num_chunks, narrow) <
                 decode_plan_weighted_cost(target, num_tokens, num_heads, num_chunks, plan)
             ? narrow
             : plan;
}

std::vector<DecodePlanStep> decode_plan_steps_on_target(const PrefillTarget& target, int64_t num_heads,
                                                        int64_t num_chunks, int64_t max_splits,
                                                        std::optional<int64_t> head_tiles,
                                                        std::optional<int64_t> num_splits) {
  // From num_tokens = num_sms on, every token count has at least num_sms work items, so the plan
  // is the fewest splits at the largest head tile and stays; scan up to there and keep where it
  // changes.
  std::vector<DecodePlanStep> steps;
  const auto same = [](const DecodePlan& a, const DecodePlan& b) {
    return a.head_tiles == b.head_tiles && a.num_splits == b.num_splits && a.chunks_per_block == b.chunks_per_block;
  };
  for (int64_t num_tokens = 0; num_tokens <= target.num_sms; ++num_tokens) {
    const DecodePlan plan =
        plan_decode_on_target(target, num_tokens, num_heads, num_chunks, max_splits, head_tiles, num_splits);
    if (steps.empty() || !same(steps.back().plan, plan)) steps.push_back({num_tokens, plan});
  }
  return steps;
}

int64_t decode_scratch_splits(int64_t num_chunks, std::optional<int64_t> max_splits) {
  return max_splits.has_value() ? std::min(num_chunks, *max_splits) : num_chunks;
}

int64_t decode_scratch_bytes(int64_t num_tokens, int64_t num_heads, int64_t num_chunks,
                             std::optional<int64_t> max_splits) {
  int64_t bytes = 0;
  const bool overflow =
      __builtin_mul_overflow(decode_scratch_splits(num_chunks, max_splits), num_tokens, &bytes) ||
      __builtin_mul_overflow(bytes, num_heads * (nvfp4::kHeadDim + 1) * int64_t(sizeof(float)), &bytes);
  TORCH_CHECK_VALUE(!overflow, "num_tokens/topk/max_splits: the scratch of ", num_tokens, " tokens, ",
                    decode_scratch_splits(num_chunks, max_splits), " splits would pass 2^63 bytes");
  return bytes;
}

bool prefill_serves(int64_t num_heads, int64_t num_chunks) {
  return is_prefill_head_count(num_heads) && num_chunks <= nvfp4::kMaxChunks;
}

int64_t decode_crossover_items_percent(int64_t num_heads) {
  if (num_heads % kWideHeadBlock == 0) return kDecodeCrossoverItemsPercentWide;
  return cuda::hopper_small_runs_two_grids(num_heads) ? kDecodeCrossoverItemsPercentTwoGrids
                                                      : kDecodeCrossoverItemsPercentNarrow;
}

AttentionOp select_attention_op(int64_t num_tokens, int64_t num_heads, int64_t num_chunks, int64_t num_sms) {
  if (!prefill_serves(num_heads, num_chunks)) return AttentionOp::kDecode;
  // In 128 bits: the planning functions take any token and SM count.
  const __int128 prefill_items = __int128(num_tokens) * prefill_items_per_token(num_heads, 1);
  return prefill_items * 100 < __int128(decode_crossover_items_percent(num_heads)) * num_sms ? AttentionOp::kDecode
                                                                                   : AttentionOp::kPrefill;
}

int64_t decode_token_limit(int64_t num_heads, int64_t num_chunks, int64_t num_sms) {
  constexpr int64_t kMaxTokens = int64_t(1) << 40;
  if (select_attention_op(kMaxTokens, num_heads, num_chunks, num_sms) == AttentionOp::kDecode) return -1;
  if (select_attention_op(0, num_heads, num_chunks, num_sms) == AttentionOp::kPrefill) return 0;
  int64_t decode = 0;  // select gives the decode here ...
  int64_t prefill = kMaxTokens;  // ... and the prefill here
  while (prefill - decode > 1) {
    const int64_t middle = decode + (prefill - decode) / 2;
    (select_attention_op(middle, num_heads, num_chunks, num_sms) == AttentionOp::kDecode ? decode : prefill) = middle;
  }
  return prefill;
}

}  // namespace cake
