// Hopper (sm_90a) sparse-MLA prefill: warp-specialised, wgmma, mbarrier pipeline.
//
// One CTA per (token, 64 heads); 384 threads in three warpgroups:
//   - warpgroup 0, the producer (56 registers): gathers the candidates' 384-byte rows with 16-byte
//     cp.async into raw stages of 16 rows (4 stages, 3 in flight ahead of the dequant), then
//     dequantizes each stage into a bf16 K tile of 64 rows in the wgmma's 128-byte-swizzled
//     layout, and signals the tile full on an mbarrier. Two K tiles: the dequant of block b + 1
//     overlaps the MMAs of block b.
//   - warpgroups 1 and 2, the consumers (224 registers): consumer w computes the scores of the
//     block's candidates [32 w, 32 w + 32) against all 64 heads (wgmma m64n32k16, Q and K from
//     shared memory, 32 k-steps over the 512 dims), exchanges row maxima with the other consumer,
//     writes its half of P (bf16) to shared memory, and accumulates O[64 heads x its 256 dims]
//     += P[64 x 64] V[64 x 256] (wgmma m64n256k16; V is the K tile read MN-major, no copy).
//     After the PV MMAs complete it releases the K tile on an mbarrier.
// Softmax in base 2, online (running max per row, rescale skipped when the max stays); the
// weights the MMA uses are rounded to bf16 and their sum normalises O, the fp32 sum gives the
// LSE (as the portable kernel and the CPU kernel do). Epilogue: row sums of both consumers in a
// fixed order, sink, O through shared memory (the Q tile) to 16-byte coalesced stores.
#pragma once

#include <cuda_bf16.h>

#include "../../common/softmax_finalize.h"
#include "../../format/nvfp4_format.h"
#include "../cuda_primitives.cuh"
#include "../prefill/candidate_lists.cuh"
#include "../prefill/nvfp4_dequant.cuh"
#include "../prefill/prefill_params.h"
#include "prefill_hopper_layout.h"
#include "sm90_primitives.cuh"

namespace cake::cuda {

// Byte offset of bf16 element (row, column) in a swizzled [8][64][128 B] tile.
__device__ __forceinline__ uint32_t swizzled_offset(int row, int column) {
  const int chunk = (column % 64) / 8;
  return (column / 64) * HopperPrefillLayout::kColumnBlockBytes + row * 128 + ((chunk ^ (row % 8)) * 16) +
         (column % 8) * 2;
}

__global__ void __launch_bounds__(HopperPrefillLayout::kThreads, 1)
    sparse_mla_prefill_hopper_kernel(const __grid_constant__ PrefillParams params) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = HopperPrefillLayout;
  using namespace sm90;
  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t smem_base = smem_address(smem);
  const uint32_t q_tile = smem_base + L::kQOffset;
  const uint32_t k_tiles = smem_base + L::kKOffset;
  const uint32_t p_tile = smem_base + L::kPOffset;
  uint8_t* raw = smem + L::kRawOffset;
  uint8_t* stage_valid = smem + L::kStageValidOffset;
  uint8_t* block_valid = smem + L::kBlockValidOffset;
  float* row_stats = reinterpret_cast<float*>(smem + L::kRowStatsOffset);
  const uint32_t q_full = smem_base + L::kBarrierOffset;
  const uint32_t k_full = q_full + 8;    // + 8 * tile
  const uint32_t k_empty = q_full + 24;  // + 8 * tile

  const int tid = threadIdx.x;
  const int token = blockIdx.x / params.num_head_blocks;
  const int head0 = (blockIdx.x % params.num_head_blocks) * L::kHeads;
  const int length0 = list_length(params.lists[0], token);
  const int length1 = list_length(params.lists[1], token);
  const int blocks0 = (length0 + L::kBlockRows - 1) / L::kBlockRows;
  const int num_blocks = blocks0 + (length1 + L::kBlockRows - 1) / L::kBlockRows;

