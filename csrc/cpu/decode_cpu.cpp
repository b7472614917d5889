// CPU decode. One split: the prefill's computation (attention_cpu.h), finished in place. More:
// split-K in two passes. First one task per (split, token): the split's valid candidates are
// dequantized once and every head's partial (normalised output and base-2 LSE over the split,
// no sink; common/decode_splits.h) goes to mid_out / mid_lse. Then one task per token merges its
// splits in split order and folds the sink in. Every sum has a fixed order, so the result does
// not depend on the thread count.
#include "decode_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../common/decode_splits.h"
#include "attention_cpu.h"

namespace cake {
namespace {

using cpu::kHeadBlock;
using nvfp4::kHeadDim;

// Split `split` of token t: every head's partial into mid_out[split, t] and mid_lse[split, t].
void split_partials(const DecodeArgs& args, int64_t split, int64_t t, cpu::AttentionWorkspace& ws) {
  const int64_t num_heads = args.num_heads;
  const DecodeSplitPositions positions =
      decode_split_positions(split, args.plan.num_splits, args.main.num_chunks(), args.extra.num_chunks());
  int64_t num_rows = cpu::gather_valid_rows(args.main, t, positions.main_begin, positions.main_end, ws.rows.data());
  num_rows += cpu::gather_valid_rows(args.extra, t, positions.extra_begin, positions.extra_end,
                                     ws.rows.data() + num_rows * kHeadDim);
  const float score_scale = score_scale_or_nan(float(args.sm_scale) * cpu::kLog2e);
  const c10::BFloat16* q = args.q.data_ptr<c10::BFloat16>();
  const int64_t row0 = (split * args.num_tokens + t) * num_heads;  // mid_lse index of head 0
  float* mid_out = args.mid_out.data_ptr<float>() + row0 * kHeadDim;
  float* mid_lse = args.mid_lse.data_ptr<float>() + row0;
  for (int64_t h0 = 0; h0 < num_heads; h0 += kHeadBlock) {
    const int block_heads = int(std::min<int64_t>(kHeadBlock, num_heads - h0));
    float row_max[kHeadBlock];
    float row_sum[kHeadBlock];
    cpu::attend_head_block(q + (t * num_heads + h0) * kHeadDim, block_heads, score_scale, num_rows, ws, row_max, row_sum);
    for (int h = 0; h < block_heads; ++h) {
      const SoftmaxFinal partial = finalize_split_partial(row_max[h], row_sum[h]);
      const float* acc = ws.out_block.data() + h * kHeadDim;
      float* out_row = mid_out + (h0 + h) * kHeadDim;
      for (int d = 0; d < kHeadDim; ++d) out_row[d] = acc[d] * partial.out_scale;
      mid_lse[h0 + h] = partial.lse2;
    }
  }
}

// Token t: every head's splits merged, the sink folded in, output[t] and out_lse[t] written.
void merge_splits(const DecodeArgs& args, int64_t t, std::vector<float>& acc) {
  const int64_t num_heads = args.num_heads;
  const int64_t num_splits = args.plan.num_splits;
  const int64_t split_stride = args.num_tokens * num_heads;  // between splits, in mid_lse entries
  const float* mid_out = args.mid_out.data_ptr<float>();
  const float* mid_lse = args.mid_lse.data_ptr<float>();
  const float* sink = args.sink.defined() ? args.sink.data_ptr<float>() : nullptr;
  for (int64_t head = 0; head < num_heads; ++head) {
    const int64_t row = t * num_heads + head;
    float max_lse = -INFINITY;
    for (int64_t s = 0; s < num_splits; ++s) max_lse = std::fmax(max_lse, mid_lse[s * split_stride + row]);
    const float reference = decode_merge_reference(max_lse);
    std::fill(acc.begin(), acc.end(), 0.0f);
    float weight_sum = 0.0f;
    for (int64_t s = 0; s < num_splits; ++s) {
      const float weight = std::exp2(mid_lse[s * split_stride + row] - reference);
      const float* partial = mid_out + (s * split_stride + row) * kHeadDim;
      weight_sum += weight;
      for (int d = 0; d < kHeadDim; ++d) acc[d] += weight * partial[d];
    }
    const SoftmaxFinal final_row =
        finalize_softmax(max_lse, weight_sum, sink != nullptr, sink != nullptr ? sink[head] * cpu::kLog2e : 0.0f);
    cpu::store_final_row(acc.data(), final_row, float(args.lse_scale),
                         args.output.data_ptr<c10::BFloat16>() + row * kHeadDim, args.out_lse.data_ptr<float>() + row);
  }
}

}  // namespace

void sparse_mla_decode_cpu(const DecodeArgs& args) {
  const int64_t num_tokens = args.num_tokens;
  const int64_t num_splits = args.plan.num_splits;
  if (num_splits == 1) {
    at::parallel_for(0, num_tokens, 1, [&](int64_t begin, int64_t end) {
      cpu::AttentionWorkspace ws(args.main.width + args.extra.width);
      for (int64_t t = begin; t < end; ++t) cpu::attend_token(args, t, cpu::gather_token_rows(args, t, ws), ws);
    });
    return;
  }
  at::parallel_for(0, num_splits * num_tokens, 1, [&](int64_t begin, int64_t end) {
    cpu::AttentionWorkspace ws(args.plan.chunks_per_block * nvfp4::kChunkSize);
    for (int64_t item = begin; item < end; ++item) split_partials(args, item / num_tokens, item % num_tokens, ws);
  });
  at::parallel_for(0, num_tokens, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(kHeadDim);
    for (int64_t t = begin; t < end; ++t) merge_splits(args, t, acc);
  });
}

}  // namespace cake
