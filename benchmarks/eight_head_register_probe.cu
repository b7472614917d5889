// An eight-head decode with no shared-memory K tile: how many cycles a 64-candidate chunk takes an
// SM when the warps keep O in registers. The decode row 64 x 8 x 4096 runs on the small-heads
// kernel's 16-head unit (half of it padding) at that kernel's chunk rate; this asks whether a form
// made for eight heads is fast enough to be worth building as a kernel (docs/benchmarks.md, "An
// eight-head decode with O in registers (a probe) ...").
//
// Both products by mma.sync m16n8k16, both swapped so that the eight heads are N:
//   S^T[16 candidates x 8 heads] = K Q^T   A = K from the warp's own decode (candidates g, g + 8 of
//                                          a lane quad's rows), B = Q^T from shared memory;
//   O^T[512 dims x 8 heads] += V^T P^T     A = V^T: the same rows decoded again, each 8 x 8 block
//                                          moved to the other pairing by movmatrix; B = P^T by
//                                          movmatrix from the softmax's packed S^T.
// K's dims reach the MMA in the decode's own order: the reduction order of QK^T (Q^T's fragments
// follow it) and the row order of O^T (undone at the store) are free. Two forms:
//   - a warp owns O^T (32 m-tiles x 4 = 128 fp32 registers a thread): eight warps, each walking its
//     own candidates, nothing exchanged until a unit's end (eight partials merged through shared
//     memory);
//   - a pair of warps splits O^T by dims (64 registers each, so 16 warps): both walk the same
//     candidates, each computes S^T over its dims and the two partials are summed through shared
//     memory (two named barriers a step), both run the same softmax, each PV over its dims;
//   - a warp a 64-dim slice (eight slice warps and a softmax warp, `eight_head_slices`): each row
//     decoded once, its fragments kept until the step's weights come back (see there); run with
//     two to four CTAs an SM.
//
// A thread's bytes of a candidate row: 16-byte chunks t, t + 4, t + 8 of the 224 code bytes
// (dims 32 c .. 32 c + 31, two scale groups each), the 8 bytes at 192 + 8 t (group 24 + t), and
// the RoPE dims 16 t .. 16 t + 15 (32 bytes). The rows of a step are copied into a staging buffer
// by cp.async a step ahead (rows 400 bytes apart: the decode's 16-byte reads conflict-free; the
// indices two steps ahead) and read twice (once a product); the decode is the library's bit
// placement (K times 2^-9 in the NoPE dims, Q's NoPE dims times 2^9, O's times 2^9 at the end).
//
// One CTA an SM; a unit is one token's 2048 candidates (the 64 x 8 x 4096 decode's split), in
// steps of 16 (the unit's size is a kernel argument). Random rows of 384 bytes (352 data, 32
// scale: the page-size-1 layout) from a 65,536-row pool (24 MB), every candidate valid. Prints, per form and bit placement,
// the median over CTAs of the slowest warp's cycles a chunk (three launches after a warm-up), and
// checks the outputs: every one written (NaN-poisoned first), the first units' head rows within
// 1e-2 (relative L2) of a float64 reference on the host, a form's two placements the same bits.
// Then the latency rows: one unit of 128 candidates a CTA (one step a warp, the size of a short
// decode split), the L2 flushed before each launch, the kernel timed by CUDA events beside an
// empty kernel, with each CTA's cycles, and the outputs checked again.
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o eight_head_register_probe \
//       benchmarks/eight_head_register_probe.cu && ./eight_head_register_probe
// (bash benchmarks/device_suite.sh eight-head-probe builds and runs it).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../csrc/cuda/common/ptx_primitives.cuh"
#include "../csrc/cuda/hopper/nvfp4_bit_decode.cuh"
#include "../csrc/cuda/portable/sm80_primitives.cuh"  // mma_bf16_16x8x16
#include "probe_check.h"

namespace {

using cake::cuda::fast_exp2_ftz;
using cake::cuda::mma_bf16_16x8x16;
using cake::cuda::pack_bf16x2;
namespace hop = cake::cuda::hopper;
namespace nvfp4 = cake::nvfp4;

constexpr int kHeads = 8;
constexpr int kDims = nvfp4::kHeadDim;
constexpr int kNope = nvfp4::kNopeDim;
constexpr int kStep = 16;                  // candidates a warp step (the MMAs' M)
constexpr int kWarps = 8;
constexpr int kUnitCandidates = 2048;      // the throughput rows' unit: one token's split of 64 x 8 x 4096
constexpr int kShortUnitCandidates = 128;  // the latency rows' unit: one step a warp (a short decode split)
constexpr int kRowBytes = nvfp4::kTokenBytes;     // a page of one token: the data row, then its scale row
constexpr int kRopeOffset = nvfp4::kNopeBytes;
constexpr int kScaleOffset = nvfp4::kDataRowBytes;
constexpr int kStageStride = 400;          // 16-byte units (25 g) mod 8 spread the quads' reads over all banks
constexpr int kStageCopies = kStep * kRowBytes / 16;  // 16-byte copies a step
constexpr int kKSteps = 32;                // 28 NoPE + 4 RoPE (= the PV m-tiles)
constexpr int kNopeKSteps = 28;
constexpr int kPoolRows = 65536;
constexpr int kOwners = 8;                 // O^T partials merged at a unit's end (warps, or warp pairs)
constexpr int kPhases = 5;                 // the latency rows' phase stamps (eight_head_register)

__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t a) {
  uint32_t d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
  return d;
}

// Shared loads on 32-bit shared-window addresses: through generic pointers ptxas kept 64-bit row
// addresses live and spilled beside O^T.
__device__ __forceinline__ uint4 lds_128(uint32_t address) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(address));
  return v;
}
__device__ __forceinline__ uint2 lds_64(uint32_t address) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(address));
  return v;
}
__device__ __forceinline__ uint32_t lds_u16(uint32_t address) {
  uint16_t v;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(address));
  return v;
}
__device__ __forceinline__ uint32_t lds_u8(uint32_t address) {
  uint16_t v;
  asm volatile("ld.shared.u8 %0, [%1];\n" : "=h"(v) : "r"(address));
  return v;
}

// The dim of a thread's code word w (0..13), element e (0..7): words 0..11 are 16-byte chunks t,
// t + 4, t + 8; words 12, 13 the 8 bytes at 192 + 8 t.
__host__ __device__ inline int nope_dim(int t, int w, int e) {
  if (w < 12) return 32 * (t + 4 * (w / 4)) + 8 * (w % 4) + e;
  return 384 + 16 * t + 8 * (w - 12) + e;
}
// The dim of the O^T row `row` (0..15) of m-tile j (= QK^T k-step j): k-slot `row` of that k-step,
// owned by thread row / 2 % 4 of the quad, low or high half of its pair.
__host__ __device__ inline int output_dim(int j, int row) {
  const int slot = row % 8, upper = row / 8;  // rows 8..15 are the k-step's slots 8..15 (a2, a3)
  const int t = slot / 2, half = slot % 2;
  if (j < kNopeKSteps) return nope_dim(t, j / 2, 2 * (j % 2) + upper + 4 * half);
  return kNope + 16 * t + 4 * (j - kNopeKSteps) + 2 * upper + half;
}

struct Shared {
  uint2 q_fragments[kKSteps][32];  // QK^T's B fragments (b0, b1) a k-step and lane
  float unit_reference[kOwners][kHeads];
  float unit_sum[kOwners][kHeads];
  union {
    uint8_t staging[kWarps][2][kStep * kStageStride];
    float partial[kOwners][kKSteps][32][4];  // each warp's O^T at a unit's end
  };
};

// A thread's words of one staged row, a piece at a time: piece i < 3 is 16-byte chunk t + 4 i of
// the codes (four words, two scale groups), piece 3 the 8 bytes at 192 + 8 t (two words, group
// 24 + t). Loaded as each piece is decoded, so that two rows' pieces, not two whole rows, are live.
struct CodePiece {
  uint32_t codes[4];
  uint32_t scales[2];  // decode scales of words 0, 1 and words 2, 3
};