  if (tid == 0) {
    if ((smem_base & 1023u) != 0) __trap();  // the swizzled tiles need 1024-byte alignment
    mbarrier_init(q_full, 128);
    for (int tile = 0; tile < 2; ++tile) {
      mbarrier_init(k_full + 8 * tile, 128);
      mbarrier_init(k_empty + 8 * tile, 256);
    }
  }
  __syncthreads();

  if (tid < 128) {
    // ------------------------------------------------------------------ producer warpgroup
    release_registers<56>();
    const int num_stages = num_blocks * (L::kBlockRows / L::kStageRows);
    if (num_stages == 0) return;

    // Q rows of this CTA -> swizzled Q tile (joins the copy group of stage 0).
    const __nv_bfloat16* q_block = params.q + (int64_t(token) * params.num_heads + head0) * nvfp4::kHeadDim;
#pragma unroll 4
    for (int unit = tid; unit < L::kHeads * 64; unit += 128) {
      const int row = unit / 64;
      const int column = (unit % 64) * 8;
      cp_async_16(q_tile + swizzled_offset(row, column), q_block + row * nvfp4::kHeadDim + column, true);
    }

    // Thread roles, fixed for the whole loop: stage row `row` (8 threads per row). For the gather
    // the thread copies chunks lane8 + 8 k of the 24 in the row; for the dequant it converts the
    // NoPE groups lane8 + 8 j (j < 4, the last only for lane8 < 4) and RoPE part lane8.
    const int row = tid / 8;
    const int lane8 = tid % 8;

    // Slot of stage s's row `row`: loaded one iteration before its gather is issued, so the
    // index read's latency hides behind a dequant.
    auto load_slot = [&](int s) -> int64_t {
      const int block = s / 4;
      const bool in_main = block < blocks0;
      const CandidateListParams& list = in_main ? params.lists[0] : params.lists[1];
      const int position = (in_main ? block : block - blocks0) * L::kBlockRows + (s % 4) * L::kStageRows + row;
      return candidate_slot(list, token, in_main ? length0 : length1, position);
    };
    auto issue_stage = [&](int s, int64_t slot) {
      const CandidateListParams& list = s / 4 < blocks0 ? params.lists[0] : params.lists[1];
      const bool valid = slot >= 0;
      // Slots are int32, so a 32-bit division suffices unless the page is larger than any slot.
      const int64_t page =
          !valid ? 0 : (list.page_size > slot ? 0 : int64_t(uint32_t(slot) / uint32_t(list.page_size)));
      const int64_t in_page = valid ? slot - page * list.page_size : 0;
      const uint8_t* page_base = list.cache + page * list.page_stride;
      const uint8_t* data_row = page_base + in_page * nvfp4::kDataRowBytes;
      const uint8_t* scale_row = page_base + list.page_size * nvfp4::kDataRowBytes + in_page * nvfp4::kScaleRowBytes;
      uint8_t* stage_row = raw + ((s % L::kStages) * L::kStageRows + row) * L::kRawRowStride;
#pragma unroll
      for (int k = 0; k < 3; ++k) {
        const int chunk = lane8 + 8 * k;
        const uint8_t* src = chunk < nvfp4::kDataRowBytes / 16 ? data_row + chunk * 16
                                                               : scale_row + (chunk - nvfp4::kDataRowBytes / 16) * 16;
        cp_async_16(smem_address(stage_row + chunk * 16), valid ? src : list.cache, valid);
      }
      if (lane8 == 0) stage_valid[(s % L::kStages) * L::kStageRows + row] = valid;
    };

    // Swizzled destinations of this thread's first group (j = 0; group j adds j * 16 KB: two
    // column blocks) and of its RoPE part, relative to the K tile and the stage's first row.
    const int swizzle = row % 8;  // stage rows start at multiples of 16, so tile row % 8 == row % 8
    const uint32_t nope_dst0 = (lane8 / 4) * L::kColumnBlockBytes + row * 128 + (((2 * (lane8 % 4)) ^ swizzle) << 4);
    const uint32_t nope_dst1 = (lane8 / 4) * L::kColumnBlockBytes + row * 128 + (((2 * (lane8 % 4) + 1) ^ swizzle) << 4);
    const uint32_t rope_dst = 7 * L::kColumnBlockBytes + row * 128 + ((lane8 ^ swizzle) << 4);

    auto dequantize_stage = [&](int s) {
      const uint8_t* raw_row = raw + ((s % L::kStages) * L::kStageRows + row) * L::kRawRowStride;
      const uint32_t tile_rows = k_tiles + ((s / 4) % 2) * L::kTileBytes + (s % 4) * L::kStageRows * 128;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int group = lane8 + 8 * j;
        if (j < 3 || lane8 < 4) {
          uint32_t packed[8];
          dequantize_group(*reinterpret_cast<const uint2*>(raw_row + group * 8), raw_row[nvfp4::kDataRowBytes + group],
                           packed);
          st_shared_16(tile_rows + nope_dst0 + j * 2 * L::kColumnBlockBytes, packed[0], packed[1], packed[2], packed[3]);
          st_shared_16(tile_rows + nope_dst1 + j * 2 * L::kColumnBlockBytes, packed[4], packed[5], packed[6], packed[7]);
        }
      }
      const uint4 rope = *reinterpret_cast<const uint4*>(raw_row + nvfp4::kNopeBytes + lane8 * 16);
      st_shared_16(tile_rows + rope_dst, rope.x, rope.y, rope.z, rope.w);
      if (tid < L::kStageRows) {
        block_valid[((s / 4) % 2) * L::kBlockRows + (s % 4) * L::kStageRows + tid] =
            stage_valid[(s % L::kStages) * L::kStageRows + tid];
      }
    };

#pragma unroll
    for (int s = 0; s < L::kStages - 1; ++s) {
      if (s < num_stages) issue_stage(s, load_slot(s));
      cp_async_commit();
    }
    int64_t next_slot = L::kStages - 1 < num_stages ? load_slot(L::kStages - 1) : -1;
    for (int s = 0; s < num_stages; ++s) {
      cp_async_wait<L::kStages - 2>();  // this thread's copies of stage s (and Q) have landed
      if (s == 0) {
        fence_proxy_async();
        mbarrier_arrive(q_full);
      }
      // Everyone's copies of stage s are visible, and everyone finished dequantizing stage s - 1,
      // whose buffer the next gather refills.
      named_barrier<1, 128>();
      if (s + L::kStages - 1 < num_stages) {
        issue_stage(s + L::kStages - 1, next_slot);
        if (s + L::kStages < num_stages) next_slot = load_slot(s + L::kStages);
      }
      cp_async_commit();
      const int block = s / 4;
      if (s % 4 == 0 && block >= 2) mbarrier_wait(k_empty + 8 * (block % 2), ((block / 2) - 1) & 1);
      dequantize_stage(s);
      if (s % 4 == 3) {
        fence_proxy_async();  // the K tile's generic stores -> visible to wgmma
        mbarrier_arrive(k_full + 8 * (block % 2));
      }
    }
    cp_async_wait<0>();
  } else {
    // ------------------------------------------------------------------ consumer warpgroups
    claim_registers<224>();
    const int consumer = tid / 128 - 1;  // 0 or 1: candidate half for S, dim half for O
    const int thread = tid % 128;
    const int warp = thread / 32;
    const int lane = thread % 32;
    const int row0 = warp * 16 + lane / 4;  // this thread's rows: row0 and row0 + 8
    float* max_exchange = row_stats;        // [consumer][64]
    float* sum_exchange = row_stats + 2 * L::kHeads;
    float* exact_exchange = row_stats + 4 * L::kHeads;

    float o_acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o_acc[i] = 0.0f;
    float row_max[2] = {-INFINITY, -INFINITY};
    float row_sum[2] = {0.0f, 0.0f};        // of the bf16 weights the MMA uses
    float row_sum_exact[2] = {0.0f, 0.0f};  // of the fp32 weights (the LSE)

    if (num_blocks > 0) mbarrier_wait(q_full, 0);
    for (int block = 0; block < num_blocks; ++block) {
      const int tile = block % 2;
      const uint32_t k_tile = k_tiles + tile * L::kTileBytes;
      mbarrier_wait(k_full + 8 * tile, (block / 2) & 1);

      // S[64 heads x 32 candidates] = Q[64 x 512] K[32 w .. 32 w + 32, 512]^T.
      float s_acc[16];
      // Descriptors of the k-step's 16 columns: +32 bytes within a 128-byte row, +8 KB per column
      // block; the start address field counts 16-byte units, so offsets add to the descriptor.
      const uint64_t q_desc = smem_descriptor(q_tile, 16, 1024);
      const uint64_t k_desc = smem_descriptor(k_tile + consumer * 32 * 128, 16, 1024);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < 32; ++k) {
        const uint32_t step = ((k / 4) * L::kColumnBlockBytes + (k % 4) * 32) >> 4;
        wgmma_m64n32k16_ss(s_acc, q_desc + step, k_desc + step, k > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      pin_registers(s_acc);

      // Scale to base 2 and mask. s_acc[4 i + e]: row row0 + 8 (e / 2), candidate
      // 32 w + 8 i + 2 (lane % 4) + e % 2.
      const uint8_t* valid = block_valid + tile * L::kBlockRows + consumer * 32;
      float slice_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int column = 8 * i + 2 * (lane % 4);
        const bool valid_even = valid[column] != 0;
        const bool valid_odd = valid[column + 1] != 0;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool ok = (e % 2 == 0) ? valid_even : valid_odd;
          s_acc[4 * i + e] = ok ? s_acc[4 * i + e] * params.score_scale_log2 : -INFINITY;
          slice_max[e / 2] = fmaxf(slice_max[e / 2], s_acc[4 * i + e]);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        slice_max[r] = fmaxf(slice_max[r], __shfl_xor_sync(0xffffffffu, slice_max[r], 1));
        slice_max[r] = fmaxf(slice_max[r], __shfl_xor_sync(0xffffffffu, slice_max[r], 2));
      }
      if (lane % 4 == 0) {
        max_exchange[consumer * L::kHeads + row0] = slice_max[0];
        max_exchange[consumer * L::kHeads + row0 + 8] = slice_max[1];
      }
      // Both consumers' slice maxima visible; also: both finished the previous block's PV, so
      // the P tile may be overwritten.
      named_barrier<2, 256>();

      float rescale[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + 8 * r;
        const float block_max = fmaxf(max_exchange[row], max_exchange[L::kHeads + row]);
        const float new_max = fmaxf(row_max[r], block_max);
        const float reference = new_max == -INFINITY ? 0.0f : new_max;  // all masked so far: no NaN
        rescale[r] = fast_exp2(row_max[r] - reference);
        row_max[r] = new_max;
        float sum = 0.0f;
        float sum_exact = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
          for (int e = 2 * r; e < 2 * r + 2; ++e) {
            const float weight = fast_exp2(s_acc[4 * i + e] - reference);
            sum_exact += weight;
            s_acc[4 * i + e] = __bfloat162float(__float2bfloat16_rn(weight));  // what the MMA uses
            sum += s_acc[4 * i + e];
          }
        }
        row_sum[r] = row_sum[r] * rescale[r] + sum;
        row_sum_exact[r] = row_sum_exact[r] * rescale[r] + sum_exact;
      }
      // This consumer's half of P -> the swizzled P tile (K-major A operand of the PV MMA).
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int column = consumer * 32 + 8 * i + 2 * (lane % 4);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint32_t address = p_tile + swizzled_offset(row0 + 8 * r, column);
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(address),
                       "r"(pack_bf16x2(s_acc[4 * i + 2 * r], s_acc[4 * i + 2 * r + 1])));
        }
      }
      fence_proxy_async();
      if (rescale[0] != 1.0f || rescale[1] != 1.0f) {
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          o_acc[4 * i + 0] *= rescale[0], o_acc[4 * i + 1] *= rescale[0];
          o_acc[4 * i + 2] *= rescale[1], o_acc[4 * i + 3] *= rescale[1];
        }
      }
      named_barrier<3, 256>();  // P[64 x 64] complete

      // O[64 x 256 dims of this consumer] += P[64 x 64] V[64 x 256]: V = the K tile, MN-major.
      const uint64_t p_desc = smem_descriptor(p_tile, 16, 1024);
      const uint64_t v_desc =
          smem_descriptor(k_tile + consumer * 4 * L::kColumnBlockBytes, L::kColumnBlockBytes, 1024);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < 4; ++k) {  // 16 candidates a step: +32 bytes of P rows, +16 rows of V
        wgmma_m64n256k16_ss_bt(o_acc, p_desc + ((k * 32) >> 4), v_desc + ((k * 16 * 128) >> 4), true);
      }
      wgmma_commit();
      wgmma_wait<0>();
      pin_registers(o_acc);
      mbarrier_arrive(k_empty + 8 * tile);  // this thread's reads of the K tile are done
    }

    // Epilogue: both consumers' row sums in a fixed order, sink, normalise, stage O in the Q tile.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float total = row_sum[r];
      total += __shfl_xor_sync(0xffffffffu, total, 1);
      total += __shfl_xor_sync(0xffffffffu, total, 2);
      float total_exact = row_sum_exact[r];
      total_exact += __shfl_xor_sync(0xffffffffu, total_exact, 1);
      total_exact += __shfl_xor_sync(0xffffffffu, total_exact, 2);
      if (lane % 4 == 0) {
        sum_exchange[consumer * L::kHeads + row0 + 8 * r] = total;
        exact_exchange[consumer * L::kHeads + row0 + 8 * r] = total_exact;
      }
    }
    // Sums visible; both consumers are past their last MMA, so the Q tile is free.
    named_barrier<2, 256>();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 8 * r;
      const float total = sum_exchange[row] + sum_exchange[L::kHeads + row];
      const float total_exact = exact_exchange[row] + exact_exchange[L::kHeads + row];
      const int head = head0 + row;
      const float sink2 = params.sink != nullptr ? __ldg(params.sink + head) * 1.4426950408889634f : 0.0f;
      const float out_scale = finalize_softmax(row_max[r], total, params.sink != nullptr, sink2).out_scale;
      const float lse2 = finalize_softmax(row_max[r], total_exact, params.sink != nullptr, sink2).lse2;
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int column = consumer * 256 + 8 * i + 2 * (lane % 4);
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(q_tile + swizzled_offset(row, column)),
                     "r"(pack_bf16x2(o_acc[4 * i + 2 * r] * out_scale, o_acc[4 * i + 2 * r + 1] * out_scale)));
      }
      if (consumer == 0 && lane % 4 == 0) {
        params.out_lse[int64_t(token) * params.num_heads + head] = lse2 * params.lse_scale;
      }
    }
    named_barrier<3, 256>();  // the output tile is complete
    __nv_bfloat16* out_block = params.output + (int64_t(token) * params.num_heads + head0) * nvfp4::kHeadDim;
    const int consumer_thread = tid - 128;
#pragma unroll 4
    for (int unit = consumer_thread; unit < L::kHeads * 64; unit += 256) {
      const int row = unit / 64;
      const int column = (unit % 64) * 8;
      uint4 value;
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(value.x), "=r"(value.y), "=r"(value.z), "=r"(value.w)
                   : "r"(q_tile + swizzled_offset(row, column)));
      *reinterpret_cast<uint4*>(out_block + row * nvfp4::kHeadDim + column) = value;
    }
  }
#endif
}

}  // namespace cake::cuda
