#pragma once

#include "../ops/cache_writer_args.h"

namespace cake::cuda {

// Launches on the current stream of the job's device (the caller holds the device guard).
void write_cache_rows_cuda(const CacheWriteJob& job);

}  // namespace cake::cuda
