// None of the cake operators has a backward. Their Autograd kernel refuses an input that requires
// grad while grad mode is on, with an error saying so and how to call them, instead of leaving
// outputs that silently carry no gradient (what torch's default fallback does, with at most a
// warning at backward time). Otherwise it steps below autograd and re-invokes the operator.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <ATen/core/LegacyTypeDispatch.h>

namespace cake {
namespace {

void no_backward_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  if (c10::GradMode::is_enabled()) {
    const size_t num_args = schema.arguments().size();
    const auto args = torch::jit::last(*stack, num_args);
    for (size_t i = 0; i < num_args; ++i) {
      if (!args[i].isTensor()) continue;  // None for an absent optional tensor
      const at::Tensor& tensor = args[i].toTensor();
      const std::string& name = schema.arguments()[i].name();
      TORCH_CHECK_NOT_IMPLEMENTED(!tensor.defined() || !tensor.requires_grad(), schema.name(), ": ", name,
                                  " requires grad, but this operator has no backward. Call it under "
                                  "torch.no_grad() or torch.inference_mode(), or pass ", name, ".detach().");
    }
  }
  at::AutoDispatchBelowAutograd guard;
  op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
}

}  // namespace

TORCH_LIBRARY_IMPL(cake, Autograd, m) {
  for (const char* name :
       {"sparse_mla_prefill", "sparse_mla_prefill_functional", "sparse_mla_decode", "nvfp4_pack_cache",
        "nvfp4_append_cache"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&no_backward_kernel>());
  }
}

}  // namespace cake
