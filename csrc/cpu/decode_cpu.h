#pragma once

#include "../ops/decode_args.h"

namespace cake {

// CPU implementation of cake::sparse_mla_decode (validated arguments).
void sparse_mla_decode_cpu(const DecodeArgs& args);

}  // namespace cake
