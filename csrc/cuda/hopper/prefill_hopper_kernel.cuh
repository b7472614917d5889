// Hopper (sm_90a) sparse-MLA prefill: warp-specialised, wgmma, mbarrier pipeline.
//
// A persistent grid: CTA c takes the work items (token, block of 64 heads) c, c + gridDim.x, ...
// and streams all their 64-candidate blocks through one pipeline, so the next item's gathers,
// Q load and first dequant overlap the current item's last MMAs and epilogue. 384 threads in
// three warpgroups.
//
// Warpgroup 0, the producer (56 registers), only gathers: for each stage of 16 candidates it
// issues the rows' 16-byte cp.async copies into a raw stage buffer (4 buffers: one block of 64
// candidates ahead) and has the copies themselves arrive on the stage's `raw_full` mbarrier
// (cp.async.mbarrier.arrive.noinc), so it never waits for data. It waits only for `raw_empty`
// before refilling a buffer.
//
// Warpgroups 1 and 2, the consumers (224 registers), per block b of 64 candidates (K tile b % 2,
// b counted over all of the CTA's items):
//   1. S = Q K^T for their half of the candidates: consumer w takes candidates [32 w, 32 w + 32)
//      against all 64 heads (wgmma m64n32k16, both operands in shared memory, 32 k-steps).
//   2. Online softmax in base 2: row maxima exchanged between the consumers (named barrier), the
//      bf16 weights written to the P tile (64 x 64), a second barrier.
//   3. PV issued asynchronously: O[64 heads x the consumer's 256 dims] += P V, wgmma m64n256k16
//      with V = the K tile read MN-major (no copy).
//   4. While the tensor cores run PV, the consumers dequantize block b + 1 (the next item's first
//      block after an item's last) from the raw stages into
//      the other K tile (NVFP4 -> bf16, exact; 128-byte swizzled, the wgmma canonical layout) and
//      release each raw stage on `raw_empty`.
//   5. Wait for PV, proxy fence, a barrier: the next K tile is complete.
// So the dequant (the costly part of reading NVFP4) runs in the shadow of the MMAs, spread over 8
// warps. The weights the MMA uses are rounded to bf16 and their sum normalises O; the fp32 sum
// gives the LSE (as the portable and CPU kernels do). Epilogue: both consumers' row sums in a
// fixed order, the sink, O stored from registers (the Q tile is released after the item's last
// QK^T, so the producer can load the next item's Q during the last block).
#pragma once

#include <cuda_bf16.h>

#include "../../format/nvfp4_format.h"
#include "../common/candidate_gather.cuh"
#include "../common/candidate_lists.cuh"
#include "../common/nvfp4_dequant.cuh"
#include "../common/online_softmax.cuh"
#include "../common/prefill_epilogue.cuh"
#include "../common/prefill_params.h"
#include "../common/ptx_primitives.cuh"
#include "prefill_hopper_layout.h"
#include "sm90_primitives.cuh"

