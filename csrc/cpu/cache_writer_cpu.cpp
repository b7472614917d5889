#include "cache_writer_cpu.h"

#include <ATen/Parallel.h>

namespace cake {

void write_cache_rows_cpu(const CacheWriteJob& job) {
  using namespace nvfp4;
  const uint16_t* rows = reinterpret_cast<const uint16_t*>(job.rows.data_ptr());
  const int64_t* slots = job.slots.defined() ? job.slots.data_ptr<int64_t>() : nullptr;
  const int64_t* source_rows = job.source_rows.defined() ? job.source_rows.data_ptr<int64_t>() : nullptr;
  uint8_t* base = job.cache.data_ptr<uint8_t>();
  const CacheGeometry geometry = job.geometry;
  at::parallel_for(0, job.num_entries, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t slot = slots ? slots[i] : i;
      if (!geometry.slot_is_valid(slot)) continue;
      if (job.skip_repeats && i > 0 && slots[i - 1] == slot) continue;
      const uint16_t* row = rows + (source_rows ? source_rows[i] : i) * kHeadDim;
      uint8_t* data = base + geometry.data_offset(slot);
      uint8_t* scale = base + geometry.scale_offset(slot);
      for (int group = 0; group < kNumGroups; ++group) {
        float values[kGroupSize];
        for (int j = 0; j < kGroupSize; ++j) values[j] = bf16_bits_to_float(row[group * kGroupSize + j]);
        uint8_t codes[kGroupSize / 2];
        quantize_group(values, codes, scale[group]);
        for (int j = 0; j < kGroupSize / 2; ++j) data[group * (kGroupSize / 2) + j] = codes[j];
      }
      for (int j = 0; j < kRopeDim; ++j) {  // RoPE: raw little-endian bf16, bit for bit
        data[kNopeBytes + 2 * j] = uint8_t(row[kNopeDim + j] & 0xFF);
        data[kNopeBytes + 2 * j + 1] = uint8_t(row[kNopeDim + j] >> 8);
      }
      for (int j = kNumGroups; j < kScaleRowBytes; ++j) scale[j] = 0;
    }
  });
}

}  // namespace cake
