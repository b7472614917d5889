// CUDA cache writer: one warp per entry; lanes 0..27 quantize one 16-value NoPE group each with
// the same routine as the CPU writer (csrc/format/nvfp4_format.h), so the bytes are identical.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include "../format/nvfp4_format.h"
#include "cache_writer_cuda.h"

namespace cake::cuda {
namespace {

struct CacheWriteParams {
  const uint16_t* rows;        // [N, 512] bf16 bits
  const int64_t* slots;        // [M] sorted target slots, or nullptr (entry i -> slot i)
  const int64_t* source_rows;  // [M] row of each entry, or nullptr (entry i -> row i)
  uint8_t* cache;
  nvfp4::CacheGeometry geometry;
  int64_t num_entries;
  bool skip_repeats;           // keep only the first entry of each run of equal slots
};

constexpr int kWarpsPerBlock = 4;

__global__ void __launch_bounds__(kWarpsPerBlock * 32) write_cache_rows_kernel(const __grid_constant__ CacheWriteParams params) {
  using namespace nvfp4;
  const int64_t entry = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (entry >= params.num_entries) return;
  const int64_t slot = params.slots ? params.slots[entry] : entry;
  if (!params.geometry.slot_is_valid(slot)) return;
  if (params.skip_repeats && entry > 0 && params.slots[entry - 1] == slot) return;
  const uint16_t* row = params.rows + (params.source_rows ? params.source_rows[entry] : entry) * kHeadDim;
  uint8_t* data = params.cache + params.geometry.data_offset(slot);
  uint8_t* scale = params.cache + params.geometry.scale_offset(slot);
  if (lane < kNumGroups) {
    const uint4* group_bits = reinterpret_cast<const uint4*>(row + lane * kGroupSize);
    const uint4 halves[2] = {group_bits[0], group_bits[1]};
    const uint32_t* words = reinterpret_cast<const uint32_t*>(halves);
    float values[kGroupSize];
    for (int j = 0; j < kGroupSize / 2; ++j) {
      values[2 * j] = bf16_bits_to_float(uint16_t(words[j] & 0xFFFFu));
      values[2 * j + 1] = bf16_bits_to_float(uint16_t(words[j] >> 16));
    }
    uint8_t codes[kGroupSize / 2];
    uint8_t scale_byte;
    quantize_group(values, codes, scale_byte);
    uint2 packed;
    packed.x = codes[0] | (codes[1] << 8) | (codes[2] << 16) | (uint32_t(codes[3]) << 24);
    packed.y = codes[4] | (codes[5] << 8) | (codes[6] << 16) | (uint32_t(codes[7]) << 24);
    *reinterpret_cast<uint2*>(data + lane * (kGroupSize / 2)) = packed;
    scale[lane] = scale_byte;
  } else {
    scale[lane] = 0;  // bytes 28..31 of the scale row
  }
  if (lane < kRopeBytes / 16) {  // RoPE: raw bf16, bit for bit
    reinterpret_cast<uint4*>(data + kNopeBytes)[lane] = reinterpret_cast<const uint4*>(row + kNopeDim)[lane];
  }
}

}  // namespace

void write_cache_rows_cuda(const CacheWriteJob& job) {
  if (job.num_entries == 0) return;
  CacheWriteParams params{};
  params.rows = reinterpret_cast<const uint16_t*>(job.rows.data_ptr());
  params.slots = job.slots.defined() ? job.slots.data_ptr<int64_t>() : nullptr;
  params.source_rows = job.source_rows.defined() ? job.source_rows.data_ptr<int64_t>() : nullptr;
  params.cache = job.cache.data_ptr<uint8_t>();
  params.geometry = job.geometry;
  params.num_entries = job.num_entries;
  params.skip_repeats = job.skip_repeats;
  const int64_t blocks = (job.num_entries + kWarpsPerBlock - 1) / kWarpsPerBlock;
  write_cache_rows_kernel<<<unsigned(blocks), kWarpsPerBlock * 32, 0, at::cuda::getCurrentCUDAStream()>>>(params);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace cake::cuda