namespace cake::cuda {

// Byte offset of bf16 element (row, column) in a swizzled [8][64][128 B] tile.
__device__ __forceinline__ uint32_t swizzled_offset(int row, int column) {
  const int chunk = (column % 64) / 8;
  return (column / 64) * HopperPrefillLayout::kColumnBlockBytes + row * HopperPrefillLayout::kTileRowBytes +
         ((chunk ^ (row % 8)) * 16) + (column % 8) * 2;
}

// A row's softmax reference moves only when a block's max exceeds it by more than this (log2).
constexpr float kLazyRescaleLog2 = 8.0f;

// One work item: a token and a block of 64 heads, with the token's clamped list lengths.
struct WorkItem {
  int token;
  int head0;
  int length0, length1;  // valid prefixes of the main and extra lists
  int blocks0;           // 64-candidate blocks of the main list
  int num_blocks;        // main + extra
};

__device__ __forceinline__ WorkItem work_item(const PrefillParams& params, int item) {
  WorkItem w;
  w.token = item / params.num_head_blocks;
  w.head0 = (item % params.num_head_blocks) * HopperPrefillLayout::kHeads;
  w.length0 = list_length(params.lists[0], w.token);
  w.length1 = list_length(params.lists[1], w.token);
  constexpr int kRows = HopperPrefillLayout::kBlockRows;
  w.blocks0 = (w.length0 + kRows - 1) / kRows;
  w.num_blocks = w.blocks0 + (w.length1 + kRows - 1) / kRows;
  return w;
}

// Slot of candidate `row` (0..63) of block `block` of an item (-1: masked).
__device__ __forceinline__ int64_t block_slot(const PrefillParams& params, const WorkItem& w, int block, int row) {
  const bool in_main = block < w.blocks0;
  const CandidateListParams& list = params.lists[in_main ? 0 : 1];
  const int position = (in_main ? block : block - w.blocks0) * HopperPrefillLayout::kBlockRows + row;
  return candidate_slot(list, w.token, in_main ? w.length0 : w.length1, position);
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
  uint8_t* block_valid = smem + L::kBlockValidOffset;
  float* row_stats = reinterpret_cast<float*>(smem + L::kRowStatsOffset);
  const uint32_t q_full = smem_base + L::kQFullBarrier;
  const uint32_t raw_full = smem_base + L::kRawFullBarriers;    // + kMbarrierBytes * stage buffer
  const uint32_t raw_empty = smem_base + L::kRawEmptyBarriers;  // + kMbarrierBytes * stage buffer
  const uint32_t q_empty = smem_base + L::kQEmptyBarrier;       // consumers done reading an item's Q
  const int tid = threadIdx.x;
  const int num_items = params.num_tokens * params.num_head_blocks;

  if (tid == 0) {
    if ((smem_base & 1023u) != 0) __trap();  // the swizzled tiles need 1024-byte alignment
    mbarrier_init(q_full, L::kProducerThreads);
    mbarrier_init(q_empty, L::kConsumerThreads);
    for (int stage = 0; stage < L::kStages; ++stage) {
      // One cp.async-completion arrival per producer thread; every consumer thread after its
      // dequant share.
      mbarrier_init(raw_full + L::kMbarrierBytes * stage, L::kProducerThreads);
      mbarrier_init(raw_empty + L::kMbarrierBytes * stage, L::kConsumerThreads);
    }
  }
  __syncthreads();

  if (tid < L::kProducerThreads) {
    // ------------------------------------------------------------------ producer warpgroup
    release_registers<L::kProducerRegisters>();
    // Stage q of a block holds its rows [16 q, +16). Thread: row tid / 8 of the stage, chunks
    // tid % 8 + 8 k (k < 3) of its 24. Blocks are counted over all of this CTA's items
    // (`gblock`): raw buffer q holds stage q of every block, its phase is the block count.
    constexpr int kThreadsPerRow = L::kProducerThreads / L::kStageRows;  // 8
    constexpr int kChunksPerThread = kGatherChunks / kThreadsPerRow;     // 3
    const int row = tid / kThreadsPerRow;
    const int row_lane = tid % kThreadsPerRow;
    int gblock = 0;
    int q_items = 0;  // items with candidates so far: the phase of q_full / q_empty
    for (int item = blockIdx.x; item < num_items; item += gridDim.x) {
      const WorkItem w = work_item(params, item);
      if (w.num_blocks == 0) continue;  // nothing to gather, no Q needed: the consumers write zeros
      // The four slots of a block are loaded together one block ahead.
      int64_t slots[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) slots[q] = block_slot(params, w, 0, q * L::kStageRows + row);
      for (int block = 0; block < w.num_blocks; ++block, ++gblock) {
        int64_t next_slots[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          next_slots[q] = block + 1 < w.num_blocks ? block_slot(params, w, block + 1, q * L::kStageRows + row) : -1;
        }
        const CandidateListParams& list = params.lists[block < w.blocks0 ? 0 : 1];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          if (gblock > 0) mbarrier_wait(raw_empty + L::kMbarrierBytes * q, (gblock - 1) & 1);
          const CandidateRows rows = candidate_rows(list, slots[q]);
          uint8_t* stage_row = raw + (q * L::kStageRows + row) * L::kRawRowStride;
#pragma unroll
          for (int k = 0; k < kChunksPerThread; ++k) {
            gather_chunk(stage_row, list, rows, row_lane + kThreadsPerRow * k);
          }
          // Fires when this thread's copies have landed.
          cp_async_arrive_noinc(raw_full + L::kMbarrierBytes * q);
        }
        if (block == 0) {
          // The item's Q, once both consumers have finished the previous item's QK^T. Q is the
          // only committed copy group (stage copies report through their mbarriers).
          if (q_items > 0) mbarrier_wait(q_empty, (q_items - 1) & 1);
          const __nv_bfloat16* q_block = params.q + (int64_t(w.token) * params.num_heads + w.head0) * nvfp4::kHeadDim;
          constexpr int kUnitsPerRow = nvfp4::kHeadDim / 8;  // 16-byte copies
#pragma unroll 4
          for (int unit = tid; unit < L::kHeads * kUnitsPerRow; unit += L::kProducerThreads) {
            const int q_row = unit / kUnitsPerRow;
            const int column = (unit % kUnitsPerRow) * 8;
            cp_async_16(q_tile + swizzled_offset(q_row, column), q_block + q_row * nvfp4::kHeadDim + column, true);
          }
          cp_async_commit();
          cp_async_wait<0>();
          fence_proxy_async();  // Q is read by wgmma (the async proxy)
          mbarrier_arrive(q_full);
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) slots[q] = next_slots[q];
      }
      ++q_items;
    }
    cp_async_commit();  // nothing in flight at exit
    cp_async_wait<0>();
  } else {
    // ------------------------------------------------------------------ consumer warpgroups
    claim_registers<L::kConsumerRegisters>();
    const float score_scale = score_scale_or_nan(params.score_scale_log2);  // NaN: sm_scale not finite
    const int consumer = tid / L::kWarpgroupThreads - 1;  // 0 or 1: candidate half for S, dim half for O
    const int thread = tid % L::kWarpgroupThreads;
    const int consumer_thread = tid - L::kProducerThreads;  // 0..255
    const int warp = thread / 32;
    const int lane = thread % 32;
    const int row0 = warp * 16 + lane / 4;  // this thread's rows of S and O: row0 and row0 + 8
    float* max_exchange = row_stats + L::kMaxExchange;  // [consumer][64]
    float* sum_exchange = row_stats + L::kSumExchange;
    float* exact_exchange = row_stats + L::kExactSumExchange;

    // Dequant roles per stage (16 rows x (28 NoPE groups + 8 RoPE parts)), fixed for the kernel so
    // all addresses are per-thread constants and every branch is warp-uniform: threads 0..223
    // (7 warps) convert groups item and item + 224 of the stage's 448 (row = item % 16, row
    // fastest so a warp's stores fill whole 128-byte rows; group = item / 16); threads 224..255
    // (one warp) copy the 128 RoPE units, 4 each.
    constexpr int kConvertThreads = L::kStageRows * nvfp4::kNumGroups / 2;  // 224
    constexpr int kGroupsPerPass = kConvertThreads / L::kStageRows;        // 14
    constexpr int kRopeColumnBlock = nvfp4::kNopeDim / 64;                  // 7: the last column block
    const bool converts = consumer_thread < kConvertThreads;
    const int dq_row = consumer_thread % 16;
    const int dq_swizzle = dq_row % 8;  // stage rows start at multiples of 16: tile row % 8 == dq_row % 8
    uint32_t dq_src[2], dq_dst[2][2];   // [pass]: raw offset of the codes, K-tile offsets of the two halves
#pragma unroll
    for (int pass = 0; pass < 2; ++pass) {
      const int group = consumer_thread / 16 + kGroupsPerPass * pass;
      dq_src[pass] = dq_row * L::kRawRowStride + group * 8;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        dq_dst[pass][half] = (group / 4) * L::kColumnBlockBytes + dq_row * L::kTileRowBytes +
                             (((2 * (group % 4) + half) ^ dq_swizzle) << 4);
      }
    }
    const int rope_part0 = (consumer_thread - kConvertThreads) / 16;  // parts rope_part0 + 2 k, k < 4
    // Dequantize global block `gblock` (the CTA's running block count) into K tile gblock % 2.
    auto dequantize_block = [&](int gblock) {
      const uint32_t k_tile = k_tiles + (gblock % 2) * L::kTileBytes;
#pragma unroll 1
      for (int quarter = 0; quarter < 4; ++quarter) {
        const int buffer = quarter;  // stage q of every block lives in buffer q
        mbarrier_wait(raw_full + L::kMbarrierBytes * buffer, gblock & 1);
        const uint8_t* stage = raw + buffer * L::kRawStageBytes;
        const uint32_t tile_rows = k_tile + quarter * L::kStageRows * L::kTileRowBytes;
        if (converts) {
#pragma unroll
          for (int pass = 0; pass < 2; ++pass) {
            const int group = consumer_thread / 16 + kGroupsPerPass * pass;
            uint32_t packed[8];
            dequantize_group(*reinterpret_cast<const uint2*>(stage + dq_src[pass]),
                             stage[dq_row * L::kRawRowStride + nvfp4::kDataRowBytes + group], packed);
            st_shared_16(tile_rows + dq_dst[pass][0], packed[0], packed[1], packed[2], packed[3]);
            st_shared_16(tile_rows + dq_dst[pass][1], packed[4], packed[5], packed[6], packed[7]);
          }
        } else {
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const int part = rope_part0 + 2 * k;
            const uint4 rope =
                *reinterpret_cast<const uint4*>(stage + dq_row * L::kRawRowStride + nvfp4::kNopeBytes + part * 16);
            st_shared_16(tile_rows + kRopeColumnBlock * L::kColumnBlockBytes + dq_row * L::kTileRowBytes +
                             ((part ^ dq_swizzle) << 4),
                         rope.x, rope.y, rope.z, rope.w);
          }
        }
        mbarrier_arrive(raw_empty + L::kMbarrierBytes * buffer);  // this thread's reads of the stage are done
      }
    };
    // Validity of a block's candidates (masked ones are zero rows in K and -inf scores): thread
    // t < 64 loads row t's flag one block ahead, so the index read hides behind an MMA.
    auto load_valid = [&](const WorkItem& w, int block) -> bool {
      if (consumer_thread >= L::kBlockRows || block >= w.num_blocks) return false;
      return block_slot(params, w, block, consumer_thread) >= 0;
    };
    // The next item of this CTA that has candidates, from `item` on (num_items: none).
    auto next_item_with_blocks = [&](int item, WorkItem& w) {
      for (; item < num_items; item += gridDim.x) {
        w = work_item(params, item);
        if (w.num_blocks > 0) return item;
      }
      w.num_blocks = 0;
      return num_items;
    };

    float o_acc[128];
    float row_max[2];        // the softmax reference of each row (see step 2)
    float row_sum[2];        // of the bf16 weights the MMA uses
    float row_sum_exact[2];  // of the fp32 weights (the LSE)
    auto reset = [&] {
#pragma unroll
      for (int i = 0; i < 128; ++i) o_acc[i] = 0.0f;
      row_max[0] = row_max[1] = -INFINITY;
      row_sum[0] = row_sum[1] = 0.0f;
      row_sum_exact[0] = row_sum_exact[1] = 0.0f;
    };

    // Epilogue of an item: both consumers' row sums in a fixed order, the sink, normalise, store
    // O (bf16 pairs; a warp writes 16 contiguous bytes of 8 rows per instruction) and the LSE.
    auto finish_item = [&](const WorkItem& w) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float total = quad_sum(row_sum[r]);
        const float total_exact = quad_sum(row_sum_exact[r]);
        if (lane % 4 == 0) {
          sum_exchange[consumer * L::kHeads + row0 + 8 * r] = total;
          exact_exchange[consumer * L::kHeads + row0 + 8 * r] = total_exact;
        }
      }
      named_barrier<kRowExchangeBarrier, L::kConsumerThreads>();  // both consumers' sums visible
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + 8 * r;
        const float total = sum_exchange[row] + sum_exchange[L::kHeads + row];
        const float total_exact = exact_exchange[row] + exact_exchange[L::kHeads + row];
        const int head = w.head0 + row;
        const SoftmaxFinal final_row = finalize_row(params, head, row_max[r], {total, total_exact});
        __nv_bfloat16* out_row = output_row(params, w.token, head) + (2 * (lane % 4) + consumer * 256);
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          *reinterpret_cast<uint32_t*>(out_row + 8 * i) =
              pack_bf16x2(o_acc[4 * i + 2 * r] * final_row.out_scale, o_acc[4 * i + 2 * r + 1] * final_row.out_scale);
        }
        if (consumer == 0 && lane % 4 == 0) store_lse(params, w.token, head, final_row.lse2);
      }
      // Both read the sums before either item's epilogue rewrites them.
      named_barrier<kRowExchangeBarrier, L::kConsumerThreads>();
    };

    int gblock = 0;   // blocks consumed so far (over this CTA's items)
    int q_items = 0;  // items with candidates so far: the phase of q_full / q_empty
    WorkItem pending{};  // the next item with candidates; its first block is dequantized ahead
    int pending_item = next_item_with_blocks(blockIdx.x, pending);
    if (pending_item < num_items) {
      const bool valid0 = load_valid(pending, 0);
      dequantize_block(0);
      if (consumer_thread < L::kBlockRows) block_valid[consumer_thread] = valid0;
      fence_proxy_async();
      named_barrier<kOperandReadyBarrier, L::kConsumerThreads>();  // K tile 0 and its flags complete
    }

    for (int item = blockIdx.x; item < num_items; item += gridDim.x) {
      reset();
      if (item != pending_item) {  // no candidates: zeros, and the sink's LSE (or -inf)
        finish_item(work_item(params, item));
        continue;
      }
      const WorkItem w = pending;
      // The following item with candidates: its first block is dequantized during this item's
      // last PV. (Its lengths are read here, long before they are needed.)
      pending_item = next_item_with_blocks(item + gridDim.x, pending);
      mbarrier_wait(q_full, q_items & 1);

      for (int block = 0; block < w.num_blocks; ++block, ++gblock) {
        const int tile = gblock % 2;
        const uint32_t k_tile = k_tiles + tile * L::kTileBytes;
        const bool last = block + 1 == w.num_blocks;
        const bool has_next = !last || pending_item < num_items;
        const bool next_valid = last ? load_valid(pending, 0) : load_valid(w, block + 1);
        // 1. S[64 heads x 32 candidates] = Q[64 x 512] K[32 w .. 32 w + 32, 512]^T. Descriptors of
        // k-step k: +32 bytes within a 128-byte row, +8 KB per column block (offsets in 16 B units).
        float s_acc[16];
        const uint64_t q_desc = smem_descriptor(q_tile, 16, 1024);
        const uint64_t k_desc = smem_descriptor(k_tile + consumer * 32 * L::kTileRowBytes, 16, 1024);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < 32; ++k) {
          const uint32_t step = ((k / 4) * L::kColumnBlockBytes + (k % 4) * 32) >> 4;
          wgmma_m64n32k16_ss(s_acc, q_desc + step, k_desc + step, k > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        pin_registers(s_acc);
        if (last) mbarrier_arrive(q_empty);  // this thread's MMAs no longer read the item's Q

        // 2. Softmax. s_acc[4 i + e]: row row0 + 8 (e / 2), candidate 32 w + 8 i + 2 (lane % 4) + e % 2.
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
            s_acc[4 * i + e] = masked_logit2(s_acc[4 * i + e], ok, score_scale);
            slice_max[e / 2] = fmaxf(slice_max[e / 2], s_acc[4 * i + e]);
          }
        }
        slice_max[0] = quad_max(slice_max[0]);
        slice_max[1] = quad_max(slice_max[1]);
        if (lane % 4 == 0) {
          max_exchange[consumer * L::kHeads + row0] = slice_max[0];
          max_exchange[consumer * L::kHeads + row0 + 8] = slice_max[1];
        }
        // Both consumers' slice maxima are visible; both also finished PV of block - 1, so the P
        // tile and K tile (block + 1) % 2 are free.
        named_barrier<kRowExchangeBarrier, L::kConsumerThreads>();

        // The reference the weights are taken against moves only when a block's max exceeds it by
        // more than 2^8 (or on the first valid block): weights stay <= 256, exact relative rounding
        // in bf16 is scale-free, and the O rescale (128 multiplies) becomes rare. Both consumers
        // see the same maxima, so they take the same decisions.
        float rescale[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = row0 + 8 * r;
          const float block_max = fmaxf(max_exchange[row], max_exchange[L::kHeads + row]);
          const bool move = block_max > row_max[r] + kLazyRescaleLog2;  // false while block_max == -inf
          const float new_max = move ? block_max : row_max[r];
          const float reference = softmax_reference(new_max);
          rescale[r] = move ? fast_exp2(row_max[r] - new_max) : 1.0f;
          row_max[r] = new_max;
          WeightSums sums = {0.0f, 0.0f};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
#pragma unroll
            for (int e = 2 * r; e < 2 * r + 2; ++e) s_acc[4 * i + e] = add_weight(sums, s_acc[4 * i + e], reference);
          }
          rescale_add(row_sum[r], row_sum_exact[r], rescale[r], sums);
        }
        // This consumer's half of P -> the swizzled P tile (K-major A operand of the PV MMA).
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int column = consumer * 32 + 8 * i + 2 * (lane % 4);
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            st_shared_4(p_tile + swizzled_offset(row0 + 8 * r, column),
                        pack_bf16x2(s_acc[4 * i + 2 * r], s_acc[4 * i + 2 * r + 1]));
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
        named_barrier<kOperandReadyBarrier, L::kConsumerThreads>();  // P[64 x 64] complete

        // 3. O[64 x this consumer's 256 dims] += P[64 x 64] V[64 x 256], V = the K tile, MN-major.
        const uint64_t p_desc = smem_descriptor(p_tile, 16, 1024);
        const uint64_t v_desc =
            smem_descriptor(k_tile + consumer * 4 * L::kColumnBlockBytes, L::kColumnBlockBytes, 1024);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < 4; ++k) {  // 16 candidates a step: +32 bytes of P rows, +16 rows of V
          wgmma_m64n256k16_ss_bt(o_acc, p_desc + ((k * 32) >> 4), v_desc + ((k * 16 * 128) >> 4), true);
        }
        wgmma_commit();

        // 4. Meanwhile: the next block's dequant into the other K tile (the next item's first
        // block after the item's last).
        if (has_next) {
          dequantize_block(gblock + 1);
          if (consumer_thread < L::kBlockRows) block_valid[(1 - tile) * L::kBlockRows + consumer_thread] = next_valid;
        }
        // 5. PV done; the next K tile is complete and visible to the tensor cores.
        wgmma_wait<0>();
        pin_registers(o_acc);
        fence_proxy_async();
        named_barrier<kOperandReadyBarrier, L::kConsumerThreads>();
      }
      finish_item(w);
      ++q_items;
    }
  }
#endif
}

}  // namespace cake::cuda
