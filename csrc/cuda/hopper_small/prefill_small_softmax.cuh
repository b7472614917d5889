// The chunk softmax of the small-heads Hopper prefill over a unit's heads, and the unit's end for
// them, run by the attend warpgroup.
//
// 8 threads a head, 8 candidates each: thread t of the 128 takes heads t / 8 + 16 k
// (k < Geometry::kSoftmaxHeads) and candidates 4 (t % 8) .. + 3 and 32 + 4 (t % 8) .. + 3, so a head's max
// and sums reduce within 8 lanes. Each chunk it adds the converters' two halves of S^T, masks and
// scales them, moves each head's reference only when the chunk's max exceeds it by more than 2^8
// (as the 64-head kernel does: weights stay <= 256 and the O rescale is rare), writes the bf16
// weights into P^T and each head's O rescale factor.
#pragma once

#include "../common/decode_params.h"
#include "../common/online_softmax.cuh"
#include "../common/prefill_epilogue.cuh"
#include "../common/ptx_primitives.cuh"
#include "../common/split_epilogue.cuh"
#include "../hopper/nvfp4_bit_decode.cuh"
#include "../hopper/sm90_primitives.cuh"
#include "prefill_small_layout.h"
#include "prefill_small_work.cuh"

namespace cake::cuda::hopper_small {

template <int kGroupHeads, bool kSplitItems, UnitEnd kEnd>
class ChunkSoftmax {
  using G = Geometry<kGroupHeads>;
  static constexpr int kThreadHeads = G::kSoftmaxHeads;

 public:
  // `thread`: 0..127 within the warpgroup that runs it.
  __device__ ChunkSoftmax(const DecodeParams& params, SharedStorage<kGroupHeads, kSplitItems>& smem, int thread)
      : params_(params), smem_(smem), head_group_(thread / 8), part_(thread % 8),
        score_scale_(score_scale_or_nan(params.score_scale_log2)) {}

  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int k = 0; k < kThreadHeads; ++k) {
      row_max_[k] = -INFINITY;
      sums_[k] = WeightSums{0.0f, 0.0f};
    }
  }

  // One head at a time (the attend warpgroup's registers hold O^T): S = half 0 + half 1 (in this
  // order), masked and scaled; the chunk's max over the head's 8 threads; the reference, the
  // weights (rounded to bf16 once, in pairs) into P^T, the sums. Returns whether a reference moved,
  // and leaves each head's O rescale factor in smem_.rescale[parity].
  __device__ __forceinline__ bool run(int parity) {
    using namespace sm90;
    const uint32_t valid_low = *reinterpret_cast<const uint32_t*>(&smem_.valid[parity][4 * part_]);
    const uint32_t valid_high = *reinterpret_cast<const uint32_t*>(&smem_.valid[parity][32 + 4 * part_]);
    const uint32_t p_tile = smem_address(smem_.p[parity]);
    bool moved = false;
#pragma unroll
    for (int k = 0; k < kThreadHeads; ++k) {
      const int head = head_group_ + 16 * k;
      float logits[8];
#pragma unroll
      for (int side = 0; side < 2; ++side) {  // candidates 4 part .. and 32 + 4 part ..
        const int column = 32 * side + 4 * part_;
        const float4 half0 = *reinterpret_cast<const float4*>(&smem_.s_partial[parity % G::kSBuffers][0][head][column]);
        const float4 half1 = *reinterpret_cast<const float4*>(&smem_.s_partial[parity % G::kSBuffers][1][head][column]);
        const uint32_t valid = side == 0 ? valid_low : valid_high;
        const float sums[4] = {half0.x + half1.x, half0.y + half1.y, half0.z + half1.z, half0.w + half1.w};
#pragma unroll
        for (int n = 0; n < 4; ++n) {
          logits[4 * side + n] = masked_logit2(sums[n], ((valid >> (8 * n)) & 0xFFu) != 0, score_scale_);
        }
      }
      float chunk_max = logits[0];
#pragma unroll
      for (int n = 1; n < 8; ++n) chunk_max = fmaxf(chunk_max, logits[n]);
      // The head's max by shuffles only when a warp vote says some thread's own max passes the
      // reference by the lazy margin (a unit's first chunks, then rarely); otherwise no head of
      // the warp moves, as the shuffled max would have said.
      if (__any_sync(0xffffffffu, chunk_max > row_max_[k] + kLazyRescaleLog2)) {
#pragma unroll
        for (int mask = 1; mask < 8; mask *= 2) chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, mask));
      }
      // The head's 8 threads see the same max, so they take the same decisions.
      const bool move = chunk_max > row_max_[k] + kLazyRescaleLog2;  // false while chunk_max == -inf
      const float new_max = move ? chunk_max : row_max_[k];
      const float reference = softmax_reference(new_max);
      const float rescale = move ? fast_exp2(row_max_[k] - new_max) : 1.0f;
      row_max_[k] = new_max;
      WeightSums chunk = {0.0f, 0.0f};
      uint32_t weights[4];
