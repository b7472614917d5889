// The Hopper attention kernel's parameters: the decode's (which include the prefill's) and the
// tensor maps its TMA copies use. Filled by the launcher (prefill_hopper.cu).
#pragma once

#include <cuda.h>

#include "../common/decode_params.h"

namespace cake::cuda {

struct HopperParams : DecodeParams {
  CUtensorMap q_map;       // q as head rows (common/tensor_map.h): each item's Q tile, two halves of 4 boxes
  CUtensorMap output_map;  // output the same way, when output_by_tma
  // 1: a whole-list item's O goes from the Q tile to `output` by TMA stores (output 16-byte
  // aligned); 0: from registers (split items' fp32 partials, or an output view only 4-byte aligned).
  int output_by_tma;
};

}  // namespace cake::cuda