// Code piece i (0, 1, 2: a run-time index) of a row.
__device__ __forceinline__ CodePiece load_chunk_piece(uint32_t row, int t, int i) {
  CodePiece piece;
  const uint4 chunk = lds_128(row + 16 * (t + 4 * i));
  piece.codes[0] = chunk.x;
  piece.codes[1] = chunk.y;
  piece.codes[2] = chunk.z;
  piece.codes[3] = chunk.w;
  const uint32_t pair = hop::e4m3x2_to_decode_scales(uint16_t(lds_u16(row + kScaleOffset + 2 * (t + 4 * i))));
  piece.scales[0] = hop::decode_scale_half<0>(pair);
  piece.scales[1] = hop::decode_scale_half<1>(pair);
  return piece;
}
// Code piece 3 (the tail) of a row.
__device__ __forceinline__ CodePiece load_tail_piece(uint32_t row, int t) {
  CodePiece piece;
  const uint2 tail = lds_64(row + 192 + 8 * t);
  piece.codes[0] = tail.x;
  piece.codes[1] = tail.y;
  piece.codes[2] = piece.codes[3] = 0u;
  piece.scales[0] = piece.scales[1] = hop::e4m3_to_decode_scale(uint8_t(lds_u8(row + kScaleOffset + 24 + t)));
  return piece;
}

// Word w of a piece decoded: pair k = (element k, element k + 4).
template <hop::BitPlacement kPlacement>
__device__ __forceinline__ void decode_word(const CodePiece& piece, int w, uint32_t (&pair)[4]) {
  hop::e2m1x8_to_bf16_pairs<kPlacement>(piece.codes[w], piece.scales[w / 2], pair);
}

// The RoPE words r = 4 i .. 4 i + 3 of a row (dims 16 t + 2 r, + 1).
__device__ __forceinline__ uint4 load_rope(uint32_t row, int t, int i) {
  return lds_128(row + kRopeOffset + 32 * t + 16 * i);
}

// Calls step(ks, a0, a1, a2, a3) for `kWords` words of two rows' pieces: the piece's k-step ks =
// 2 w + h (the caller adds the piece's first k-step) takes pairs 2 h, 2 h + 1 of word w (a0, a2
// from row g, a1, a3 from row g + 8).
template <int kWords, hop::BitPlacement kPlacement, typename Step>
__device__ __forceinline__ void for_piece_k_steps(const CodePiece& top, const CodePiece& bottom, Step&& step) {
#pragma unroll
  for (int w = 0; w < kWords; ++w) {
    uint32_t pt[4], pb[4];
    decode_word<kPlacement>(top, w, pt);
    decode_word<kPlacement>(bottom, w, pb);
#pragma unroll
    for (int h = 0; h < 2; ++h) step(2 * w + h, pt[2 * h], pb[2 * h], pt[2 * h + 1], pb[2 * h + 1]);
  }
}
// The RoPE k-steps (28 .. 31) of rows g and g + 8.
template <typename Step>
__device__ __forceinline__ void for_rope_k_steps(uint32_t top_row, uint32_t bottom_row, int t, Step&& step) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint4 top = load_rope(top_row, t, i), bottom = load_rope(bottom_row, t, i);
    step(kNopeKSteps + 2 * i, top.x, bottom.x, top.y, bottom.y);
    step(kNopeKSteps + 2 * i + 1, top.z, bottom.z, top.w, bottom.w);
  }
}

// Each head's maximum over a step's 16 candidates (score[v]: head 2t + v % 2 of candidate rows g
// (v < 2) and g + 8), over the lanes with the same t.
__device__ __forceinline__ void step_maxima(const float (&score)[4], float (&step_max)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float m = fmaxf(score[h], score[2 + h]);
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 4));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 8));
    step_max[h] = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 16));
  }
}

// A warp's online softmax over a step's 16 candidates, from its S^T fragment (score[v]: head
// 2t + v % 2 of candidate rows g (v < 2) and g + 8, already in log2 units): the step's maximum a
// head, the reference moved (and O^T and the sums rescaled) only when a head's maximum passes it
// by more than 8, the weights, and P^T's B fragments (the packed S^T halves, rows 0..7 and 8..15,
// transposed). kMTiles: the m-tiles of O^T this warp holds.
template <int kMTiles>
__device__ __forceinline__ void step_softmax(const float (&score)[4], float (&reference)[2], float (&sums)[2],
                                             float (&o)[kMTiles][4], uint32_t& pb0, uint32_t& pb1) {
  float step_max[2];
  step_maxima(score, step_max);
  const bool moves = step_max[0] > reference[0] + 8.f || step_max[1] > reference[1] + 8.f;
  if (__any_sync(0xffffffffu, moves)) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float now = fmaxf(reference[h], step_max[h]);
      const float factor = reference[h] == -INFINITY ? 0.f : fast_exp2_ftz(reference[h] - now);
      reference[h] = now;
      sums[h] *= factor;
#pragma unroll
      for (int j = 0; j < kMTiles; ++j) {
        o[j][h] *= factor;
        o[j][2 + h] *= factor;
      }
    }
  }
  float p[4];
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    p[v] = fast_exp2_ftz(score[v] - reference[v % 2]);
    sums[v % 2] += p[v];
  }
  pb0 = movmatrix_trans(pack_bf16x2(p[0], p[1]));
  pb1 = movmatrix_trans(pack_bf16x2(p[2], p[3]));
}

// O^T's m-tile += V^T P^T for one k-step's K fragments: V^T's 8 x 8 blocks are K's moved to the
// other pairing (row g's slots 0..7 become m-rows 0..7 of candidates 0..7 (a0), its slots 8..15
// m-rows 8..15 (a1); row g + 8's the same for candidates 8..15 (a2, a3)).
__device__ __forceinline__ void pv_k_step(float (&o_tile)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t pb0, uint32_t pb1) {
  const uint32_t a[4] = {movmatrix_trans(a0), movmatrix_trans(a2), movmatrix_trans(a1), movmatrix_trans(a3)};
  mma_bf16_16x8x16(o_tile, a, pb0, pb1);
}

// A head's sum over the lanes that hold it (the same t), in a fixed order.
__device__ __forceinline__ float head_total(float value) {
  value += __shfl_xor_sync(0xffffffffu, value, 4);
  value += __shfl_xor_sync(0xffffffffu, value, 8);
  return value + __shfl_xor_sync(0xffffffffu, value, 16);
}

// A unit's end for one owner of O^T: its reference and row sums (summed over the lanes of a head)
// into the shared totals, by the lanes with g = 0 of the warp that `writes`.
__device__ __forceinline__ void publish_unit_totals(const float (&reference)[2], const float (&sums)[2], int owner,
                                                    bool writes, float (&unit_reference)[kOwners][kHeads],
                                                    float (&unit_sum)[kOwners][kHeads]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float total = head_total(sums[h]);
    if (g == 0 && writes) {
      unit_reference[owner][2 * t + h] = reference[h];
      unit_sum[owner][2 * t + h] = total;
    }
  }
}

// A lane's part of a step's row copies, then the commit: `kCopies` 16-byte pieces from byte
// `offset` of the step's row `row`, whose index lane `row` holds (`row_index`: lane l's is the
// step's candidate l % 16), into its place in a staging buffer.
template <int kCopies>
__device__ __forceinline__ void stage_row_part(const uint8_t* __restrict__ pool, int row_index, int row, int offset,
                                               uint32_t buffer) {
  const uint8_t* own_row = pool + size_t(row_index) * kRowBytes;
  const uint8_t* source =
      reinterpret_cast<const uint8_t*>(__shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(own_row), row)) + offset;
  const uint32_t destination = buffer + row * kStageStride + offset;
#pragma unroll
  for (int i = 0; i < kCopies; ++i) cake::cuda::cp_async_16(destination + 16 * i, source + 16 * i, true);
  cake::cuda::cp_async_commit();
}

// Q^T's fragments for a unit's token, in the decode's dim order (NoPE dims times 2^9), built by
// the whole CTA.
__device__ void build_q_fragments(const uint16_t* __restrict__ q, int unit, uint2 (&fragments)[kKSteps][32]) {
  for (int e = threadIdx.x; e < kKSteps * 32; e += blockDim.x) {
    const int ks = e / 32, el = e % 32, head = el / 4, et = el % 4;
    const uint16_t* q_row = q + (size_t(unit) * kHeads + head) * kDims;
    auto value = [&](int dim) { return __bfloat162float(__ushort_as_bfloat16(q_row[dim])); };
    uint32_t b[2];
    for (int r = 0; r < 2; ++r) {
      if (ks < kNopeKSteps) {
        const int w = ks / 2, k = 2 * (ks % 2) + r;
        b[r] = pack_bf16x2(value(nope_dim(et, w, k)) * hop::kBitDecodeUnscale,
                           value(nope_dim(et, w, k + 4)) * hop::kBitDecodeUnscale);
      } else {
        const int dim = kNope + 16 * et + 4 * (ks - kNopeKSteps) + 2 * r;
        b[r] = pack_bf16x2(value(dim), value(dim + 1));
      }
    }
    fragments[ks][el] = make_uint2(b[0], b[1]);
  }
}