#pragma unroll
      for (int n = 0; n < 4; ++n) weights[n] = add_weight_pair(chunk, logits[2 * n], logits[2 * n + 1], reference);
      rescale_add(sums_[k].rounded, sums_[k].exact, rescale, chunk);
      st_shared_8(p_tile + row_tile_offset(head, 4 * part_), weights[0], weights[1]);
      st_shared_8(p_tile + row_tile_offset(head, 32 + 4 * part_), weights[2], weights[3]);
      if (part_ == 0) smem_.rescale[parity][head] = rescale;
      moved = moved || move;
    }
    return moved;
  }

  // The unit's end for these heads: each head's sums over its 8 threads (a fixed order), the sink
  // and the NaN rules (finalize_row), the LSE stored, and the head's output scale into
  // smem_.out_scale[head] (times 2^9: PV took the NoPE dims as 2^-9 times the cache's values). A unit
  // that ends in a split's partial (kEnd) gives that instead (finalize_split_row: no sink); the split
  // instances store nothing for the padding heads past the call's last (real_head).
  __device__ __forceinline__ void finish(const Unit<kSplitItems>& u) const {
#pragma unroll
    for (int k = 0; k < kThreadHeads; ++k) {
      const int head = head_group_ + 16 * k;
      float rounded = sums_[k].rounded, exact = sums_[k].exact;
#pragma unroll
      for (int mask = 1; mask < 8; mask *= 2) {
        rounded += __shfl_xor_sync(0xffffffffu, rounded, mask);
        exact += __shfl_xor_sync(0xffffffffu, exact, mask);
      }
      if (part_ != 0 || (kSplitItems && !real_head(params_, u.head0 + head))) continue;
      if constexpr (kEnd == UnitEnd::kPartial) {
        const SoftmaxFinal partial = finalize_split_row(row_max_[k], WeightSums{rounded, exact});
        store_split_lse(params_, u.split, u.token, u.head0 + head, partial.lse2);
        smem_.out_scale[head] = partial.out_scale * hopper::kBitDecodeUnscale;
      } else {
        const SoftmaxFinal final = finalize_row(params_, u.head0 + head, row_max_[k], WeightSums{rounded, exact});
        store_lse(params_, u.token, u.head0 + head, final.lse2);
        smem_.out_scale[head] = final.out_scale * hopper::kBitDecodeUnscale;
      }
    }
  }

 private:
  const DecodeParams& params_;
  SharedStorage<kGroupHeads, kSplitItems>& smem_;
  const int head_group_;  // heads head_group + 16 k
  const int part_;        // which 8 candidates of each chunk
  const float score_scale_;  // sm_scale * log2(e), NaN when sm_scale is not finite

  float row_max_[kThreadHeads];  // each head's reference
  WeightSums sums_[kThreadHeads];  // this thread's share of its heads' sums
};

}  // namespace cake::cuda::hopper_small
