// CPU prefill: one task per token. Each valid candidate row is dequantized once per token into
// fp32, then every block of heads runs a two-pass softmax over the rows (scores, max, exp2,
// weighted sum) and the sink is folded in (attention_cpu.h, shared with the decode).
#include "prefill_cpu.h"

#include <ATen/Parallel.h>

#include "attention_cpu.h"

namespace cake {

void sparse_mla_prefill_cpu(const PrefillArgs& args) {
  at::parallel_for(0, args.num_tokens, 1, [&](int64_t begin, int64_t end) {
    cpu::AttentionWorkspace ws(args.main.width + args.extra.width);
    for (int64_t t = begin; t < end; ++t) cpu::attend_token(args, t, cpu::gather_token_rows(args, t, ws), ws);
  });
}

}  // namespace cake
