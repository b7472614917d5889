#include "prefill_target.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

namespace cake {
namespace {

c10::Device parse_device(const std::string& text) {
  try {
    return c10::Device(text);
  } catch (const c10::Error&) {
    TORCH_CHECK_VALUE(false, "device: expected 'cpu', 'cuda' or 'cuda:<index>', got '", text, "'");
  }
}

c10::Device default_device() {
#if defined(CAKE_WITH_CUDA)
  const c10::DeviceIndex index = current_cuda_device_index();
  if (index >= 0) return c10::Device(c10::kCUDA, index);
#endif
  return c10::Device(c10::kCPU);
}

}  // namespace

PrefillTarget cpu_prefill_target() {
  return {PrefillKernel::kCpu, int64_t(at::get_num_threads()), kMaxHeadTiles};
}

PrefillTarget prefill_target(c10::Device device) {
  if (device.is_cpu()) return cpu_prefill_target();
#if defined(CAKE_WITH_CUDA)
  if (device.is_cuda()) {
    const c10::DeviceIndex index = device.has_index() ? device.index() : current_cuda_device_index();
    TORCH_CHECK_VALUE(index >= 0, "device: ", device, " requested, but no CUDA device is present");
    return cuda_prefill_target(index, prefill_kernel_override());
  }
  TORCH_CHECK_VALUE(false, "device: expected a CPU or CUDA device, got ", device);
#else
  TORCH_CHECK_VALUE(false, "device: expected the CPU (this build has no CUDA kernels), got ", device);
#endif
}

PrefillTarget resolve_prefill_target(const std::optional<std::string>& device, const std::optional<std::string>& kernel,
                                     std::optional<int64_t> num_sms) {
  std::optional<PrefillKernel> family;
  if (kernel.has_value()) {
    family = prefill_kernel_from_name(*kernel);
    TORCH_CHECK_VALUE(family.has_value(), "kernel: expected None, 'hopper', 'portable', 'cpu' or 'hopper_small', got '",
                      *kernel, "'");
  }
  // "hopper_small" names the Hopper family, as "hopper" does: the small-heads kernel is part of it.
  if (family.has_value() && is_hopper_family(*family)) family = PrefillKernel::kHopper;
  if (num_sms.has_value()) TORCH_CHECK_VALUE(*num_sms >= 1, "num_sms: expected >= 1, got ", *num_sms);
  PrefillTarget target{};
  if (device.has_value() || !family.has_value()) {
    const c10::Device where = device.has_value() ? parse_device(*device) : default_device();
    target = prefill_target(where);
    if (family.has_value() && *family != target.family) {
      // A Hopper GPU runs the portable kernel too; nothing else swaps.
      TORCH_CHECK_VALUE(*family == PrefillKernel::kPortable && target.family == PrefillKernel::kHopper, "kernel: '",
                        *kernel, "' does not run on ", where, ", whose prefill kernel is '",
                        prefill_kernel_name(target.family), "'");
      target.family = *family;
      target.hopper_small = false;
    }
  } else if (*family == PrefillKernel::kCpu) {
    target = cpu_prefill_target();
  } else {
    TORCH_CHECK_VALUE(num_sms.has_value(), "num_sms: required when kernel='", *kernel, "' is given without a device");
    // The family in general: no shared-memory cap, so the Hopper family includes the small-heads kernel.
    target = {*family, *num_sms, kMaxHeadTiles, *family == PrefillKernel::kHopper};
  }
  if (num_sms.has_value()) target.num_sms = *num_sms;
  return target;
}

}  // namespace cake
