#include "fake_checks.h"

#include "prefill_args.h"
#include "prefill_plan.h"

namespace cake {

void check_call_without_data(bool decode, DecodeArgs& args) {
  if (!decode) {
    validate_prefill_inputs(args, PointerChecks::kWithoutData);
    if (args.head_tiles.has_value()) check_prefill_head_tile_choice(args.num_heads, *args.head_tiles);
    return;
  }
  validate_decode_inputs(args, args.max_splits, PointerChecks::kWithoutData);
  const int64_t tiles = plan_decode_head_tiles(args.num_heads, args.head_tiles, kMaxHeadTiles);
  if (args.num_splits.has_value()) {
    // That path of plan_decode reads none of a device's split rules.
    args.plan = plan_decode(args.num_tokens, args.num_heads, args.num_chunks(), /*num_sms=*/1, args.max_splits, tiles,
                            args.num_splits, DecodeSplitRules{});
    validate_decode_scratch(args, PointerChecks::kWithoutData);
  } else {
    validate_decode_scratch(args, decode_split_range(args), PointerChecks::kWithoutData);
  }
}

}  // namespace cake
