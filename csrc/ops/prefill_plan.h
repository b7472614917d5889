// Head-tile planning for the prefill kernel. The thresholds below are the single source of truth:
// the C++ op uses them when `head_tiles` is None and the Python planner reads the same table
// through `torch_ops._C.prefill_plan_table()` (see torch_ops/planner.py).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace cake {

// Prefill instances exist for 16..128 heads in steps of 16.
inline bool is_prefill_head_count(int64_t num_heads) {
  return num_heads >= 16 && num_heads <= 128 && num_heads % 16 == 0;
}

// Sixteen-head tiles one work item may hold: 1 always, 2 when H % 32 == 0, 4 when H % 64 == 0.
inline std::vector<int64_t> prefill_head_tile_choices(int64_t num_heads) {
  if (!is_prefill_head_count(num_heads)) return {};
  std::vector<int64_t> choices{1};
  if (num_heads % 32 == 0) choices.push_back(2);
  if (num_heads % 64 == 0) choices.push_back(4);
  return choices;
}

// A larger head tile shares each gathered and dequantized row among more heads, but makes fewer
// work items (tokens x head blocks). Use head tile `ht` only when it still gives at least
// `min_items_percent` / 100 items per SM; otherwise fall back to the next smaller choice.
// One table per CUDA kernel family, measured on the H200 (docs/planner.md):
//   - portable kernel (and the CPU): 4 tiles win from ~0.9 items per SM up, 2 tiles beat 1 tile
//     already at ~1 item per SM;
//   - Hopper kernel (serves 4 tiles, i.e. 64 heads per CTA, on sm_90): it beats the portable
//     kernel's 1 and 2 tiles at every T measured, down to 0.5 items per SM (T = 64, H = 64), so
//     its threshold is 0. Head counts that are not a multiple of 64 run the portable kernel.
struct HeadTileThreshold {
  int64_t head_tiles;
  int64_t min_items_percent;  // of the SM count
};
inline const std::vector<HeadTileThreshold>& prefill_plan_table(bool hopper = false) {
  static const std::vector<HeadTileThreshold> portable{{2, 50}, {4, 90}};
  static const std::vector<HeadTileThreshold> hopper_kernel{{2, 50}, {4, 0}};
  return hopper ? hopper_kernel : portable;
}

inline int64_t prefill_num_items(int64_t num_tokens, int64_t num_heads, int64_t head_tiles) {
  return num_tokens * (num_heads / (16 * head_tiles));
}

// Returns the head tile choice for the shape; 0 when the head count has no prefill instance.
// `hopper`: the device runs the Hopper kernel for 4 tiles (its table applies).
inline int64_t plan_prefill_head_tiles(int64_t num_tokens, int64_t num_heads, int64_t num_sms, bool hopper = false) {
  const std::vector<int64_t> choices = prefill_head_tile_choices(num_heads);
  if (choices.empty()) return 0;
  for (auto it = choices.rbegin(); it != choices.rend(); ++it) {
    const int64_t head_tiles = *it;
    if (head_tiles == 1) return 1;
    for (const HeadTileThreshold& threshold : prefill_plan_table(hopper)) {
      if (threshold.head_tiles == head_tiles &&
          prefill_num_items(num_tokens, num_heads, head_tiles) * 100 >= threshold.min_items_percent * num_sms) {
        return head_tiles;
      }
    }
  }
  return 1;
}

// The plan limited to the largest head tile the device can run (its compiled instances' shared
// memory; see cuda/portable/prefill_variants.h). Choices nest (1 | 2 | 4), so the minimum is one.
inline int64_t cap_head_tiles(int64_t head_tiles, int64_t max_head_tiles) {
  return head_tiles < max_head_tiles ? head_tiles : max_head_tiles;
}

}  // namespace cake
