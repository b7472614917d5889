// The Hopper attention kernel's parameters: the decode's (which include the prefill's) and the
// tensor maps its TMA copies use. Filled by the launcher (prefill_hopper.cu).
#pragma once

#include <cuda.h>

#include "../common/decode_params.h"

namespace cake::cuda {

struct HopperParams : DecodeParams {
  CUtensorMap q_map;       // q as head rows (common/tensor_map.h): each item's Q tile, two halves of 4 boxes
  // Split items where output_aligned: mid_out's fp32 rows (common/tensor_map.h:
  // partial_rows_tensor_map), the target of the partials' TMA stores.
  CUtensorMap partial_map;
  // Whole lists where output_aligned: the output as head rows (common/tensor_map.h:
  // head_rows_tensor_map), the target of O's TMA stores from an item's last K tile.
  CUtensorMap output_map;
  // 1: where O goes is 16-byte aligned: whole lists send O through the item's last K tile by TMA
  // stores, split items their partials through the Q tile; 0: 4-byte (whole lists) or 8-byte
  // (partials) stores from registers (an output view only 4-byte aligned).
  int output_aligned;
};

}  // namespace cake::cuda
