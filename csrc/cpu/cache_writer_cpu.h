#pragma once

#include "../ops/cache_writer_args.h"

namespace cake {

void write_cache_rows_cpu(const CacheWriteJob& job);

}  // namespace cake
