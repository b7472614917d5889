// Portable sparse-MLA attention kernels (sm_80+: cp.async, ldmatrix, mma.sync): the prefill, and
// the decode's split kernel, one body.
//
// Prefill: one CTA per (token, block of 16 * kHeadTiles heads). It walks the token's candidates
// in subtiles of 32 rows, main list first, then the extra list, and keeps an online softmax.
// Decode split (kSplitK): one CTA per (token, head block, split). It walks only the positions of
// its split (csrc/common/decode_splits.h: a range of the main list, then of the extra list), and
// with several splits writes the split's partial (fp32, normalised over the split, base-2 LSE
// without the sink) to the scratch for the merge kernel; with one split it ends like the prefill.
// A decode head block may end in a half tile (H % 16 == 8): its padding rows read zeros for q and
// are never written.
//
// Warps: 4 per sixteen-head tile. Warp (tile, quarter) owns the head tile's 16 rows and the
// quarter's 128 of the 512 dims:
//   - QK^T: each warp multiplies its 128 dims of Q and K (a split-k partial S[16 x 32]); the four
//     partials meet in shared memory.
//   - Softmax, split by candidates: warp `quarter` sums the partials of candidates
//     [8 quarter, 8 quarter + 8), the tile's four warps exchange row maxima, and each writes its
//     slice of P (bf16) to shared memory. Every warp then reads the whole P[16 x 32].
//   - PV: each warp accumulates O[16 x its 128 dims] from P and V (the K tile read transposed by
//     ldmatrix: K = V, no second copy).
// The four warps of one head tile meet on their own named barrier, not the whole CTA.
// Per subtile: cp.async gather of the raw 384-byte rows (kStages buffers, issued ahead; masked
// slots are zero-filled, never read) -> dequantize to a bf16 K tile -> QK^T -> softmax -> PV.
// With kKTiles == 2 the dequant of the next subtile follows each warp's PV into the other K
// tile, so head tiles that are still multiplying overlap it.
#pragma once

#include <cuda_bf16.h>

#include "../../format/nvfp4_format.h"
#include "../common/candidate_gather.cuh"
#include "../common/candidate_lists.cuh"
#include "../common/decode_params.h"
#include "../common/nvfp4_dequant.cuh"
#include "../common/online_softmax.cuh"
#include "../common/prefill_epilogue.cuh"
#include "../common/prefill_params.h"
#include "../common/ptx_primitives.cuh"
#include "../common/split_epilogue.cuh"
#include "prefill_variants.h"
#include "sm80_primitives.cuh"

