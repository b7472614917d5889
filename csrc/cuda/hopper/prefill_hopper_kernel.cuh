// Hopper (sm_90a) sparse-MLA prefill over the NVFP4 cache: a persistent, warp-specialised kernel.
//
// CTA c walks the work items (token, 64 heads) c, c + gridDim.x, ... with four warpgroups:
//   - consumers 0 and 1 (prefill_hopper_consumer.cuh): per pair of 64-candidate blocks, consumer
//     c runs QK^T of block 2 p + c, the two agree on the softmax reference, and each accumulates
//     its 256 output dims over both blocks;
//   - dequant warpgroups 0 and 1 (prefill_hopper_dequant.cuh): gather block 2 p + d's rows into
//     registers, convert NVFP4 -> bf16 and write K tile d quarter by quarter (the RoPE dims by
//     cp.async); they also load each item's Q.
// A K tile quarter (128 dims) is handed over on quarter_full / quarter_empty mbarriers: the
// consumers read a quarter in QK^T and (one consumer) in PV; each consumer's PV releases its
// first quarter half-way, so the conversion of the next pair overlaps the MMAs of this one.
// docs/hopper_kernel.md describes the schedule, the budgets and the measured profile.
#pragma once

#include "prefill_hopper_consumer.cuh"
#include "prefill_hopper_dequant.cuh"
#include "prefill_hopper_layout.h"

namespace cake::cuda::hopper {

__global__ void __launch_bounds__(kThreads, 1)
    sparse_mla_prefill_hopper_kernel(const __grid_constant__ PrefillParams params) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  extern __shared__ __align__(1024) uint8_t smem_bytes[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_bytes);
  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  if (threadIdx.x == 0) {
    if ((smem_address(smem_bytes) & 1023u) != 0) __trap();  // the swizzled tiles need 1024-byte alignment
    mbarrier_init(smem_address(&smem.q_full), kDequantThreads);    // one cp.async arrival per thread
    mbarrier_init(smem_address(&smem.q_empty), kConsumerThreads);
    for (int quarter = 0; quarter < kQuarters; ++quarter) {
      mbarrier_init(smem_address(&smem.quarter_full[quarter]), kDequantThreads);
      mbarrier_init(smem_address(&smem.quarter_empty[quarter]), kConsumerThreads);
    }
    mbarrier_init(smem_address(&smem.rope_full), kDequantThreads);  // one cp.async arrival per thread
  }
  __syncthreads();
  if (warpgroup >= kConsumers) {
    release_registers<kDequantRegisters>();
    DequantRole(params, smem, warpgroup - kConsumers, threadIdx.x % kWarpgroupThreads).run();
  } else {
    claim_registers<kConsumerRegisters>();
    ConsumerRole(params, smem, warpgroup, threadIdx.x % kWarpgroupThreads).run();
  }
#endif
}

}  // namespace cake::cuda::hopper
