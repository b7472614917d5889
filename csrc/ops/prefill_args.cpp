#include "prefill_args.h"

#include <c10/util/Exception.h>

#include "prefill_plan.h"

namespace cake {

void validate_prefill_inputs(AttentionInputs& inputs, PointerChecks pointers) {
  static const AttentionLimits limits{&is_prefill_head_count,
                                      "{16, 32, ..., 128} (multiple of 16) with a prefill instance",
                                      nvfp4::kMaxChunks, "16"};
  validate_attention_inputs(inputs, limits, pointers);
}

void validate_prefill_args(PrefillArgs& args, const PrefillTarget& target) {
  validate_prefill_inputs(args);
  args.plan = plan_prefill(args.num_tokens, args.num_heads, args.head_tiles, target);
}

}  // namespace cake
