#include "prefill_kernel.cuh"
#include "prefill_launch.h"

int cake::cuda::prefill_smem_bytes(int head_tiles, int stages) { return PrefillTile::smem_bytes(head_tiles, stages); }

int cake::cuda::prefill_default_stages(int head_tiles) { return head_tiles == 4 ? 4 : 4; }
