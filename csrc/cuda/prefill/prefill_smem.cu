#include "prefill_kernel.cuh"
#include "prefill_launch.h"

int cake::cuda::prefill_smem_bytes(int head_tiles) { return PrefillTile::smem_bytes(head_tiles); }
