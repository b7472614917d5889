// The decode planner: head blocks, how many splits (CTAs) share a token's candidates, the scratch
// that covers every plan of a shape, and which op (decode or prefill) serves a shape. The only
// implementation of these rules: the decode op uses it when `head_tiles` / `num_splits` are None,
// and Python asks it through torch_ops._C (torch_ops/decode_planner.py).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "../format/nvfp4_format.h"

namespace cake {

struct PrefillTarget;  // prefill_plan.h: the device a plan is for

// Head counts: 8, 16, 24, ..., 128. A head block holds `head_tiles` sixteen-head tiles; when
// H % 16 == 8 the last tile of the last block holds 8 heads (the rest are padding).
constexpr int64_t kDecodeHeadStep = 8;
constexpr int64_t kMaxDecodeHeads = 128;
// The lists may hold this many chunks of 64 for each split max_splits allows (16 x max_splits:
// 16384 candidates at the default).
constexpr int64_t kListChunksPerSplit = nvfp4::kMaxChunks;
// 16 x max_splits (max_splits >= 1), saturating: a huge max_splits means no limit, not an overflow.
constexpr int64_t decode_list_chunk_limit(int64_t max_splits) {
  return max_splits > std::numeric_limits<int64_t>::max() / kListChunksPerSplit ? std::numeric_limits<int64_t>::max()
                                                                                 : kListChunksPerSplit * max_splits;
}
// A split (one CTA's share of a token's candidates, one work item) holds at most this many. The
// kernels walk any number of chunks an item; twice the lists' share lets a list of 17..32 chunks
// run unsplit where its work items fill the SMs anyway (no partials, no merge: docs/planner.md).
constexpr int64_t kMaxChunksPerSplit = 2 * nvfp4::kMaxChunks;
constexpr int64_t kDefaultMaxSplits = 16;

// The split counts a call of `num_chunks` chunks may ask for: at least ceil(C / 32) (a split holds
// kMaxChunksPerSplit at most), at most min(max_splits, C) (each split at least one chunk).
struct DecodeSplitBounds {
  int64_t fits;
  int64_t most;
};
constexpr DecodeSplitBounds decode_split_bounds(int64_t num_chunks, int64_t max_splits) {
  return {(num_chunks + kMaxChunksPerSplit - 1) / kMaxChunksPerSplit, max_splits < num_chunks ? max_splits : num_chunks};
}

// The crossover between the ops, set from the H200 grid of both ops (docs/planner.md): the decode
// serves a shape when the prefill's largest possible launch (one work item per token and sixteen
// heads, head_tiles 1) has fewer work items than a percentage of the SM count. The percentage
// depends on the head count. For H a multiple of 64 the decode's splits run the 64-head Hopper
// kernel, and where the planner stops splitting the decode runs the prefill's own kernel and plan,
// so the ops tie from there on; below that the splits share a token's list out over more CTAs. In
// the grid of 2026-12-03 (512 and 1024 candidates) the decode took 0.37-0.98x the prefill's time
// up to ~194% of the SMs (0.81-0.98x there: T = 64 at H = 64, T = 32 at H = 128) and tied at
// ~388%. For the other head counts the prefill runs the small-heads kernel over units of 16 or 32
// heads, which fill the SMs sooner: at H = 16 the decode took 0.82x (1024 candidates) and 0.96x (512) at ~48% of the
// SMs (T = 64), and 2.2-2.6x the prefill's time at ~97% (T = 128). At H = 80 and 96 the prefill
// runs two grids one after the other (the 64-head kernel over heads 0..63, then the small-heads
// kernel over the rest), as the decode's one split does, and the decode splits into one grid below
// 40-53 (H = 80) and 67-74 (H = 96) tokens, by the list width (DecodeSplitRules::unsplit_cost_percent): measured at
// 1024 candidates, the decode took 0.50-0.90x the prefill's time up to T = 45 at H = 80 (~170% of
// the SMs) and 0.81x at T = 50, H = 96 (~230%), and its one split is the prefill's launches, so
// 300% there.
constexpr int64_t kDecodeCrossoverItemsPercentWide = 200;      // H a multiple of 64 (kWideHeadBlock)
constexpr int64_t kDecodeCrossoverItemsPercentTwoGrids = 300;  // H = 80, 96 (cuda::hopper_small_runs_two_grids)
constexpr int64_t kDecodeCrossoverItemsPercentNarrow = 50;     // the other head counts
constexpr int64_t kWideHeadBlock = 4 * nvfp4::kHeadsPerTile;  // four head tiles: the 64-head kernel's item
// The percentage for a head count the prefill takes (a multiple of 16).
int64_t decode_crossover_items_percent(int64_t num_heads);

inline bool is_decode_head_count(int64_t num_heads) {
  return num_heads >= kDecodeHeadStep && num_heads <= kMaxDecodeHeads && num_heads % kDecodeHeadStep == 0;
}

// Sixteen-head tiles per token, the last one possibly half full.
inline int64_t decode_head_tiles_per_token(int64_t num_heads) {
  return (num_heads + nvfp4::kHeadsPerTile - 1) / nvfp4::kHeadsPerTile;
}

// The head tiles a block may hold: 1, 2 and 4 where they divide the token's tiles, so that every
// block holds the same number of tiles ([] for a head count the decode rejects).
std::vector<int64_t> decode_head_tile_choices(int64_t num_heads);

// Head blocks per token for an allowed head tile.
inline int64_t decode_head_blocks(int64_t num_heads, int64_t head_tiles) {
  return decode_head_tiles_per_token(num_heads) / head_tiles;
}

// Chunks of 64 of a token's candidate lists (each list rounded up on its own).
inline int64_t decode_num_chunks(int64_t topk, int64_t extra_topk) {
  return nvfp4::list_chunks(topk) + nvfp4::list_chunks(extra_topk);
}

struct DecodePlan {
  int64_t head_tiles;
  int64_t num_splits;        // CTAs per (token, head block), each over a share of the chunks
  int64_t chunks_per_block;  // the most chunks one split holds: ceil(num_chunks / num_splits) <= 32
};

// The checks of candidate-list widths described by ints (the op checks the indices): ValueError
// naming topk, extra_topk or max_splits; at most 16 * max_splits chunks in all (kListChunksPerSplit).
void check_decode_lists(int64_t topk, int64_t extra_topk, int64_t max_splits);

// The checks of a request that does not come from tensors (the op checks these on q and the
// indices): ValueError naming num_tokens, num_heads, topk, extra_topk, max_splits or num_sms.
// `num_sms` is not checked when it is nullopt.
void check_decode_request(int64_t num_tokens, int64_t num_heads, int64_t topk, int64_t extra_topk, int64_t max_splits,
                          std::optional<int64_t> num_sms);

// The head tile: the explicit one, checked (ValueError naming head_tiles: it must be a choice for
// H, and at most `max_head_tiles`, the largest the device's shared memory runs), or the largest
// choice up to `max_head_tiles` (1 is always one): a decode CTA is bound by reading the cache, and
// a larger block dequantizes each row for more heads. The op's planner then narrows it on the
// Hopper kernels where the call launches few CTAs (plan_decode_on_target).
int64_t plan_decode_head_tiles(int64_t num_heads, std::optional<int64_t> head_tiles, int64_t max_head_tiles);

// The split rule's cost model, in the time of one chunk (a 64-candidate block) on one SM. A plan
// of S splits over `items` (token, head block) pairs runs items * S work items on num_sms SMs, in
// ceil(items * S / num_sms) waves, each as long as its items' chunks, ceil(C / S), plus a work
// item's fixed cost (its Q and pipeline fill, the epilogue's partial, about 3 chunks on the H200:
// forced split counts at T = 1 and 8, H = 64 take ~2.5 us a chunk plus ~8 us a work item,
// docs/benchmarks.md); a plan that splits adds the merge (its launch and its pass over the
// partials, about a chunk at these sizes). It models one split kernel: on the H200 the forced
// counts of two chunks a split or more, which run the Hopper kernels, order as it does at each row
// timed (docs/planner.md); one-chunk splits run the slower portable body there, which the cost does
// not see, and min_chunks_per_split = 2 leaves them out.
constexpr int64_t kDecodeItemCostChunks = 3;
constexpr int64_t kDecodeMergeCostChunks = 1;
// In 128 bits: a request described by ints may hold any counts, and the model's item count
// (T x items a token, T below the SM count) may pass 64 bits.
__int128 decode_split_cost(__int128 items, int64_t num_chunks, int64_t num_sms, int64_t num_splits);

// What the kernels that run a call's splits want of a planned split (decode_split_rules).
struct DecodeSplitRules {
  // The fewest chunks a planned split holds (>= 1): where the call's splits run a Hopper kernel
  // (the 64-head kernel, or the small-heads kernel's split form on a device that runs it), the
  // chunks from which that kernel takes them (cuda::kHopperDecodeMinChunksPerSplit, 2), since
  // below that the call falls back to the portable body, which the H200 ran slower than half as
  // many two-chunk splits on the Hopper kernel (T = 8, H = 64, 1024 candidates: 25.2 us in 16
  // splits against 19.9 in 8, docs/benchmarks.md); 1 elsewhere (the CPU and the portable kernel
  // take one-chunk splits).
  int64_t min_chunks_per_split = 1;
  // The most chunks a planned one-split decode holds (>= 1). The op's rules leave it at
  // kMaxChunksPerSplit (32) on every target: every kernel family runs one split of up to 32 chunks
  // itself, and at the lists of 32 chunks timed on the H200 one split was the faster where the
  // cost model picks it (H = 8 .. 112; at H = 80 and 96 with unsplit_cost_percent below, one row at
  // its crossover aside; docs/planner.md). A lower value is a planning knob for callers
  // (plan_splits).
  int64_t max_unsplit_chunks = kMaxChunksPerSplit;
  // How a one-split call runs where that is not one grid of T x head blocks work items: grids of
  // T x unsplit_grid_items items each (0: the one grid of the head blocks), together costing
  // unsplit_cost_percent of one grid of the splits' work items of that count. On the Hopper family
  // a one-split call of H = 80 or 96 runs the prefill's two launches one after the other
  // (cuda::hopper_small_grids: the 64-head kernel over heads 0..63, then the small-heads kernel's
  // units over the rest), a work item a token each, and a 64-head item's chunk takes longer than a
  // split unit's (cuda::hopper_chunk_weight); below a wave of tokens the planner weighs that against
  // the splits, which run in one grid (H200, 2048 candidates: T = 30, H = 80 in one split 142 us,
  // in four 91; T = 60 in one split 144, in two 156; docs/planner.md).
  int64_t unsplit_grid_items = 0;
  int64_t unsplit_cost_percent = 100;
  // The work items a token gives each split count, where not the head blocks (0): the small-heads
  // kernel's split form runs units of 32 heads where 32 divides H and the head tile is 2 or more, else 16
  // (H = 120 at head tile 4: eight units a token, not two blocks).
  int64_t split_items_per_token = 0;
};

// The rules on `target` for a call of `num_heads` in blocks of `head_tiles`.
DecodeSplitRules decode_split_rules(const PrefillTarget& target, int64_t num_heads, int64_t head_tiles);

// The splits for a checked request: an explicit `num_splits` is checked (ValueError naming it:
// it must give every split at least one chunk and at most 32, and not exceed max_splits).
// Otherwise, within [fewest, most] with fewest = ceil(num_chunks / 32), raised to 2 (max_splits
// allowing) when that is one split and num_chunks > rules.max_unsplit_chunks, and most =
// max(fewest, min(max_splits, max(1, num_chunks / rules.min_chunks_per_split))): with no token, or
// with the one-split form's work items filling the SMs already (num_tokens * head blocks, or
// num_tokens * rules.unsplit_grid_items where the rules give it), fewest; else the count of least
// decode_split_cost, the smallest of equal ones (one split's cost, where the rules give its grids:
// rules.unsplit_cost_percent of that of T x unsplit_grid_items items). A planned split thus holds at least
// rules.min_chunks_per_split chunks unless the lists are shorter (a larger value is capped by the
// 32 chunks a split holds at most). ValueError naming a rule below 1.
DecodePlan plan_decode(int64_t num_tokens, int64_t num_heads, int64_t num_chunks, int64_t num_sms, int64_t max_splits,
                       int64_t head_tiles, std::optional<int64_t> num_splits, const DecodeSplitRules& rules);

// The plan for every token count at once, for callers holding a symbolic token count
// (torch.compile): from `min_tokens` on (up to the next step's), the plan is the step's.
struct DecodePlanStep {
  int64_t min_tokens;
  DecodePlan plan;
};

// The decode op's whole plan on `target` (the device its call runs on): the head tile
// (plan_decode_head_tiles) and the splits (plan_decode under decode_split_rules), checked as those
// check them. Where the call names no head tile, the target runs the planned 64-head blocks on the
// 64-head Hopper kernel and T x those blocks are less than a wave of the SMs, the plan of head
// tile 1 (16-head units on the small-heads kernel's split form) is taken instead where it splits
// into two chunks or more a split and the split rule's model costs it less: decode_split_cost over
// each plan's work items times the chunk weight of the heads an item runs
// (cuda::hopper_chunk_weight: 142 for 64 heads, 100 for 16). Narrower units mean more CTAs, each
// dequantizing its rows for fewer heads and writing a smaller partial. Measured on the H200
// (docs/planner.md, "16-head units for few CTAs"): T = 1, H = 64, 2048 candidates 15.4 us at head
// tile 1 against 18.0 at 2 and 19.6 at 4; T = 8, H = 64, 1024 19.0 (head tile 1, 4 splits)
// against 20.1 (4, 8 splits) and 20.5 (2, 8 splits). Head tile 2 (32-head units) was the slower
// narrowing at every row timed, so it is not a candidate.
DecodePlan plan_decode_on_target(const PrefillTarget& target, int64_t num_tokens, int64_t num_heads,
                                 int64_t num_chunks, int64_t max_splits, std::optional<int64_t> head_tiles,
                                 std::optional<int64_t> num_splits);

// plan_decode_on_target for every token count (the head tile may change from one step to the
// next).
std::vector<DecodePlanStep> decode_plan_steps_on_target(const PrefillTarget& target, int64_t num_heads,
                                                        int64_t num_chunks, int64_t max_splits,
                                                        std::optional<int64_t> head_tiles,
                                                        std::optional<int64_t> num_splits);

// Splits that cover every plan of a shape: min(num_chunks, max_splits) (every chunk in a split
// of its own at most), or num_chunks without max_splits.
int64_t decode_scratch_splits(int64_t num_chunks, std::optional<int64_t> max_splits);
// Bytes of mid_out [S, T, H, 512] and mid_lse [S, T, H], fp32, for S = decode_scratch_splits.
int64_t decode_scratch_bytes(int64_t num_tokens, int64_t num_heads, int64_t num_chunks,
                             std::optional<int64_t> max_splits);

enum class AttentionOp { kDecode, kPrefill };
inline const char* attention_op_name(AttentionOp op) { return op == AttentionOp::kDecode ? "decode" : "prefill"; }

// Whether the prefill runs a shape: H a multiple of 16 (up to 128) and at most 16 chunks.
bool prefill_serves(int64_t num_heads, int64_t num_chunks);

// Which op serves a checked shape on `num_sms` SMs: the decode when the prefill cannot run it
// (H not a multiple of 16, more than 16 chunks) or, by the crossover above, when
// T * H / 16 < num_sms * decode_crossover_items_percent(H) / 100; else the prefill.
AttentionOp select_attention_op(int64_t num_tokens, int64_t num_heads, int64_t num_chunks, int64_t num_sms);

// The same choice for every token count: the decode below the returned count, the prefill from
// it on; -1 when the prefill never serves the shape. (The choice only moves from decode to
// prefill as T grows; found by bisecting select_attention_op.)
int64_t decode_token_limit(int64_t num_heads, int64_t num_chunks, int64_t num_sms);

}  // namespace cake