// A unit's eight O^T partials (each over its own candidates, with its own reference and row sums)
// merged in a fixed order and stored as bf16 by the whole CTA.
__device__ void merge_unit(const float (&partial)[kOwners][kKSteps][32][4], const float (&reference)[kOwners][kHeads],
                           const float (&sum)[kOwners][kHeads], int unit, uint16_t* __restrict__ out) {
  for (int e = threadIdx.x; e < kKSteps * 32 * 4; e += blockDim.x) {
    const int j = e / 128, el = (e / 4) % 32, v = e % 4;
    const int head = 2 * (el % 4) + v % 2, row = el / 4 + 8 * (v / 2);
    float top_reference = -INFINITY;
    for (int w = 0; w < kOwners; ++w) top_reference = fmaxf(top_reference, reference[w][head]);
    float value = 0.f, total = 0.f;
    for (int w = 0; w < kOwners; ++w) {
      const float factor = fast_exp2_ftz(reference[w][head] - top_reference);
      value += partial[w][j][el][v] * factor;
      total += sum[w][head] * factor;
    }
    const int dim = output_dim(j, row);
    value = value / total * (dim < kNope ? hop::kBitDecodeUnscale : 1.f);
    out[(size_t(unit) * kHeads + head) * kDims + dim] = __bfloat16_as_ushort(__float2bfloat16(value));
  }
}

template <hop::BitPlacement kPlacement>
__global__ void __launch_bounds__(kWarps * 32, 1)
    eight_head_register(const uint8_t* __restrict__ pool, const int* __restrict__ indices,
                        const uint16_t* __restrict__ q, uint16_t* __restrict__ out, int units_per_cta, int unit_candidates, float sm_scale,
                        long long* __restrict__ cycles, long long* __restrict__ phases) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  Shared& smem = *reinterpret_cast<Shared*>(smem_raw);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const float score_scale = sm_scale * 1.4426950408889634f;
  const long long start = clock64();
  // The latency rows' phases (thread 0, the CTA's first unit): cycles from the entry to Q's
  // fragments stored, to step 0's rows landed, to its softmax done, to the last step's PV issued,
  // to the merge's stores issued.
  const bool stamps = phases != nullptr && threadIdx.x == 0;
  auto stamp = [&](int n_unit, int phase) {
    if (stamps && n_unit == 0) phases[size_t(blockIdx.x) * kPhases + phase] = clock64() - start;
  };

#pragma unroll 1
  for (int n_unit = 0; n_unit < units_per_cta; ++n_unit) {
    const int unit = n_unit * gridDim.x + blockIdx.x;
    __syncthreads();  // the previous unit's merge has read the shared partials
    build_q_fragments(q, unit, smem.q_fragments);
    __syncthreads();
    stamp(n_unit, 0);

    const int steps = unit_candidates / (kWarps * kStep);
    const int* list = indices + size_t(unit) * unit_candidates + warp * (unit_candidates / kWarps);
    const uint32_t stage_base = cake::cuda::smem_address(smem.staging[warp][0]);
    const uint32_t q_fragment_base = cake::cuda::smem_address(&smem.q_fragments[0][lane]);
    constexpr int kStageBytes = kStep * kStageStride;
    // Copies a step's 16 rows into a staging buffer: lane l copies half l % 2 (12 of the 24 16-byte
    // pieces) of row l / 2, so that one shuffle gives a lane its row. `row_index` (lane l: the step's
    // candidate l % 16) is loaded two steps ahead, so that the copies' issue never waits for it.
    auto stage_step = [&](int row_index, uint32_t buffer) {
      stage_row_part<kStageCopies / 32>(pool, row_index, lane / 2, 192 * (lane % 2), buffer);
    };
    auto step_index = [&](int s) { return list[(s < steps ? s : 0) * kStep + lane % kStep]; };

    float o[kKSteps][4];
#pragma unroll
    for (int j = 0; j < kKSteps; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float reference[2] = {-INFINITY, -INFINITY};  // heads 2t, 2t + 1 (log2 units)
    float sums[2] = {0.f, 0.f};
    stage_step(step_index(0), stage_base);
    int index_next = step_index(1);

#pragma unroll 1
    for (int s = 0; s < steps; ++s) {
      if (s + 1 < steps) {
        __syncwarp();  // every lane is done with the buffer step s - 1 read
        stage_step(index_next, stage_base + ((s + 1) & 1) * kStageBytes);
        index_next = step_index(s + 2);
        cake::cuda::cp_async_wait<1>();
      } else {
        cake::cuda::cp_async_wait<0>();
      }
      __syncwarp();
      if (s == 0) stamp(n_unit, 1);
      const uint32_t rows = stage_base + (s & 1) * kStageBytes;

      // QK^T: four accumulator chains (k-steps by their index mod 4) to keep the MMAs apart.
      float sp[4][4] = {};
      const uint32_t top_row = rows + g * kStageStride;
      const uint32_t bottom_row = rows + (g + 8) * kStageStride;
      // a0 = row g's slots 2t, 2t + 1; a1 = row g + 8's; a2, a3 the same at slots 2t + 8, 2t + 9.
      // The three chunk pieces in a loop that is not unrolled: ptxas would otherwise decode far
      // ahead and run out of registers beside O^T. A chunk piece's k-steps are 8 i .. 8 i + 7.
#pragma unroll 1
      for (int i = 0; i < 3; ++i) {
        const uint32_t q_piece = q_fragment_base + 8 * i * 32 * sizeof(uint2);
        for_piece_k_steps<4, kPlacement>(load_chunk_piece(top_row, t, i), load_chunk_piece(bottom_row, t, i),
                             [&](int ks, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3) {
                               const uint2 b = lds_64(q_piece + ks * 32 * sizeof(uint2));
                               const uint32_t a[4] = {a0, a1, a2, a3};
                               mma_bf16_16x8x16(sp[ks % 4], a, b.x, b.y);
                             });
      }
      auto qk_step = [&](int ks, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3) {
        const uint2 b = lds_64(q_fragment_base + ks * 32 * sizeof(uint2));
        const uint32_t a[4] = {a0, a1, a2, a3};
        mma_bf16_16x8x16(sp[ks % 4], a, b.x, b.y);
      };
      for_piece_k_steps<2, kPlacement>(load_tail_piece(top_row, t), load_tail_piece(bottom_row, t),
                           [&](int ks, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3) { qk_step(24 + ks, a0, a1, a2, a3); });
      for_rope_k_steps(top_row, bottom_row, t, qk_step);
      float score[4];
#pragma unroll
      for (int v = 0; v < 4; ++v) score[v] = (sp[0][v] + sp[1][v] + sp[2][v] + sp[3][v]) * score_scale;

      uint32_t pb0, pb1;
      step_softmax(score, reference, sums, o, pb0, pb1);
      if (s == 0) stamp(n_unit, 2);

      // PV: each k-step's K fragments decoded again and moved to V^T's pairing (m-tile j = k-step j).
      auto pv_step = [&](int ks, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3) {
        pv_k_step(o[ks], a0, a1, a2, a3, pb0, pb1);
      };
#pragma unroll
      for (int i = 0; i < 3; ++i)
        for_piece_k_steps<4, kPlacement>(load_chunk_piece(top_row, t, i), load_chunk_piece(bottom_row, t, i),
                             [&](int ks, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3) { pv_step(8 * i + ks, a0, a1, a2, a3); });
      for_piece_k_steps<2, kPlacement>(load_tail_piece(top_row, t), load_tail_piece(bottom_row, t),
                           [&](int ks, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3) { pv_step(24 + ks, a0, a1, a2, a3); });
      for_rope_k_steps(top_row, bottom_row, t, pv_step);
    }

    // The unit's end: each warp's reference and row sums, its O^T, then the eight merged.
    stamp(n_unit, 3);
    publish_unit_totals(reference, sums, warp, true, smem.unit_reference, smem.unit_sum);
    __syncthreads();  // every warp is done with its staging (the partials overlay it)
#pragma unroll
    for (int j = 0; j < kKSteps; ++j)
      *reinterpret_cast<float4*>(smem.partial[warp][j][lane]) = make_float4(o[j][0], o[j][1], o[j][2], o[j][3]);
    __syncthreads();
    merge_unit(smem.partial, smem.unit_reference, smem.unit_sum, unit, out);
    stamp(n_unit, 4);
  }
  const long long elapsed = clock64() - start;
  if (lane == 0) cycles[size_t(blockIdx.x) * kWarps + warp] = elapsed;
}

