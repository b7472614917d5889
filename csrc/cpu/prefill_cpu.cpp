// CPU prefill: one task per token. Each valid candidate row is dequantized once per token into
// fp32, then every block of heads runs a two-pass softmax over the rows (scores, max, exp2,
// weighted sum; attention_cpu.h) and the sink is folded in.
#include "prefill_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>

#include "attention_cpu.h"

namespace cake {

void sparse_mla_prefill_cpu(const PrefillArgs& args) {
  using cpu::kHeadBlock;
  using nvfp4::kHeadDim;
  const int64_t num_heads = args.num_heads;
  const float score_scale = score_scale_or_nan(float(args.sm_scale) * cpu::kLog2e);  // logits in base 2
  const c10::BFloat16* q = args.q.data_ptr<c10::BFloat16>();
  c10::BFloat16* output = args.output.data_ptr<c10::BFloat16>();
  float* out_lse = args.out_lse.data_ptr<float>();
  const float* sink = args.sink.defined() ? args.sink.data_ptr<float>() : nullptr;
  const float lse_scale = float(args.lse_scale);

  at::parallel_for(0, args.num_tokens, 1, [&](int64_t begin, int64_t end) {
    cpu::AttentionWorkspace ws(args.main.width + args.extra.width);
    for (int64_t t = begin; t < end; ++t) {
      int64_t num_rows = cpu::gather_valid_rows(args.main, t, 0, args.main.width, ws.rows.data());
      num_rows += cpu::gather_valid_rows(args.extra, t, 0, args.extra.width, ws.rows.data() + num_rows * kHeadDim);
      for (int64_t h0 = 0; h0 < num_heads; h0 += kHeadBlock) {
        const int block_heads = int(std::min<int64_t>(kHeadBlock, num_heads - h0));
        float row_max[kHeadBlock];
        float row_sum[kHeadBlock];
        cpu::attend_head_block(q + (t * num_heads + h0) * kHeadDim, block_heads, score_scale, num_rows, ws, row_max,
                               row_sum);
        for (int h = 0; h < block_heads; ++h) {
          const int64_t head = h0 + h;
          // row_sum is 0 for a token with no valid candidate (finalize_softmax: empty) and NaN for
          // a row with a NaN or +inf score (NaN output and LSE).
          const SoftmaxFinal final_row =
              finalize_softmax(row_max[h], row_sum[h], sink != nullptr, sink != nullptr ? sink[head] * cpu::kLog2e : 0.0f);
          cpu::store_final_row(ws.out_block.data() + h * kHeadDim, final_row, lse_scale,
                               output + (t * num_heads + head) * kHeadDim, out_lse + t * num_heads + head);
        }
      }
    }
  });
}

}  // namespace cake
