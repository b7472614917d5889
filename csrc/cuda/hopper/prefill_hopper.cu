// Launch of the Hopper prefill kernel. Built for every arch in the list; the kernel body exists
// only in the sm_90a image (elsewhere it is empty and never launched: see select_prefill_kernel
// in ../prefill_kernel_choice.h).
#include <c10/cuda/CUDAException.h>

#include "prefill_hopper.h"
#include "../common/tensor_map.h"
#include "prefill_hopper_kernel.cuh"
#ifdef CAKE_HOPPER_FUSED
#include "../hopper_fused/fused.h"
#endif

namespace cake::cuda {

namespace {

template <bool kSplitItems>
void launch_instance(const HopperParams& params, unsigned num_ctas, cudaStream_t stream) {
  constexpr int kSmemBytes = HopperPrefillLayout::kSmemBytes;
  // Above 48 KB a kernel must opt in; the call is cheap and safe during graph capture.
  C10_CUDA_CHECK(cudaFuncSetAttribute(hopper::sparse_mla_attention_hopper_kernel<kSplitItems>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  hopper::sparse_mla_attention_hopper_kernel<kSplitItems>
      <<<num_ctas, HopperPrefillLayout::kThreads, kSmemBytes, stream>>>(params);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The tensor maps of the call: q always (each item's Q is a TMA load), the output's where whole
// lists send O out by TMA, and mid_out's where split partials do. Whether O's destination is
// 16-byte aligned (the op accepts 4-byte aligned output views).
HopperParams hopper_params(const DecodeParams& params) {
  HopperParams hopper{};
  static_cast<DecodeParams&>(hopper) = params;
  hopper.q_map = head_rows_tensor_map(params.q, params.num_tokens, params.num_heads);
  if (params.num_splits == 1) {
    hopper.output_aligned = tma_addressable(params.output);
    if (hopper.output_aligned) {
      hopper.output_map = head_rows_tensor_map(params.output, params.num_tokens, params.num_heads);
    }
  } else {  // the split partials (the op checks that mid_out is 16-byte aligned)
    hopper.output_aligned = tma_addressable(params.mid_out);
    if (hopper.output_aligned) {
      hopper.partial_map =
          partial_rows_tensor_map(params.mid_out, int64_t(params.num_splits) * params.num_tokens, params.num_heads);
    }
  }
  return hopper;
}

}  // namespace

void launch_sparse_mla_attention_hopper(const DecodeParams& params, int max_ctas, cudaStream_t stream) {
  // A persistent grid: one CTA per SM (its shared memory takes the SM), each walking its share of
  // the work items (token, 64 heads, split).
  const long long num_items = (long long)params.num_tokens * params.num_head_blocks * params.num_splits;
#ifdef CAKE_HOPPER_MAX_CTAS
  // Development switch: fewer CTAs than SMs (does a step's time depend on every SM's traffic?).
  if (max_ctas > CAKE_HOPPER_MAX_CTAS) max_ctas = CAKE_HOPPER_MAX_CTAS;
#endif
  const unsigned num_ctas = unsigned(num_items < max_ctas ? num_items : max_ctas);
#ifdef CAKE_HOPPER_FUSED
  // Development build: the fused kernel runs the whole-list launches of whole 64-head blocks (not the
  // padded blocks of H = 48, 112, nor a range of heads given apart).
  if (params.num_splits == 1 && params.num_heads == 64 * params.num_head_blocks) {
    launch_sparse_mla_prefill_hopper_fused(params, int(num_ctas), stream);
    return;
  }
#endif
  // One split keeps the split arithmetic out of the block loop (the prefill's instance).
  const HopperParams hopper = hopper_params(params);
  if (params.num_splits > 1) {
    launch_instance<true>(hopper, num_ctas, stream);
  } else {
    launch_instance<false>(hopper, num_ctas, stream);
  }
  hopper::print_trace();
  hopper::print_qk_recheck();  // a CAKE_HOPPER_QK_RECHECK build only
}

}  // namespace cake::cuda