// The same products with O^T split by dims between the two warps of a pair (64 registers each),
// so that 16 warps fit: warp `half` 0 owns k-steps / m-tiles 0..15 (code pieces 0, 1), half 1 owns
// 16..31 (piece 2, the tail, RoPE). Both warps of a pair walk the same candidates: each computes
// S^T over its dims, the two partials are summed through shared memory (the same order in both, so
// both run the same softmax), and each runs PV over its dims. Two named barriers a step a pair.
constexpr int kPairs = 8;
constexpr int kPairWarps = 2 * kPairs;
constexpr int kPairBuffers = 3;  // a step's copies go out a step ahead into the buffer read two steps before

struct PairShared {
  uint2 q_fragments[kKSteps][32];
  float4 scores[kPairs][2][2][32];  // [pair][step parity][half][lane]: the S^T partials
  float unit_reference[kOwners][kHeads];
  float unit_sum[kOwners][kHeads];
  union {
    uint8_t staging[kPairs][kPairBuffers][kStep * kStageStride];
    float partial[kOwners][kKSteps][32][4];  // each pair's O^T (half h wrote m-tiles 16 h ..)
  };
};

template <hop::BitPlacement kPlacement>
__global__ void __launch_bounds__(kPairWarps * 32, 1)
    eight_head_pairs(const uint8_t* __restrict__ pool, const int* __restrict__ indices,
                     const uint16_t* __restrict__ q, uint16_t* __restrict__ out, int units_per_cta, int unit_candidates, float sm_scale,
                     long long* __restrict__ cycles, long long* __restrict__ /*phases: not recorded by this form*/) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  PairShared& smem = *reinterpret_cast<PairShared*>(smem_raw);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int pair = warp % kPairs, half = warp / kPairs;
  const int g = lane / 4, t = lane % 4;
  const float score_scale = sm_scale * 1.4426950408889634f;
  auto pair_barrier = [&]() { asm volatile("bar.sync %0, 64;\n" ::"r"(1 + pair) : "memory"); };
  const long long start = clock64();

#pragma unroll 1
  for (int n_unit = 0; n_unit < units_per_cta; ++n_unit) {
    const int unit = n_unit * gridDim.x + blockIdx.x;
    __syncthreads();  // the previous unit's merge has read the shared partials
    build_q_fragments(q, unit, smem.q_fragments);
    __syncthreads();

    const int steps = unit_candidates / (kPairs * kStep);
    const int* list = indices + size_t(unit) * unit_candidates + pair * (unit_candidates / kPairs);
    const uint32_t stage_base = cake::cuda::smem_address(smem.staging[pair][0]);
    const uint32_t q_fragment_base = cake::cuda::smem_address(&smem.q_fragments[16 * half][lane]);
    constexpr int kStageBytes = kStep * kStageStride;
    // Each warp copies half the step's rows (8 h ..): lane l a quarter (96 bytes) of row 8 h + l / 4.
    auto stage_step = [&](int row_index, uint32_t buffer) {
      stage_row_part<6>(pool, row_index, 8 * half + lane / 4, 96 * (lane % 4), buffer);
    };
    auto step_index = [&](int s) { return list[(s < steps ? s : 0) * kStep + lane % kStep]; };

    float o[16][4];
#pragma unroll
    for (int j = 0; j < 16; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float reference[2] = {-INFINITY, -INFINITY};
    float sums[2] = {0.f, 0.f};
    stage_step(step_index(0), stage_base);
    int index_next = step_index(1);

#pragma unroll 1
    for (int s = 0; s < steps; ++s) {
      if (s + 1 < steps) {
        stage_step(index_next, stage_base + ((s + 1) % kPairBuffers) * kStageBytes);
        index_next = step_index(s + 2);
        cake::cuda::cp_async_wait<1>();
      } else {
        cake::cuda::cp_async_wait<0>();
      }
      pair_barrier();  // both warps' copies of this step landed
      const uint32_t rows = stage_base + (s % kPairBuffers) * kStageBytes;
      const uint32_t top_row = rows + g * kStageStride;
      const uint32_t bottom_row = rows + (g + 8) * kStageStride;

      float sp[4][4] = {};
      auto qk_step = [&](int ks, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3) {  // ks: this half's 0..15
        const uint2 b = lds_64(q_fragment_base + ks * 32 * sizeof(uint2));
        const uint32_t a[4] = {a0, a1, a2, a3};
        mma_bf16_16x8x16(sp[ks % 4], a, b.x, b.y);
      };
      if (half == 0) {
#pragma unroll 1
        for (int i = 0; i < 2; ++i) {
          const uint32_t q_piece = q_fragment_base + 8 * i * 32 * sizeof(uint2);
          for_piece_k_steps<4, kPlacement>(load_chunk_piece(top_row, t, i), load_chunk_piece(bottom_row, t, i),
                                           [&](int ks, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3) {
                                             const uint2 b = lds_64(q_piece + ks * 32 * sizeof(uint2));
                                             const uint32_t a[4] = {a0, a1, a2, a3};
                                             mma_bf16_16x8x16(sp[ks % 4], a, b.x, b.y);
                                           });
        }
      } else {
        for_piece_k_steps<4, kPlacement>(load_chunk_piece(top_row, t, 2), load_chunk_piece(bottom_row, t, 2), qk_step);
        for_piece_k_steps<2, kPlacement>(load_tail_piece(top_row, t), load_tail_piece(bottom_row, t),
                                         [&](int ks, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3) { qk_step(8 + ks, a0, a1, a2, a3); });
        for_rope_k_steps(top_row, bottom_row, t,
                         [&](int ks, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3) { qk_step(ks - 16, a0, a1, a2, a3); });
      }
      smem.scores[pair][s & 1][half][lane] =
          make_float4(sp[0][0] + sp[1][0] + sp[2][0] + sp[3][0], sp[0][1] + sp[1][1] + sp[2][1] + sp[3][1],
                      sp[0][2] + sp[1][2] + sp[2][2] + sp[3][2], sp[0][3] + sp[1][3] + sp[2][3] + sp[3][3]);
      pair_barrier();
      const float4 low = smem.scores[pair][s & 1][0][lane], high = smem.scores[pair][s & 1][1][lane];
      const float score[4] = {(low.x + high.x) * score_scale, (low.y + high.y) * score_scale,
                              (low.z + high.z) * score_scale, (low.w + high.w) * score_scale};

      uint32_t pb0, pb1;
      step_softmax(score, reference, sums, o, pb0, pb1);

      auto pv_step = [&](int j, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3) {  // j: this half's m-tile
        pv_k_step(o[j], a0, a1, a2, a3, pb0, pb1);
      };
      if (half == 0) {
#pragma unroll
        for (int i = 0; i < 2; ++i)
          for_piece_k_steps<4, kPlacement>(load_chunk_piece(top_row, t, i), load_chunk_piece(bottom_row, t, i),
                                           [&](int ks, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3) { pv_step(8 * i + ks, a0, a1, a2, a3); });
      } else {
        for_piece_k_steps<4, kPlacement>(load_chunk_piece(top_row, t, 2), load_chunk_piece(bottom_row, t, 2), pv_step);
        for_piece_k_steps<2, kPlacement>(load_tail_piece(top_row, t), load_tail_piece(bottom_row, t),
                                         [&](int ks, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3) { pv_step(8 + ks, a0, a1, a2, a3); });
        for_rope_k_steps(top_row, bottom_row, t,
                         [&](int ks, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3) { pv_step(ks - 16, a0, a1, a2, a3); });
      }
    }

    // The unit's end: the pair's reference and row sums (the same in both halves), each half's
    // m-tiles of O^T, then the eight pairs merged.
    publish_unit_totals(reference, sums, pair, half == 0, smem.unit_reference, smem.unit_sum);
    __syncthreads();  // every pair is done with its staging (the partials overlay it)
#pragma unroll
    for (int j = 0; j < 16; ++j)
      *reinterpret_cast<float4*>(smem.partial[pair][16 * half + j][lane]) = make_float4(o[j][0], o[j][1], o[j][2], o[j][3]);
    __syncthreads();
    merge_unit(smem.partial, smem.unit_reference, smem.unit_sum, unit, out);
  }
  const long long elapsed = clock64() - start;
  if (lane == 0) cycles[size_t(blockIdx.x) * kPairWarps + warp] = elapsed;
}