namespace cake::cuda {

// Named barriers of the kernel (0 is __syncthreads, for the whole CTA).
enum PortableBarrier : int {
  // Head tile t's four warps meet on barrier kHeadTileBarrier0 + t (1 .. 4), not the whole CTA:
  // split-k partials of S, row maxima, the P tile and the epilogue's row sums, all per tile.
  kHeadTileBarrier0 = 1,
};

// Barrier among the 4 warps of head tile `tile` (0..3). One literal id per case, so the compiler
// reserves only these barriers rather than all 16.
__device__ __forceinline__ void head_tile_barrier(int tile) {
  constexpr int kThreads = PrefillTile::kThreadsPerHeadTile;
  switch (tile) {
    case 0: named_barrier<kHeadTileBarrier0 + 0, kThreads>(); break;
    case 1: named_barrier<kHeadTileBarrier0 + 1, kThreads>(); break;
    case 2: named_barrier<kHeadTileBarrier0 + 2, kThreads>(); break;
    default: named_barrier<kHeadTileBarrier0 + 3, kThreads>(); break;
  }
}

// The body of both kernels below. `Params` is PrefillParams, or DecodeParams with kSplitK.
template <int kHeadTiles, int kStages, int kKTiles, bool kSplitK, typename Params>
__device__ __forceinline__ void portable_attention(const Params& params) {
  using Tile = PrefillTile;
  constexpr int kThreads = kHeadTiles * Tile::kThreadsPerHeadTile;
  constexpr int kRows = 16 * kHeadTiles;
  constexpr int kSub = Tile::kSubtileRows;
  constexpr int kStride = Tile::kRowStride;
  constexpr int kThreadsPerRow = kThreads / kSub;
  static_assert(kKTiles == 1 ? kStages >= 2 : kStages >= 3, "a gather needs one subtile of lead time");

  extern __shared__ __align__(128) uint8_t smem[];
  __nv_bfloat16* q_tile = reinterpret_cast<__nv_bfloat16*>(smem);           // [kRows][kStride]
  __nv_bfloat16* k_tiles = q_tile + kRows * kStride;                          // [kKTiles][kSub][kStride]
  uint8_t* raw = reinterpret_cast<uint8_t*>(k_tiles + kKTiles * kSub * kStride);  // [kStages][kSub][384]
  float4* partials = reinterpret_cast<float4*>(raw + kStages * Tile::kRawStageBytes);  // [tile][quarter][4][32]
  __nv_bfloat16* p_tiles =
      reinterpret_cast<__nv_bfloat16*>(partials + kHeadTiles * Tile::kPartialsPerTile);  // [tile][16][kPStride]
  float* row_stats = reinterpret_cast<float*>(p_tiles + kHeadTiles * 16 * Tile::kPStride);  // [tile][3][quarter][16]
  // [2 * kStages]: twice the stages, so a fast warp publishing the mask of subtile s + kStages
  // never overwrites the one a slow warp is about to read for subtile s.
  uint32_t* valid_masks = reinterpret_cast<uint32_t*>(row_stats + kHeadTiles * Tile::kRowStatsPerTile);

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int head_tile = warp / 4;  // which 16 heads of the block
  const int quarter = warp % 4;    // which 128 of the 512 dims
  // blockIdx.x = token * num_head_blocks + head block, so the head blocks of one token, which read
  // the same rows, run side by side; blockIdx.y = the decode's split (the prefill: 0).
  const int token = blockIdx.x / params.num_head_blocks;
  const int head0 = (blockIdx.x % params.num_head_blocks) * kRows;
  __nv_bfloat16* p_tile = p_tiles + head_tile * 16 * Tile::kPStride;
  float* tile_stats = row_stats + head_tile * Tile::kRowStatsPerTile;  // [max | sum | exact sum][quarter][row]

  const float score_scale = score_scale_or_nan(params.score_scale_log2);  // NaN: sm_scale not finite
  // The positions of each list this CTA walks: all of them, or its split's range.
  ListWalk walk0, walk1;
  if constexpr (kSplitK) {
    const auto chunks = [](int width) { return (width + nvfp4::kChunkSize - 1) / nvfp4::kChunkSize; };
    const DecodeSplitPositions range = decode_split_positions(blockIdx.y, params.num_splits,
                                                              chunks(params.lists[0].width), chunks(params.lists[1].width));
    walk0 = list_walk(params.lists[0], token, int(range.main_begin), int(range.main_end), kSub);
    walk1 = list_walk(params.lists[1], token, int(range.extra_begin), int(range.extra_end), kSub);
  } else {
    const int length0 = list_length(params.lists[0], token);
    const int length1 = list_length(params.lists[1], token);
    walk0 = whole_list_walk(length0, kSub);
    walk1 = whole_list_walk(length1, kSub);
  }
  const int subtiles0 = walk0.subtiles;
  const int num_subtiles = subtiles0 + walk1.subtiles;

  // Q rows of this block -> shared memory (joins the first copy group). A decode's padding rows
  // (heads >= num_heads) are zero-filled, not read.
  const __nv_bfloat16* q_block = params.q + (int64_t(token) * params.num_heads + head0) * nvfp4::kHeadDim;
  for (int unit = tid; unit < kRows * (nvfp4::kHeadDim / 8); unit += kThreads) {
    const int row = unit / (nvfp4::kHeadDim / 8);
    const int chunk = unit % (nvfp4::kHeadDim / 8);
    const bool real_row = !kSplitK || head0 + row < params.num_heads;
    cp_async_16(smem_address(q_tile + row * kStride + chunk * 8),
                real_row ? q_block + row * nvfp4::kHeadDim + chunk * 8 : params.q, real_row);
  }

  // Issue the copies of subtile `s` into raw stage s % kStages and publish its validity mask.
  auto issue_gather = [&](int s) {
    const bool in_main = s < subtiles0;
    const CandidateListParams& list = in_main ? params.lists[0] : params.lists[1];
    const int limit = in_main ? walk0.limit : walk1.limit;
    const int first = in_main ? walk0.begin + s * kSub : walk1.begin + (s - subtiles0) * kSub;
    uint8_t* stage = raw + (s % kStages) * Tile::kRawStageBytes;
    const int row = tid / kThreadsPerRow;
    const CandidateRows rows = candidate_rows(list, candidate_slot(list, token, limit, first + row));
    for (int chunk = tid % kThreadsPerRow; chunk < kGatherChunks; chunk += kThreadsPerRow) {
      gather_chunk(stage + row * nvfp4::kTokenBytes, list, rows, chunk);
    }
    if (warp == 0) {
      const bool lane_valid = candidate_slot(list, token, limit, first + lane) >= 0;
      const uint32_t mask = __ballot_sync(0xffffffffu, lane_valid);
      if (lane == 0) valid_masks[s % (2 * kStages)] = mask;
    }
  };

  // Dequantize raw stage s % kStages into K tile s % kKTiles (exact: e2m1 * e4m3 fits in bf16).
  auto dequantize_subtile = [&](int s) {
    const uint8_t* stage = raw + (s % kStages) * Tile::kRawStageBytes;
    __nv_bfloat16* k_tile = k_tiles + (s % kKTiles) * kSub * kStride;
    for (int unit = tid; unit < kSub * nvfp4::kNumGroups; unit += kThreads) {
      const int row = unit / nvfp4::kNumGroups;
      const int group = unit % nvfp4::kNumGroups;
      const uint8_t* raw_row = stage + row * nvfp4::kTokenBytes;
      uint32_t packed[8];
      dequantize_group(*reinterpret_cast<const uint2*>(raw_row + group * 8), raw_row[nvfp4::kDataRowBytes + group], packed);
      uint4* dst = reinterpret_cast<uint4*>(k_tile + row * kStride + group * nvfp4::kGroupSize);
      dst[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
      dst[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
    }
    for (int unit = tid; unit < kSub * 8; unit += kThreads) {  // RoPE: raw bf16, 16 bytes a unit
      const int row = unit / 8;
      const int part = unit % 8;
      *reinterpret_cast<uint4*>(k_tile + row * kStride + nvfp4::kNopeDim + part * 8) =
          *reinterpret_cast<const uint4*>(stage + row * nvfp4::kTokenBytes + nvfp4::kNopeBytes + part * 16);
    }
  };

  // Prologue: subtiles 0 .. kStages - 2 in flight, one copy group each (Q joins the first).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_subtiles) issue_gather(s);
    cp_async_commit();
  }

  float o_acc[16][4];
#pragma unroll
  for (int n = 0; n < 16; ++n) o_acc[n][0] = o_acc[n][1] = o_acc[n][2] = o_acc[n][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};  // rows lane/4 and lane/4 + 8 of the head tile
  // This thread's shares of the row sums, reduced over the quad at the end: of the bf16-rounded
  // weights the MMA uses (normalises the output consistently) and of the fp32 weights (the LSE).
  float row_sum[2] = {0.0f, 0.0f};
  float row_sum_exact[2] = {0.0f, 0.0f};

  if constexpr (kKTiles == 2) {
    if (num_subtiles > 0) {
      cp_async_wait<kStages - 2>();  // subtile 0 and Q landed for this thread
      __syncthreads();
      dequantize_subtile(0);
    }
  }

  for (int s = 0; s < num_subtiles; ++s) {
    // The stage refilled here was last read by the dequant of subtile s - 1, which every thread
    // finished before the previous CTA barrier.
    if (s + kStages - 1 < num_subtiles) issue_gather(s + kStages - 1);
    cp_async_commit();
    if constexpr (kKTiles == 1) {
      cp_async_wait<kStages - 1>();  // this thread's copies of subtile s have landed
      __syncthreads();               // ... and everyone's; the K tile is free
      dequantize_subtile(s);
      __syncthreads();               // K tile ready
    } else {
      cp_async_wait<kStages - 2>();  // this thread's copies of subtile s + 1 have landed
      __syncthreads();               // K tile s complete, raw stage s + 1 visible, K tile s + 1 free
    }
    const uint32_t valid_mask = valid_masks[s % (2 * kStages)];
    const __nv_bfloat16* k_tile = k_tiles + (s % kKTiles) * kSub * kStride;

    // QK^T partial over this warp's 128 dims: S[16 x 32] as 4 n-tiles of 8 candidates.
    float s_acc[4][4];
#pragma unroll
    for (int n = 0; n < 4; ++n) s_acc[n][0] = s_acc[n][1] = s_acc[n][2] = s_acc[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      const int k0 = quarter * 128 + kk * 16;
      uint32_t a[4];
      ldmatrix_x4(a, smem_address(q_tile + (head_tile * 16 + lane % 16) * kStride + k0 + (lane / 16) * 8));
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
        uint32_t b[4];
        ldmatrix_x4(b, smem_address(k_tile + (nb * 16 + (lane / 16) * 8 + lane % 8) * kStride + k0 + ((lane / 8) % 2) * 8));
        mma_bf16_16x8x16(s_acc[2 * nb], a, b[0], b[1]);
        mma_bf16_16x8x16(s_acc[2 * nb + 1], a, b[2], b[3]);
      }
    }
    float4* my_partials = partials + (head_tile * 4 + quarter) * 4 * 32;
#pragma unroll
    for (int n = 0; n < 4; ++n) my_partials[n * 32 + lane] = make_float4(s_acc[n][0], s_acc[n][1], s_acc[n][2], s_acc[n][3]);
    head_tile_barrier(head_tile);  // the tile's four partials are visible

    // This warp's slice of S: candidates 8 * quarter + 2 * (lane % 4) + {0, 1}, rows lane / 4
    // (x, y) and lane / 4 + 8 (z, w); summed in a fixed order, scaled to base 2, masked.
    const float4* tile_partials = partials + head_tile * Tile::kPartialsPerTile;
    float4 s_sum = tile_partials[quarter * 32 + lane];
#pragma unroll
    for (int q = 1; q < 4; ++q) {
      const float4 part = tile_partials[(q * 4 + quarter) * 32 + lane];
      s_sum.x += part.x, s_sum.y += part.y, s_sum.z += part.z, s_sum.w += part.w;
    }
    const int column = quarter * 8 + 2 * (lane % 4);
    const bool valid_even = (valid_mask >> column) & 1u;
    const bool valid_odd = (valid_mask >> (column + 1)) & 1u;
    float p[4] = {masked_logit2(s_sum.x, valid_even, score_scale),
                  masked_logit2(s_sum.y, valid_odd, score_scale),
                  masked_logit2(s_sum.z, valid_even, score_scale),
                  masked_logit2(s_sum.w, valid_odd, score_scale)};
    float slice_max[2] = {fmaxf(p[0], p[1]), fmaxf(p[2], p[3])};
    slice_max[0] = quad_max(slice_max[0]);
    slice_max[1] = quad_max(slice_max[1]);
    if (lane % 4 == 0) {
      tile_stats[Tile::kMaxStats + quarter * 16 + lane / 4] = slice_max[0];
      tile_stats[Tile::kMaxStats + quarter * 16 + lane / 4 + 8] = slice_max[1];
    }
    head_tile_barrier(head_tile);  // slice maxima visible

    // Online softmax: the four warps derive the same new max and rescale factor per row.
    float rescale[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = lane / 4 + 8 * r;
      const float* maxima = tile_stats + Tile::kMaxStats;
      const float tile_max = fmaxf(fmaxf(maxima[row], maxima[16 + row]), fmaxf(maxima[32 + row], maxima[48 + row]));
      const float new_max = fmaxf(row_max[r], tile_max);
      const float reference = softmax_reference(new_max);
      rescale[r] = fast_exp2(row_max[r] - reference);
      row_max[r] = new_max;
      WeightSums sums = {0.0f, 0.0f};
#pragma unroll
      for (int e = 2 * r; e < 2 * r + 2; ++e) p[e] = add_weight(sums, p[e], reference);  // the MMA's weights
      rescale_add(row_sum[r], row_sum_exact[r], rescale[r], sums);
    }
    *reinterpret_cast<uint32_t*>(p_tile + (lane / 4) * Tile::kPStride + column) = pack_bf16x2(p[0], p[1]);
    *reinterpret_cast<uint32_t*>(p_tile + (lane / 4 + 8) * Tile::kPStride + column) = pack_bf16x2(p[2], p[3]);
    // The running max rarely moves once the first candidates are in: skip the rescale then.
    if (__any_sync(0xffffffffu, rescale[0] != 1.0f || rescale[1] != 1.0f)) {
#pragma unroll
      for (int n = 0; n < 16; ++n) {
        o_acc[n][0] *= rescale[0], o_acc[n][1] *= rescale[0];
        o_acc[n][2] *= rescale[1], o_acc[n][3] *= rescale[1];
      }
    }
    head_tile_barrier(head_tile);  // P[16 x 32] complete

    // PV: O[16 x 128] += P[16 x 32] V[32 x 128].
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, smem_address(p_tile + (lane % 16) * Tile::kPStride + kk * 16 + (lane / 16) * 8));
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, smem_address(k_tile + (kk * 16 + ((lane / 8) % 2) * 8 + lane % 8) * kStride +
                                          quarter * 128 + nb * 16 + (lane / 16) * 8));
        mma_bf16_16x8x16(o_acc[2 * nb], a, b[0], b[1]);
        mma_bf16_16x8x16(o_acc[2 * nb + 1], a, b[2], b[3]);
      }
    }
    if constexpr (kKTiles == 2) {
      if (s + 1 < num_subtiles) dequantize_subtile(s + 1);  // overlaps the other tiles' MMAs
    }
  }
  cp_async_wait<0>();  // nothing may be in flight at exit (also covers a token with no subtile)

  // Epilogue: normalise (with the sink as a zero-valued candidate), write O and the base-2 LSE;
  // or, for a decode split of several, the split's partial into the scratch.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float total = quad_sum(row_sum[r]);
    float total_exact = quad_sum(row_sum_exact[r]);
    // Each warp summed only its candidates: add the other quarters' sums (fixed order).
    const int row = lane / 4 + 8 * r;
    if (lane % 4 == 0) {
      tile_stats[Tile::kSumStats + quarter * 16 + row] = total;
      tile_stats[Tile::kExactSumStats + quarter * 16 + row] = total_exact;
    }
    head_tile_barrier(head_tile);
    const float* sums = tile_stats + Tile::kSumStats;
    const float* exact_sums = tile_stats + Tile::kExactSumStats;
    total = (sums[row] + sums[16 + row]) + (sums[32 + row] + sums[48 + row]);
    total_exact = (exact_sums[row] + exact_sums[16 + row]) + (exact_sums[32 + row] + exact_sums[48 + row]);
    const int head = head0 + head_tile * 16 + lane / 4 + 8 * r;
    if constexpr (kSplitK) {
      if (head >= params.num_heads) continue;  // a padding row: nothing to write
      if (params.num_splits > 1) {
        const SoftmaxFinal partial = finalize_split_row(row_max[r], {total, total_exact});
        float* split_row = split_output_row(params, blockIdx.y, token, head) + (2 * (lane % 4) + quarter * 128);
#pragma unroll
        for (int n = 0; n < 16; ++n) {
          *reinterpret_cast<float2*>(split_row + n * 8) =
              make_float2(o_acc[n][2 * r] * partial.out_scale, o_acc[n][2 * r + 1] * partial.out_scale);
        }
        if (quarter == 0 && lane % 4 == 0) store_split_lse(params, blockIdx.y, token, head, partial.lse2);
        continue;
      }
    }
    const SoftmaxFinal final_row = finalize_row(params, head, row_max[r], {total, total_exact});
    __nv_bfloat16* out_row = output_row(params, token, head) + (2 * (lane % 4) + quarter * 128);
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      *reinterpret_cast<uint32_t*>(out_row + n * 8) =
          pack_bf16x2(o_acc[n][2 * r] * final_row.out_scale, o_acc[n][2 * r + 1] * final_row.out_scale);
    }
    if (quarter == 0 && lane % 4 == 0) store_lse(params, token, head, final_row.lse2);
  }
}

template <int kHeadTiles, int kStages, int kKTiles>
__global__ void __launch_bounds__(kHeadTiles * PrefillTile::kThreadsPerHeadTile, kHeadTiles == 4 ? 1 : 2)
    sparse_mla_prefill_kernel(const __grid_constant__ PrefillParams params) {
  portable_attention<kHeadTiles, kStages, kKTiles, /*kSplitK=*/false>(params);
}

template <int kHeadTiles, int kStages, int kKTiles>
__global__ void __launch_bounds__(kHeadTiles * PrefillTile::kThreadsPerHeadTile, kHeadTiles == 4 ? 1 : 2)
    sparse_mla_decode_split_kernel(const __grid_constant__ DecodeParams params) {
  launch_dependent_grids();  // the merge may start its CTAs now; they wait for this grid's end
  portable_attention<kHeadTiles, kStages, kKTiles, /*kSplitK=*/true>(params);
}

}  // namespace cake::cuda
