// The Hopper attention kernel's parameters: the decode's (which include the prefill's) and the
// tensor maps its TMA copies use. Filled by the launcher (prefill_hopper.cu).
#pragma once

#include <cuda.h>

#include "../common/decode_params.h"

namespace cake::cuda {

struct HopperParams : DecodeParams {
  CUtensorMap q_map;       // q as head rows (common/tensor_map.h): each item's Q tile, two halves of 4 boxes
  // When output_by_tma: output the same way (whole lists), or mid_out's fp32 rows
  // (common/tensor_map.h: partial_rows_tensor_map; split items).
  CUtensorMap output_map;
  // 1: an item's O goes from the Q tile to `output` or `mid_out` by TMA stores; 0: from registers
  // (an output view only 4-byte aligned).
  int output_by_tma;
};

}  // namespace cake::cuda