// The third form: a warp a 64-dim slice, each row decoded once. Warps 0..6 own the NoPE dims
// 64 w .. 64 w + 63 (32 code bytes and 4 scale bytes of a row), warp 7 the RoPE dims, warp 8 the
// softmax. All nine walk the same candidates, 16 a step: a slice warp copies its slice of the
// step's rows (cp.async, kDepth steps ahead), decodes it into QK^T's A fragments (a lane: rows g and
// g + 8, the 16 dims of one scale group), computes its partial S^T over its 64 dims (4 k-steps),
// stores it, and keeps the fragments in registers until the softmax warp has turned the eight
// partials' sum into P^T; then PV over the same fragments moved to V^T's pairing by movmatrix,
// into its O^T slice (4 m-tiles: 16 registers). So a row is decoded once and no K tile exists;
// O^T is split by dims, so nothing is merged at a unit's end. The cost moved elsewhere: the
// partials' exchange (one 16-byte store a lane a step, eight 16-byte loads for the softmax warp)
// and two named barriers a step, hidden by several CTAs an SM or straddled (kStraddle below).
// Timed on an H100 (docs/benchmarks.md, "Code on the converters' path costs ..."): ~0.75x the
// library's chunk time at 64 x 8 x 4096, ~200 SASS instructions a NoPE slice warp a step.
constexpr int kSliceWarps = 8;                       // 7 NoPE slices + the RoPE slice
constexpr int kNopeSlices = 7;
constexpr int kSliceDims = 64;
constexpr int kSliceFormWarps = kSliceWarps + 1;     // + the softmax warp
constexpr int kSliceFormThreads = kSliceFormWarps * 32;
constexpr int kRopeStageStride = 144;                 // 128 + 16: a quarter-warp's 16-byte reads spread over all banks
static_assert(kNopeSlices * kSliceDims == kNope, "seven slices cover the NoPE dims");

struct SliceStage {
  uint8_t codes[kNopeSlices][kStep][32];
  uint8_t scales[kNopeSlices][kStep][4];
  uint8_t rope[kStep][kRopeStageStride];
};
// kDepth: steps whose copies are in flight ahead of the one decoded (kDepth + 1 buffers).
template <int kDepth>
struct SliceShared {
  SliceStage stage[kDepth + 1];
  int list[kUnitCandidates];           // the unit's candidates, copied in at its start
  float4 partial[2][kSliceWarps][32];  // [step parity][slice warp][lane]: S^T partials
  uint2 p[2][32];                      // P^T's B fragments (pb0, pb1) a lane
  float2 factor[2][32];                // O^T's rescale of heads 2t, 2t + 1 (1 unless the reference moved)
  int moved[2];
  float inverse_sum[kHeads];
};

// Barrier ids: the partials of step parity b are stored (kPartialsReady + b: the slice warps
// arrive, the softmax warp waits), P^T of parity b is ready (kWeightsReady + b: the other way),
// the unit's row sums are published (kUnitSums).
enum SliceBarrier : int { kSlicePartialsReady = 1, kSliceWeightsReady = 3, kSliceUnitSums = 5 };
// The library's named-barrier wrappers over the form's nine warps.
template <int kId>
__device__ __forceinline__ void slice_arrive() {
  cake::cuda::named_barrier_arrive<kId, kSliceFormThreads>();
}
template <int kId>
__device__ __forceinline__ void slice_wait() {
  cake::cuda::named_barrier<kId, kSliceFormThreads>();
}
template <int kBase>
__device__ __forceinline__ void slice_arrive_parity(int parity) {
  if (parity) slice_arrive<kBase + 1>(); else slice_arrive<kBase>();
}
template <int kBase>
__device__ __forceinline__ void slice_wait_parity(int parity) {
  if (parity) slice_wait<kBase + 1>(); else slice_wait<kBase>();
}

// The dim of k-slot `slot` (0..15) of slice warp `w`'s k-step `ks` (0..3) = O^T row `slot` of its
// m-tile ks. NoPE: lane t's scale group 4 w + t, word ks / 2, pair 2 (ks % 2) (+ 1 for slots
// 8..15), element k or k + 4 of it. RoPE: lane t's dims 448 + 16 t .., bf16 pair 2 ks (+ 1).
__host__ __device__ inline int slice_dim(int w, int ks, int slot) {
  const int t = (slot % 8) / 2, r = slot % 2, upper = slot / 8;
  if (w < kNopeSlices) return kSliceDims * w + 16 * t + 8 * (ks / 2) + 2 * (ks % 2) + upper + 4 * r;
  return kNope + 16 * t + 4 * ks + 2 * upper + r;
}

// A slice warp's QK^T A fragments for one step (4 k-steps x a0..a3).
struct SliceFragments {
  uint32_t a[4][4];
};

template <hop::BitPlacement kPlacement>
__device__ __forceinline__ void decode_slice(const SliceStage& stage, int w, int g, int t, SliceFragments& k) {
  if (w < kNopeSlices) {
    const uint2 top = *reinterpret_cast<const uint2*>(&stage.codes[w][g][8 * t]);
    const uint2 bottom = *reinterpret_cast<const uint2*>(&stage.codes[w][g + 8][8 * t]);
    const uint32_t top_scale = hop::e4m3_to_decode_scale(stage.scales[w][g][t]);
    const uint32_t bottom_scale = hop::e4m3_to_decode_scale(stage.scales[w][g + 8][t]);
#pragma unroll
    for (int word = 0; word < 2; ++word) {
      uint32_t pt[4], pb[4];
      hop::e2m1x8_to_bf16_pairs<kPlacement>(word == 0 ? top.x : top.y, top_scale, pt);
      hop::e2m1x8_to_bf16_pairs<kPlacement>(word == 0 ? bottom.x : bottom.y, bottom_scale, pb);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int ks = 2 * word + h;
        k.a[ks][0] = pt[2 * h];
        k.a[ks][1] = pb[2 * h];
        k.a[ks][2] = pt[2 * h + 1];
        k.a[ks][3] = pb[2 * h + 1];
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint4 top = *reinterpret_cast<const uint4*>(&stage.rope[g][32 * t + 16 * i]);
      const uint4 bottom = *reinterpret_cast<const uint4*>(&stage.rope[g + 8][32 * t + 16 * i]);
      k.a[2 * i][0] = top.x;
      k.a[2 * i][1] = bottom.x;
      k.a[2 * i][2] = top.y;
      k.a[2 * i][3] = bottom.y;
      k.a[2 * i + 1][0] = top.z;
      k.a[2 * i + 1][1] = bottom.z;
      k.a[2 * i + 1][2] = top.w;
      k.a[2 * i + 1][3] = bottom.w;
    }
  }
}

// A slice warp's copies of one step: lane l takes row l / 2 (NoPE: 16 bytes, half l % 2 of the
// slice's codes; lanes 0..15 also row l's 4 scale bytes; RoPE: 64 bytes, half l % 2 of the RoPE
// dims). `row_index`: lane l's is the step's candidate l / 2 (every lane loads its own).
__device__ __forceinline__ void copy_slice_step(const uint8_t* __restrict__ pool, int w, int lane, int row_index,
                                                int scale_row_index, SliceStage& stage) {
  const uint8_t* row = pool + size_t(row_index) * kRowBytes;
  const int r = lane / 2, half = lane % 2;
  if (w < kNopeSlices) {
    cake::cuda::cp_async_16(cake::cuda::smem_address(&stage.codes[w][r][16 * half]), row + 32 * w + 16 * half, true);
    if (lane < kStep)
      cake::cuda::cp_async_4(cake::cuda::smem_address(&stage.scales[w][lane][0]),
                             pool + size_t(scale_row_index) * kRowBytes + kScaleOffset + 4 * w);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      cake::cuda::cp_async_16(cake::cuda::smem_address(&stage.rope[r][64 * half + 16 * i]),
                              row + kRopeOffset + 64 * half + 16 * i, true);
  }
  cake::cuda::cp_async_commit();
}

// Q^T's B fragments of a slice warp's 4 k-steps for a unit's token (NoPE dims times 2^9).
__device__ __forceinline__ void load_slice_q(const uint16_t* __restrict__ q, int unit, int w, int g, int t,
                                             uint32_t (&b)[4][2]) {
  const uint16_t* q_row = q + (size_t(unit) * kHeads + g) * kDims;
  const float factor = w < kNopeSlices ? hop::kBitDecodeUnscale : 1.f;
  auto value = [&](int dim) { return __bfloat162float(__ushort_as_bfloat16(q_row[dim])) * factor; };
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    b[ks][0] = pack_bf16x2(value(slice_dim(w, ks, 2 * t)), value(slice_dim(w, ks, 2 * t + 1)));
    b[ks][1] = pack_bf16x2(value(slice_dim(w, ks, 2 * t + 8)), value(slice_dim(w, ks, 2 * t + 9)));
  }
}

