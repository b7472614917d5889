// The CPU pieces the prefill and the decode kernels share: gathering and dequantizing a token's
// valid candidate rows, the scores, softmax weights and weighted sum of one block of heads over
// those rows, and the store of a finished output row.
#pragma once

#include <c10/util/BFloat16.h>

#include <cstdint>
#include <vector>

#include "../common/softmax_finalize.h"
#include "../ops/attention_inputs.h"

namespace cake::cpu {

constexpr int kHeadBlock = 4;  // heads whose scores share one pass over a candidate row
constexpr float kLog2e = 1.4426950408889634f;

// One task's buffers, sized for up to `max_rows` gathered rows.
struct AttentionWorkspace {
  explicit AttentionWorkspace(int64_t max_rows);
  std::vector<float> rows;       // [max_rows, 512] dequantized candidate rows
  std::vector<float> q_block;    // [kHeadBlock, 512]
  std::vector<float> scores;     // [kHeadBlock, max_rows] scores, then weights
  std::vector<float> out_block;  // [kHeadBlock, 512] unnormalised weighted sums
};

// Dequantizes the valid candidates among positions [begin, end) of token t's list (positions at
// or past the token's clamped length, and masked slots, are skipped) and appends them to `rows`
// in position order; returns how many it wrote.
int64_t gather_valid_rows(const CandidateList& list, int64_t t, int64_t begin, int64_t end, float* rows);

// Heads [0, block_heads) of `q_heads` (bf16 rows of 512, consecutive) over the `num_rows` rows
// in ws.rows, in base 2 (scores times `score_scale`): for each head, row_max = the largest score
// (-inf when there is none), row_sum = the sum of exp2(score - ref) with ref = row_max, or 0
// when row_max is -inf (a NaN or +inf score makes it NaN), and ws.out_block[h] = the sum of those
// weights times the rows. Every sum runs in candidate order, so results are repeatable.
void attend_head_block(const c10::BFloat16* q_heads, int block_heads, float score_scale, int64_t num_rows,
                       AttentionWorkspace& ws, float* row_max, float* row_sum);

// Gathers token t's valid candidates of both lists (main first) into ws.rows; returns the count.
int64_t gather_token_rows(const AttentionInputs& inputs, int64_t t, AttentionWorkspace& ws);

// Every head of token t over the `num_rows` rows in ws.rows, finished: the sink folded in
// (finalize_softmax), output[t] and out_lse[t] written.
void attend_token(const AttentionInputs& inputs, int64_t t, int64_t num_rows, AttentionWorkspace& ws);

// Writes one finished row: output = acc * final.out_scale in bf16, lse = final.lse2 * lse_scale.
inline void store_final_row(const float* acc, const SoftmaxFinal& final_row, float lse_scale, c10::BFloat16* output,
                            float* out_lse) {
  for (int d = 0; d < nvfp4::kHeadDim; ++d) output[d] = c10::BFloat16(acc[d] * final_row.out_scale);
  *out_lse = final_row.lse2 * lse_scale;
}

}  // namespace cake::cpu
