#pragma once

#include "../ops/prefill_args.h"

namespace cake {

// Reference-quality CPU implementation of cake::sparse_mla_prefill (validated arguments).
void sparse_mla_prefill_cpu(const PrefillArgs& args);

}  // namespace cake