// The softmax warp's step: the eight partials summed in a fixed order, then the online softmax
// of step_softmax (reference moved only past 8), its rescale factors and P^T published.
template <typename Shared>
__device__ __forceinline__ void slice_softmax_step(Shared& smem, int parity, int lane, float score_scale,
                                                   float (&reference)[2], float (&sums)[2]) {
  float4 total = smem.partial[parity][0][lane];
#pragma unroll
  for (int w = 1; w < kSliceWarps; ++w) {
    const float4 part = smem.partial[parity][w][lane];
    total.x += part.x;
    total.y += part.y;
    total.z += part.z;
    total.w += part.w;
  }
  const float score[4] = {total.x * score_scale, total.y * score_scale, total.z * score_scale, total.w * score_scale};
  float step_max[2];
  step_maxima(score, step_max);
  const bool moves = __any_sync(0xffffffffu, step_max[0] > reference[0] + 8.f || step_max[1] > reference[1] + 8.f);
  float factor[2] = {1.f, 1.f};
  if (moves) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float now = fmaxf(reference[h], step_max[h]);
      factor[h] = reference[h] == -INFINITY ? 0.f : fast_exp2_ftz(reference[h] - now);
      reference[h] = now;
      sums[h] *= factor[h];
    }
  }
  float p[4];
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    p[v] = fast_exp2_ftz(score[v] - reference[v % 2]);
    sums[v % 2] += p[v];
  }
  smem.p[parity][lane] = make_uint2(movmatrix_trans(pack_bf16x2(p[0], p[1])), movmatrix_trans(pack_bf16x2(p[2], p[3])));
  smem.factor[parity][lane] = make_float2(factor[0], factor[1]);
  if (lane == 0) smem.moved[parity] = moves;
}

// kStraddle: a slice warp decodes step s + 1 and issues its QK^T before step s's PV, so the
// softmax of step s runs beside work of its own CTA (two steps' fragments live: ~86 registers,
// two CTAs an SM); without it each step is copied, decoded, multiplied, then waits for its own
// weights (one step's fragments: more CTAs an SM hide the wait instead). The unit's list comes
// into shared memory at its start and a step's rows are copied kDepth steps ahead.
template <hop::BitPlacement kPlacement, int kCtasPerSm, bool kStraddle, int kDepth>
__global__ void __launch_bounds__(kSliceFormThreads, kCtasPerSm)
    eight_head_slices(const uint8_t* __restrict__ pool, const int* __restrict__ indices,
                      const uint16_t* __restrict__ q, uint16_t* __restrict__ out, int units_per_cta, int unit_candidates,
                      float sm_scale, long long* __restrict__ cycles, long long* __restrict__ /*phases*/) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  SliceShared<kDepth>& smem = *reinterpret_cast<SliceShared<kDepth>*>(smem_raw);
  constexpr int kBuffers = kDepth + 1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const float score_scale = sm_scale * 1.4426950408889634f;
  const long long start = clock64();

#pragma unroll 1
  for (int n_unit = 0; n_unit < units_per_cta; ++n_unit) {
    const int unit = n_unit * gridDim.x + blockIdx.x;
    const int steps = unit_candidates / kStep;
    // The unit's list into shared memory by every thread, so that no copy waits on an index load.
    __syncthreads();  // every slice warp is done with the previous unit's list
    const int* list = indices + size_t(unit) * unit_candidates;
    for (int i = threadIdx.x; i < unit_candidates / 4; i += blockDim.x)
      cake::cuda::cp_async_16(cake::cuda::smem_address(&smem.list[4 * i]), list + 4 * i, true);
    cake::cuda::cp_async_commit();
    cake::cuda::cp_async_wait<0>();
    __syncthreads();
    if (warp == kSliceWarps) {
      // The softmax warp.
      float reference[2] = {-INFINITY, -INFINITY};
      float sums[2] = {0.f, 0.f};
#pragma unroll 1
      for (int s = 0; s < steps; ++s) {
        slice_wait_parity<kSlicePartialsReady>(s & 1);
        slice_softmax_step(smem, s & 1, lane, score_scale, reference, sums);
        slice_arrive_parity<kSliceWeightsReady>(s & 1);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float total = head_total(sums[h]);
        if (g == 0) smem.inverse_sum[2 * t + h] = 1.f / total;
      }
      slice_arrive<kSliceUnitSums>();
      continue;
    }

    // Lane l copies row l / 2 of each step (and lanes 0..15 row l's scales).
    auto row_of = [&](int s) { return smem.list[s * kStep + lane / 2]; };
    auto scale_row_of = [&](int s) { return smem.list[s * kStep + lane % kStep]; };
    uint32_t qb[4][2];
    load_slice_q(q, unit, warp, g, t, qb);
    float o[4][4] = {};
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      if (d < steps) copy_slice_step(pool, warp, lane, row_of(d), scale_row_of(d), smem.stage[d]);
      else cake::cuda::cp_async_commit();
    }
    SliceFragments held;  // the step whose PV is next

    // Step s's PV, once the softmax warp has published its weights (and rescale factors).
    auto pv_step = [&](int s, const SliceFragments& k) {
      const int parity = s & 1;
      slice_wait_parity<kSliceWeightsReady>(parity);
      const uint2 pb = smem.p[parity][lane];
      if (smem.moved[parity]) {
        const float2 f = smem.factor[parity][lane];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          o[j][0] *= f.x;
          o[j][1] *= f.y;
          o[j][2] *= f.x;
          o[j][3] *= f.y;
        }
      }
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) pv_k_step(o[ks], k.a[ks][0], k.a[ks][1], k.a[ks][2], k.a[ks][3], pb.x, pb.y);
    };

#pragma unroll 1
    for (int s = 0; s <= steps; ++s) {
      SliceFragments fresh;
      if (s < steps) {
        __syncwarp();  // every lane has decoded step s - 1 out of the buffer the copies below fill
        if (s + kDepth < steps) {
          copy_slice_step(pool, warp, lane, row_of(s + kDepth), scale_row_of(s + kDepth),
                          smem.stage[(s + kDepth) % kBuffers]);
        } else {
          cake::cuda::cp_async_commit();
        }
        cake::cuda::cp_async_wait<kDepth>();
        __syncwarp();
        decode_slice<kPlacement>(smem.stage[s % kBuffers], warp, g, t, fresh);
        float sp[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) mma_bf16_16x8x16(sp, fresh.a[ks], qb[ks][0], qb[ks][1]);
        smem.partial[s & 1][warp][lane] = make_float4(sp[0], sp[1], sp[2], sp[3]);
        slice_arrive_parity<kSlicePartialsReady>(s & 1);
        if constexpr (!kStraddle) pv_step(s, fresh);
      }
      if constexpr (kStraddle) {
        if (s > 0) pv_step(s - 1, held);
        held = fresh;
      }
    }

    // The unit's end: O^T's slice normalised and stored (NoPE dims times 2^9).
    slice_wait<kSliceUnitSums>();
    const float inverse[2] = {smem.inverse_sum[2 * t], smem.inverse_sum[2 * t + 1]};
    const float unscale = warp < kNopeSlices ? hop::kBitDecodeUnscale : 1.f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int head = 2 * t + v % 2, dim = slice_dim(warp, j, g + 8 * (v / 2));
        out[(size_t(unit) * kHeads + head) * kDims + dim] =
            __bfloat16_as_ushort(__float2bfloat16(o[j][v] * inverse[v % 2] * unscale));
      }
    }
  }
  const long long elapsed = clock64() - start;
  if (lane == 0) cycles[size_t(blockIdx.x) * kSliceFormWarps + warp] = elapsed;
}

__global__ void empty_kernel() {}

uint32_t next_random(uint64_t& state) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return uint32_t(state >> 33);
}

