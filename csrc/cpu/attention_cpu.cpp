#include "attention_cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace cake::cpu {
namespace {

using nvfp4::kHeadDim;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
// Runtime-dispatched clones: AVX-512 (x86-64-v4) or AVX2+FMA (x86-64-v3) where the CPU has the
// features, baseline SSE2 elsewhere. Feature levels, not CPU models: a model clone
// ("arch=skylake-avx512") is dispatched only on that exact model. (Level clones need GCC 12.)
#define CAKE_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CAKE_CPU_CLONES
#endif

constexpr int kLanes = 16;  // independent partial sums per head, so the dot vectorizes

// scores[h * num_rows + c] = dot(q[h], rows[c]) for the heads of one block. Two candidate rows
// per pass, so each loaded slice of q feeds two dot products.
CAKE_CPU_CLONES void score_block(const float* q, int num_block_heads, const float* rows, int64_t num_rows,
                                 float* scores) {
  int64_t c = 0;
  for (; c + 2 <= num_rows; c += 2) {
    const float* row0 = rows + c * kHeadDim;
    const float* row1 = row0 + kHeadDim;
    float partial0[kHeadBlock][kLanes] = {};
    float partial1[kHeadBlock][kLanes] = {};
    for (int d = 0; d < kHeadDim; d += kLanes) {
      for (int h = 0; h < kHeadBlock; ++h) {
        for (int j = 0; j < kLanes; ++j) {
          partial0[h][j] += q[h * kHeadDim + d + j] * row0[d + j];
          partial1[h][j] += q[h * kHeadDim + d + j] * row1[d + j];
        }
      }
    }
    for (int h = 0; h < num_block_heads; ++h) {
      float sum0 = 0.0f, sum1 = 0.0f;
      for (int j = 0; j < kLanes; ++j) sum0 += partial0[h][j], sum1 += partial1[h][j];
      scores[h * num_rows + c] = sum0;
      scores[h * num_rows + c + 1] = sum1;
    }
  }
  for (; c < num_rows; ++c) {
    const float* row = rows + c * kHeadDim;
    float partial[kHeadBlock][kLanes] = {};
    for (int d = 0; d < kHeadDim; d += kLanes) {
      for (int h = 0; h < kHeadBlock; ++h) {
        for (int j = 0; j < kLanes; ++j) partial[h][j] += q[h * kHeadDim + d + j] * row[d + j];
      }
    }
    for (int h = 0; h < num_block_heads; ++h) {
      float sum = 0.0f;
      for (int j = 0; j < kLanes; ++j) sum += partial[h][j];
      scores[h * num_rows + c] = sum;
    }
  }
}

// out[h] += sum_c weights[h * num_rows + c] * rows[c] for the heads of one block. Walks the
// candidates once per 32-dim slice, keeping the block's 4 x 32 accumulators in registers.
CAKE_CPU_CLONES void accumulate_block(const float* weights, int num_block_heads, const float* rows, int64_t num_rows,
                                      float* out) {
  constexpr int kSlice = 32;
  for (int d0 = 0; d0 < kHeadDim; d0 += kSlice) {
    float acc[kHeadBlock][kSlice] = {};
    for (int64_t c = 0; c < num_rows; ++c) {
      const float* row = rows + c * kHeadDim + d0;
      float weight[kHeadBlock];
      for (int h = 0; h < kHeadBlock; ++h) weight[h] = h < num_block_heads ? weights[h * num_rows + c] : 0.0f;
      for (int h = 0; h < kHeadBlock; ++h) {
        for (int j = 0; j < kSlice; ++j) acc[h][j] += weight[h] * row[j];
      }
    }
    for (int h = 0; h < num_block_heads; ++h) {
      for (int j = 0; j < kSlice; ++j) out[h * kHeadDim + d0 + j] += acc[h][j];
    }
  }
}

// Dequantizes one cache row with table lookups built from the shared format decoders
// (nvfp4::e2m1_to_float, nvfp4::e4m3_to_float), so CPU and CUDA decode identically.
void dequantize_row(const uint8_t* data_row, const uint8_t* scale_row, float* out) {
  static const auto tables = [] {
    struct Tables {
      float e2m1[16];
      float e4m3[256];
    } t;
    for (uint32_t i = 0; i < 16; ++i) t.e2m1[i] = nvfp4::e2m1_to_float(i);
    for (uint32_t i = 0; i < 256; ++i) t.e4m3[i] = nvfp4::e4m3_to_float(i);
    return t;
  }();
  for (int group = 0; group < nvfp4::kNumGroups; ++group) {
    const float scale = tables.e4m3[scale_row[group]];
    const uint8_t* codes = data_row + group * (nvfp4::kGroupSize / 2);
    float* values = out + group * nvfp4::kGroupSize;
    for (int i = 0; i < nvfp4::kGroupSize / 2; ++i) {
      values[2 * i] = tables.e2m1[codes[i] & 0xF] * scale;
      values[2 * i + 1] = tables.e2m1[codes[i] >> 4] * scale;
    }
  }
  for (int j = 0; j < nvfp4::kRopeDim; ++j) {
    const uint16_t bits = uint16_t(data_row[nvfp4::kNopeBytes + 2 * j] | (data_row[nvfp4::kNopeBytes + 2 * j + 1] << 8));
    out[nvfp4::kNopeDim + j] = nvfp4::bf16_bits_to_float(bits);
  }
}

}  // namespace

