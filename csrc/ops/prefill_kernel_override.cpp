#include "prefill_kernel_override.h"

#include <c10/util/Exception.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>

#include "../cuda/prefill_kernel_choice.h"

namespace cake {
namespace {

constexpr const char* kKernelVariable = "CAKE_PREFILL_KERNEL";
constexpr const char* kVariantVariable = "CAKE_PREFILL_VARIANT";

std::string compiled_pipelines() {
  std::ostringstream text;
  const char* separator = "";
  for (const auto& variant : cuda::kPrefillVariants) {
    bool seen = false;
    for (const auto& earlier : cuda::kPrefillVariants) {
      if (&earlier == &variant) break;
      seen = seen || (earlier.stages == variant.stages && earlier.k_tiles == variant.k_tiles);
    }
    if (seen) continue;
    text << separator << "(" << variant.stages << ", " << variant.k_tiles << ")";
    separator = ", ";
  }
  return text.str();
}

// "stages,k_tiles": two decimal integers, each within an int, and nothing else (an out-of-range
// number is not a pipeline, rather than whatever a conversion would wrap it to).
std::optional<PrefillPipeline> parse_pipeline(const char* text) {
  int values[2] = {0, 0};
  const char* cursor = text;
  for (int i = 0; i < 2; ++i) {
    if (i == 1 && *cursor++ != ',') return std::nullopt;
    char* end = nullptr;
    errno = 0;
    const long value = std::strtol(cursor, &end, 10);
    if (end == cursor || errno == ERANGE || value < INT_MIN || value > INT_MAX) return std::nullopt;
    values[i] = int(value);
    cursor = end;
  }
  if (*cursor != '\0') return std::nullopt;
  return PrefillPipeline{values[0], values[1]};
}

std::mutex& override_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::optional<PrefillKernelOverride>& override_state() {
  static std::optional<PrefillKernelOverride> state;  // unset until the first use or set
  return state;
}

}  // namespace

PrefillKernelOverride make_prefill_kernel_override(const std::optional<std::string>& kernel,
                                                   const std::optional<PrefillPipeline>& variant,
                                                   const char* kernel_source, const char* variant_source) {
  PrefillKernelOverride knobs;
  if (kernel.has_value()) {
    const std::optional<PrefillKernel> parsed = prefill_kernel_from_name(*kernel);
    TORCH_CHECK_VALUE(parsed.has_value() && *parsed != PrefillKernel::kCpu, kernel_source,
                      ": expected 'hopper', 'portable' or 'hopper_small', got '", *kernel, "'");
    knobs.kernel = parsed;
  }
  if (variant.has_value()) {
    TORCH_CHECK_VALUE(cuda::prefill_pipeline_compiled(variant->stages, variant->k_tiles), variant_source,
                      ": expected (stages, k_tiles) of a compiled portable instance, one of ", compiled_pipelines(),
                      ", got (", variant->stages, ", ", variant->k_tiles, ")");
    TORCH_CHECK_VALUE(!knobs.requires_hopper(), variant_source, ": picks a portable kernel instance, which "
                      "contradicts ", kernel_source, " = '", prefill_kernel_name(*knobs.kernel), "'");
    knobs.variant = variant;
  }
  return knobs;
}

PrefillKernelOverride parse_prefill_kernel_override(const char* kernel_text, const char* variant_text) {
  std::optional<std::string> kernel;
  if (kernel_text != nullptr && kernel_text[0] != '\0') kernel = kernel_text;
  std::optional<PrefillPipeline> variant;
  if (variant_text != nullptr && variant_text[0] != '\0') {
    variant = parse_pipeline(variant_text);
    TORCH_CHECK_VALUE(variant.has_value(), kVariantVariable, ": expected 'stages,k_tiles' (two integers), got '",
                      variant_text, "'");
  }
  return make_prefill_kernel_override(kernel, variant, kKernelVariable, kVariantVariable);
}

PrefillKernelOverride prefill_kernel_override() {
  const std::lock_guard<std::mutex> lock(override_mutex());
  std::optional<PrefillKernelOverride>& state = override_state();
  // A bad environment value raises here and leaves the state unset, so every use raises.
  if (!state.has_value()) state = parse_prefill_kernel_override(std::getenv(kKernelVariable), std::getenv(kVariantVariable));
  return *state;
}

void set_prefill_kernel_override(const PrefillKernelOverride& knobs) {
  const std::lock_guard<std::mutex> lock(override_mutex());
  override_state() = knobs;
}

}  // namespace cake
