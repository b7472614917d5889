// The small-heads Hopper prefill kernel's parameters: the prefill's and the tensor map of the
// output its unit epilogue stores O through. Filled by the launcher (prefill_small.cu).
#pragma once

#include <cuda.h>

#include "../common/prefill_params.h"

namespace cake::cuda {

struct HopperSmallParams : PrefillParams {
  // The launch's heads of the output as head rows (common/tensor_map.h: heads 0 .. num_heads_run
  // - 1 from the launch's `output`, rows num_heads apart), a box of one unit's heads; when
  // output_by_tma.
  CUtensorMap output_map;
  // 1: a unit's O goes from the staging tile to `output` by TMA stores (16 heads a unit, output
  // 16-byte aligned); 0: from registers (32 heads a unit, or an output view only 4-byte aligned).
  int output_by_tma;
};

}  // namespace cake::cuda