uint16_t bf16_bits(float f) {  // round to nearest even (finite inputs)
  uint32_t word;
  std::memcpy(&word, &f, 4);
  return uint16_t((word + 0x7fffu + ((word >> 16) & 1)) >> 16);
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  int device = 0, sms = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int units_per_cta = 4;
  constexpr int kMaxCtasPerSm = 4;  // the slice form runs up to four CTAs an SM, each its own units
  const size_t units = size_t(sms) * units_per_cta * kMaxCtasPerSm;
  const float sm_scale = 1.f / std::sqrt(576.f);
  uint64_t state = 12345;
  std::vector<uint8_t> pool(size_t(kPoolRows) * kRowBytes);
  for (int r = 0; r < kPoolRows; ++r) {
    uint8_t* row = &pool[size_t(r) * kRowBytes];
    for (int i = 0; i < kRopeOffset; ++i) row[i] = uint8_t(next_random(state));
    for (int i = 0; i < 64; ++i) {  // RoPE: bf16 of magnitude below ~4
      const float value = (int(next_random(state) % 2001) - 1000) / 250.f;
      const uint16_t bits = bf16_bits(value);
      std::memcpy(row + kRopeOffset + 2 * i, &bits, 2);
    }
    for (int i = 0; i < 28; ++i) row[kScaleOffset + i] = uint8_t(0x20 + next_random(state) % 0x20);  // 2^-3 .. ~2
    for (int i = 28; i < 32; ++i) row[kScaleOffset + i] = 0;
  }
  std::vector<int> indices(units * kUnitCandidates);
  for (auto& i : indices) i = int(next_random(state) % kPoolRows);
  std::vector<uint16_t> q(units * kHeads * kDims);
  for (auto& v : q) v = bf16_bits((int(next_random(state) % 2001) - 1000) / 1000.f);
  uint8_t* pool_d = nullptr;
  int* indices_d = nullptr;
  uint16_t *q_d = nullptr, *out_d = nullptr;
  long long* cycles_d = nullptr;
  CHECK_CUDA(cudaMalloc(&pool_d, pool.size()));
  CHECK_CUDA(cudaMalloc(&indices_d, indices.size() * sizeof(int)));
  CHECK_CUDA(cudaMalloc(&q_d, q.size() * 2));
  CHECK_CUDA(cudaMalloc(&out_d, q.size() * 2));
  const size_t cycle_slots = size_t(sms) * std::max(kPairWarps, kMaxCtasPerSm * kSliceFormWarps);
  CHECK_CUDA(cudaMalloc(&cycles_d, cycle_slots * sizeof(long long)));
  CHECK_CUDA(cudaMemcpy(pool_d, pool.data(), pool.size(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(indices_d, indices.data(), indices.size() * sizeof(int), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(q_d, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemset(out_d, 0xff, q.size() * 2));  // NaN: every output must be written

  // The first units' outputs against float64 (the exact dequantized rows, q as given).
  // units_run: the units a CTA ran (the latency rows run one a CTA; the outputs beyond stay NaN).
  auto check_outputs = [&](const std::vector<uint16_t>& out, int unit_candidates, int units_run) {
    size_t unwritten = 0;
    const size_t written = std::min(out.size(), size_t(sms) * units_run * kHeads * kDims);
    for (size_t i = 0; i < written; ++i) unwritten += (out[i] & 0x7fff) > 0x7f80;
    auto cache_value = [&](const uint8_t* row, int d) -> double {
      if (d < kNope) {
        return double(nvfp4::e2m1_to_float((row[d / 2] >> (4 * (d % 2))) & 15)) *
               nvfp4::e4m3_to_float(row[kScaleOffset + d / 16]);
      }
      uint16_t bits;
      std::memcpy(&bits, row + kRopeOffset + 2 * (d - kNope), 2);
      return nvfp4::bf16_bits_to_float(bits);
    };
    double worst = 0.;
    const int checked_units = 8;
    std::vector<double> logits(unit_candidates), row_values(kDims);
    for (int unit = 0; unit < checked_units; ++unit) {
      for (int head = 0; head < kHeads; ++head) {
        double top = -INFINITY;
        for (int c = 0; c < unit_candidates; ++c) {
          const uint8_t* row = &pool[size_t(indices[size_t(unit) * unit_candidates + c]) * kRowBytes];
          double dot = 0.;
          for (int d = 0; d < kDims; ++d) dot += cache_value(row, d) * nvfp4::bf16_bits_to_float(q[(size_t(unit) * kHeads + head) * kDims + d]);
          logits[c] = dot * sm_scale;
          top = std::max(top, logits[c]);
        }
        std::fill(row_values.begin(), row_values.end(), 0.);
        double total = 0.;
        for (int c = 0; c < unit_candidates; ++c) {
          const double weight = std::exp(logits[c] - top);
          total += weight;
          const uint8_t* row = &pool[size_t(indices[size_t(unit) * unit_candidates + c]) * kRowBytes];
          for (int d = 0; d < kDims; ++d) row_values[d] += weight * cache_value(row, d);
        }
        double error = 0., norm = 0.;
        for (int d = 0; d < kDims; ++d) {
          const double reference = row_values[d] / total;
          const double got = nvfp4::bf16_bits_to_float(out[(size_t(unit) * kHeads + head) * kDims + d]);
          error += (got - reference) * (got - reference);
          norm += reference * reference;
        }
        worst = std::max(worst, std::sqrt(error / norm));
      }
    }
    const bool pass = unwritten == 0 && worst < 1e-2;
    std::printf("  outputs never written: %zu of %zu; worst relative L2 error of the first %d units' head rows: "
                "%.2e (%s)\n",
                unwritten, written, checked_units, worst, pass ? "pass" : "FAIL");
    return pass;
  };
  std::printf("%d CTAs (one an SM), %d units a CTA of %d candidates, 8 heads; cycles a 64-candidate chunk an SM "
              "(median over CTAs of the slowest warp), three launches after a warm-up\n",
              sms, units_per_cta, kUnitCandidates);
  std::printf("| form | bit placement | warps | registers | local bytes | shared bytes | cycles a chunk |\n"
              "|---|---|---|---|---|---|---|\n");
  // Times one kernel, then checks its outputs: every one written, within 1e-2 of float64, and, for
  // a second bit placement of the same form, the same bits as the first (the placements give the
  // same pairs; the two forms add S^T's partial sums in different orders, so other bits).
  std::vector<uint16_t> form_out;
  bool all_pass = true;
  // ctas_per_sm > 1 (the slice form): that many CTAs an SM, each its own units_per_cta units, all
  // resident at once (checked by the occupancy query), so an SM's cycles a chunk are a CTA's divided
  // by ctas_per_sm.
  auto time_kernel = [&](auto kernel, const char* form, const char* placement, int warps, int smem, bool same_form,
                         int ctas_per_sm = 1) {
    CHECK_CUDA(cudaMemset(out_d, 0xff, q.size() * 2));  // NaN: every output must be written
    CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    cudaFuncAttributes attributes{};
    CHECK_CUDA(cudaFuncGetAttributes(&attributes, kernel));
    int resident = 0;
    CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, warps * 32, smem));
    if (resident < ctas_per_sm) {
      std::printf("| %s | %s | %d | %d | %d | %d | only %d CTAs an SM fit, %d asked: not timed (FAIL) |\n", form,
                  placement, warps, attributes.numRegs, int(attributes.localSizeBytes), smem, resident, ctas_per_sm);
      all_pass = false;
      return;
    }
    const int ctas = sms * ctas_per_sm;
    std::vector<double> per_chunk_runs;
    for (int launch = 0; launch < 4; ++launch) {  // the first warms up
      kernel<<<ctas, warps * 32, smem>>>(pool_d, indices_d, q_d, out_d, units_per_cta, kUnitCandidates, sm_scale,
                                         cycles_d, nullptr);
      CHECK_CUDA(cudaGetLastError());
      CHECK_CUDA(cudaDeviceSynchronize());
      if (launch == 0) continue;
      std::vector<long long> cycles(size_t(ctas) * warps);
      CHECK_CUDA(cudaMemcpy(cycles.data(), cycles_d, cycles.size() * sizeof(long long), cudaMemcpyDeviceToHost));
      std::vector<double> per_chunk;
      const double chunks = double(units_per_cta) * kUnitCandidates / 64 * ctas_per_sm;
      for (int cta = 0; cta < ctas; ++cta) {
        long long worst = 0;
        for (int w = 0; w < warps; ++w) worst = std::max(worst, cycles[size_t(cta) * warps + w]);
        per_chunk.push_back(double(worst) / chunks);
      }
      std::sort(per_chunk.begin(), per_chunk.end());
      per_chunk_runs.push_back(per_chunk[per_chunk.size() / 2]);
    }
    std::printf("| %s%s | %s | %d | %d | %d | %d |", form, ctas_per_sm > 1 ? (ctas_per_sm == 2 ? ", 2 CTAs an SM" : ctas_per_sm == 3 ? ", 3 CTAs an SM" : ", 4 CTAs an SM") : "",
                placement, warps, attributes.numRegs, int(attributes.localSizeBytes), smem);
    for (double c : per_chunk_runs) std::printf(" %.0f", c);
    std::printf(" |\n");
    std::vector<uint16_t> out(q.size());
    CHECK_CUDA(cudaMemcpy(out.data(), out_d, out.size() * 2, cudaMemcpyDeviceToHost));
    if (same_form) {
      const bool same_bits = out == form_out;
      std::printf("  the same bits as the form's first placement: %s\n", same_bits ? "yes" : "NO (FAIL)");
      all_pass = same_bits && all_pass;
    } else {
      all_pass = check_outputs(out, kUnitCandidates, units_per_cta * ctas_per_sm) && all_pass;
    }
    form_out = out;
  };
  time_kernel(eight_head_register<hop::BitPlacement::kMultiply>, "warp owns O^T", "multiply", kWarps,
              int(sizeof(Shared)), false);
  time_kernel(eight_head_register<hop::BitPlacement::kShifts>, "warp owns O^T", "shifts", kWarps, int(sizeof(Shared)),
              true);
  time_kernel(eight_head_pairs<hop::BitPlacement::kMultiply>, "pair splits O^T", "multiply", kPairWarps,
              int(sizeof(PairShared)), false);
  // The slice form: each row decoded once. Its outputs sum S^T's partials in another order than
  // the other forms, so each of its rows is checked against float64 (no same-bits comparison).
  // Depth 2 as first written (the list now in shared memory), then deeper copies.
  using hop::BitPlacement;
  auto time_slices = [&](auto kernel, const char* form, int depth, int ctas_per_sm, const char* placement = "multiply",
                         bool same_form = false) {
    char label[96];
    std::snprintf(label, sizeof(label), "%s, %d steps ahead", form, depth);
    const int smem = depth == 2 ? int(sizeof(SliceShared<2>)) : depth == 4 ? int(sizeof(SliceShared<4>)) : int(sizeof(SliceShared<6>));
    time_kernel(kernel, label, placement, kSliceFormWarps, smem, same_form, ctas_per_sm);
  };
  time_slices(eight_head_slices<BitPlacement::kMultiply, 2, true, 2>, "a warp a dim slice", 2, 2);
  time_slices(eight_head_slices<BitPlacement::kMultiply, 2, true, 6>, "a warp a dim slice", 6, 2);
  time_slices(eight_head_slices<BitPlacement::kMultiply, 3, false, 2>, "a warp a dim slice, in order", 2, 3);
  time_slices(eight_head_slices<BitPlacement::kMultiply, 3, false, 4>, "a warp a dim slice, in order", 4, 3);
  time_slices(eight_head_slices<BitPlacement::kMultiply, 3, false, 6>, "a warp a dim slice, in order", 6, 3);
  time_slices(eight_head_slices<BitPlacement::kShifts, 3, false, 6>, "a warp a dim slice, in order", 6, 3, "shifts", true);
  time_slices(eight_head_slices<BitPlacement::kMultiply, 4, false, 4>, "a warp a dim slice, in order", 4, 4);

  // The latency rows: one unit a CTA of 128 candidates (one step a warp: a short decode split's
  // work, as 8 x 16 x 1024 gives its CTAs 64) or 512 (four steps), timed by CUDA events beside an
  // empty kernel timed the same way, with the L2 flushed before each launch (a 256 MB memset) or
  // not (the pool, indices and code then stay in L2 from the launch before); each CTA's own cycles
  // (its slowest warp, entry to exit) and, for the warp form, thread 0's phases (median over CTAs).
  {
    char* flush = nullptr;
    const size_t flush_bytes = size_t(256) << 20;
    CHECK_CUDA(cudaMalloc(&flush, flush_bytes));
    long long* phases_d = nullptr;
    CHECK_CUDA(cudaMalloc(&phases_d, size_t(sms) * kPhases * sizeof(long long)));
    cudaEvent_t before, after;
    CHECK_CUDA(cudaEventCreate(&before));
    CHECK_CUDA(cudaEventCreate(&after));
    auto time_launches = [&](bool flushed, auto launch_once) {
      std::vector<double> us;
      for (int launch = 0; launch < 12; ++launch) {  // two warm-ups
        if (flushed) CHECK_CUDA(cudaMemset(flush, launch & 0xff, flush_bytes));
        CHECK_CUDA(cudaEventRecord(before));
        launch_once();
        CHECK_CUDA(cudaEventRecord(after));
        CHECK_CUDA(cudaEventSynchronize(after));
        CHECK_CUDA(cudaGetLastError());
        float ms = 0.f;
        CHECK_CUDA(cudaEventElapsedTime(&ms, before, after));
        if (launch >= 2) us.push_back(1e3 * ms);
      }
      std::sort(us.begin(), us.end());
      return us[us.size() / 2];
    };
    const double empty_flushed = time_launches(true, [&]() { empty_kernel<<<sms, 256>>>(); });
    const double empty_warm = time_launches(false, [&]() { empty_kernel<<<sms, 256>>>(); });
    std::printf("\nlatency rows: one unit a CTA, %d CTAs; an empty kernel timed the same way: %.1f us (L2 flushed), "
                "%.1f us (not)\n",
                sms, empty_flushed, empty_warm);
    std::printf("| form | unit candidates | L2 flushed | kernel us (events, median of 10) | a CTA's cycles (median over "
                "CTAs) | warp form's phases: Q stored, step 0's rows in, its softmax done, last PV issued, merged |\n"
                "|---|---|---|---|---|---|\n");
    auto latency_row = [&](auto kernel, const char* form, int warps, int smem, int unit_candidates, bool flushed,
                           bool with_phases) {
      CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      CHECK_CUDA(cudaMemset(out_d, 0xff, q.size() * 2));
      CHECK_CUDA(cudaMemset(phases_d, 0, size_t(sms) * kPhases * sizeof(long long)));
      const double us = time_launches(flushed, [&]() {
        kernel<<<sms, warps * 32, smem>>>(pool_d, indices_d, q_d, out_d, 1, unit_candidates, sm_scale, cycles_d,
                                          with_phases ? phases_d : nullptr);
      });
      std::vector<long long> cycles(size_t(sms) * warps);
      CHECK_CUDA(cudaMemcpy(cycles.data(), cycles_d, cycles.size() * sizeof(long long), cudaMemcpyDeviceToHost));
      std::vector<double> per_cta;
      for (int cta = 0; cta < sms; ++cta) {
        long long worst = 0;
        for (int w = 0; w < warps; ++w) worst = std::max(worst, cycles[size_t(cta) * warps + w]);
        per_cta.push_back(double(worst));
      }
      std::sort(per_cta.begin(), per_cta.end());
      std::printf("| %s | %d | %s | %.1f | %.0f |", form, unit_candidates, flushed ? "yes" : "no", us,
                  per_cta[per_cta.size() / 2]);
      if (with_phases) {
        std::vector<long long> phases(size_t(sms) * kPhases);
        CHECK_CUDA(cudaMemcpy(phases.data(), phases_d, phases.size() * sizeof(long long), cudaMemcpyDeviceToHost));
        for (int phase = 0; phase < kPhases; ++phase) {
          std::vector<long long> column;
          for (int cta = 0; cta < sms; ++cta) column.push_back(phases[size_t(cta) * kPhases + phase]);
          std::sort(column.begin(), column.end());
          std::printf(" %lld", column[column.size() / 2]);
        }
      } else {
        std::printf(" -");
      }
      std::printf(" |\n");
      std::vector<uint16_t> out(q.size());
      CHECK_CUDA(cudaMemcpy(out.data(), out_d, out.size() * 2, cudaMemcpyDeviceToHost));
      all_pass = check_outputs(out, unit_candidates, 1) && all_pass;
    };
    for (int unit_candidates : {kShortUnitCandidates, 4 * kShortUnitCandidates}) {
      for (bool flushed : {true, false}) {
        latency_row(eight_head_register<hop::BitPlacement::kMultiply>, "warp owns O^T", kWarps, int(sizeof(Shared)),
                    unit_candidates, flushed, true);
        latency_row(eight_head_pairs<hop::BitPlacement::kMultiply>, "pair splits O^T", kPairWarps,
                    int(sizeof(PairShared)), unit_candidates, flushed, false);
        latency_row(eight_head_slices<hop::BitPlacement::kMultiply, 1, true, 4>, "a warp a dim slice", kSliceFormWarps,
                    int(sizeof(SliceShared<4>)), unit_candidates, flushed, false);
      }
    }
    CHECK_CUDA(cudaEventDestroy(before));
    CHECK_CUDA(cudaEventDestroy(after));
    CHECK_CUDA(cudaFree(phases_d));
    CHECK_CUDA(cudaFree(flush));
  }
  std::printf("all checks: %s\n", all_pass ? "pass" : "FAIL");
  CHECK_CUDA(cudaFree(pool_d));
  CHECK_CUDA(cudaFree(indices_d));
  CHECK_CUDA(cudaFree(q_d));
  CHECK_CUDA(cudaFree(out_d));
  CHECK_CUDA(cudaFree(cycles_d));
  return all_pass ? 0 : 1;
}