AttentionWorkspace::AttentionWorkspace(int64_t max_rows)
    : rows(std::max<int64_t>(max_rows, 1) * kHeadDim),
      q_block(kHeadBlock * kHeadDim),
      scores(kHeadBlock * std::max<int64_t>(max_rows, 1)),
      out_block(kHeadBlock * kHeadDim) {}

int64_t gather_valid_rows(const CandidateList& list, int64_t t, int64_t begin, int64_t end, float* rows) {
  if (list.width == 0) return 0;
  int64_t length = list.width;
  if (list.lengths.defined()) {
    length = std::clamp<int64_t>(list.lengths.data_ptr<int32_t>()[t], 0, list.width);
  }
  end = std::min(end, length);
  const int32_t* slots = list.indices.data_ptr<int32_t>() + t * list.width;
  const uint8_t* base = list.cache.data_ptr<uint8_t>();
  int64_t count = 0;
  for (int64_t c = begin; c < end; ++c) {
    const int64_t slot = slots[c];
    if (!list.geometry.slot_is_valid(slot)) continue;
    dequantize_row(base + list.geometry.data_offset(slot), base + list.geometry.scale_offset(slot),
                   rows + count * kHeadDim);
    ++count;
  }
  return count;
}

void attend_head_block(const c10::BFloat16* q_heads, int block_heads, float score_scale, int64_t num_rows,
                       AttentionWorkspace& ws, float* row_max, float* row_sum) {
  std::fill(ws.q_block.begin(), ws.q_block.end(), 0.0f);
  for (int h = 0; h < block_heads; ++h) {
    for (int d = 0; d < kHeadDim; ++d) ws.q_block[h * kHeadDim + d] = float(q_heads[h * kHeadDim + d]);
  }
  score_block(ws.q_block.data(), block_heads, ws.rows.data(), num_rows, ws.scores.data());
  for (int h = 0; h < block_heads; ++h) {
    float* s = ws.scores.data() + h * num_rows;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < num_rows; ++c) {
      s[c] *= score_scale;
      m = std::max(m, s[c]);
    }
    // std::max drops NaN scores; their weights below are NaN, and so is the sum.
    const float reference = m == -std::numeric_limits<float>::infinity() ? 0.0f : m;  // all -inf: weights 0
    float l = 0.0f;
    for (int64_t c = 0; c < num_rows; ++c) {
      s[c] = std::exp2(s[c] - reference);
      l += s[c];
    }
    row_max[h] = m;
    row_sum[h] = l;
  }
  std::fill(ws.out_block.begin(), ws.out_block.end(), 0.0f);
  accumulate_block(ws.scores.data(), block_heads, ws.rows.data(), num_rows, ws.out_block.data());
}

int64_t gather_token_rows(const AttentionInputs& inputs, int64_t t, AttentionWorkspace& ws) {
  const int64_t num_rows = gather_valid_rows(inputs.main, t, 0, inputs.main.width, ws.rows.data());
  return num_rows + gather_valid_rows(inputs.extra, t, 0, inputs.extra.width, ws.rows.data() + num_rows * kHeadDim);
}

void attend_token(const AttentionInputs& inputs, int64_t t, int64_t num_rows, AttentionWorkspace& ws) {
  const int64_t num_heads = inputs.num_heads;
  const float score_scale = score_scale_or_nan(float(inputs.sm_scale) * kLog2e);  // logits in base 2
  const c10::BFloat16* q = inputs.q.data_ptr<c10::BFloat16>();
  c10::BFloat16* output = inputs.output.data_ptr<c10::BFloat16>();
  float* out_lse = inputs.out_lse.data_ptr<float>();
  const float* sink = inputs.sink.defined() ? inputs.sink.data_ptr<float>() : nullptr;
  for (int64_t h0 = 0; h0 < num_heads; h0 += kHeadBlock) {
    const int block_heads = int(std::min<int64_t>(kHeadBlock, num_heads - h0));
    float row_max[kHeadBlock];
    float row_sum[kHeadBlock];
    attend_head_block(q + (t * num_heads + h0) * kHeadDim, block_heads, score_scale, num_rows, ws, row_max, row_sum);
    for (int h = 0; h < block_heads; ++h) {
      const int64_t head = h0 + h;
      // row_sum is 0 for a token with no valid candidate (finalize_softmax: empty) and NaN for a
      // row with a NaN or +inf score (NaN output and LSE).
      const SoftmaxFinal final_row =
          finalize_softmax(row_max[h], row_sum[h], sink != nullptr, sink != nullptr ? sink[head] * kLog2e : 0.0f);
      store_final_row(ws.out_block.data() + h * kHeadDim, final_row, float(inputs.lse_scale),
                      output + (t * num_heads + head) * kHeadDim, out_lse + t * num_heads + head);
    }
  }
}

}  // namespace cake::cpu
