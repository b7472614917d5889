// The cake operator library: every schema in one place, plus the small Python module that
// exposes the planner's table. Kernels register per device in cpu/ops_cpu.cpp and
// cuda/ops_cuda.cpp (the functional prefill in ops/prefill_functional.cpp, the Autograd kernel
// that refuses gradients in ops/no_backward.cpp); the fake (meta) implementations live in Python
// (torch_ops.meta).
#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/library.h>

#include "cuda/portable/prefill_variants.h"
#include "cuda/prefill_kernel_choice.h"
#include "ops/prefill_plan.h"

TORCH_LIBRARY(cake, m) {
  m.set_python_module("torch_ops.meta.fake_impls");
  // Mutating: writes `output` and `out_lse` in place and returns nothing, so it needs no scratch
  // and captures in CUDA graphs with caller-owned buffers.
  m.def(
      "sparse_mla_prefill(Tensor q, Tensor kv_cache, Tensor indices, Tensor(a!) output, Tensor(b!) out_lse, "
      "float sm_scale, *, Tensor? topk_length=None, Tensor? attn_sink=None, Tensor? extra_kv_cache=None, "
      "Tensor? extra_indices=None, Tensor? extra_topk_length=None, float lse_scale=1.0, int? head_tiles=None) -> ()");
  // The same computation returning new tensors (output, out_lse): no input is mutated, so it
  // suits torch.compile(mode="reduce-overhead") when the caller does not own the buffers.
  m.def(
      "sparse_mla_prefill_functional(Tensor q, Tensor kv_cache, Tensor indices, float sm_scale, *, "
      "Tensor? topk_length=None, Tensor? attn_sink=None, Tensor? extra_kv_cache=None, Tensor? extra_indices=None, "
      "Tensor? extra_topk_length=None, float lse_scale=1.0, int? head_tiles=None) -> (Tensor output, Tensor out_lse)");
  // Quantizes latent_kv [P, page_size, 512] into every slot of `cache`.
  m.def("nvfp4_pack_cache(Tensor latent_kv, Tensor(a!) cache) -> ()");
  // Quantizes latent_kv [N, 512] into the slots named by slot_mapping [N]; invalid slots skipped.
  m.def("nvfp4_append_cache(Tensor latent_kv, Tensor slot_mapping, Tensor(a!) cache) -> ()");
}

PYBIND11_MODULE(_C, module) {
  module.doc() = "cake sparse-MLA NVFP4 operators (registered under torch.ops.cake)";
  module.def(
      "prefill_plan_table",
      [](bool hopper) {
        std::vector<std::pair<int64_t, int64_t>> table;
        for (const auto& row : cake::prefill_plan_table(hopper)) table.emplace_back(row.head_tiles, row.min_items_percent);
        return table;
      },
      "(head_tiles, min_items_percent of the SM count) rows of the prefill planner, for the portable "
      "kernel or (hopper=True) the Hopper kernel",
      pybind11::arg("hopper") = false);
  module.def("prefill_max_head_tiles", &cake::cuda::prefill_max_head_tiles,
             "Largest head tile whose CUDA instance fits `smem_per_block` bytes of shared memory",
             pybind11::arg("smem_per_block"));
  module.def(
      "prefill_kernel_for",
      [](int cc_major, long long smem_per_block, long long num_heads, long long head_tiles) {
        return cake::cuda::select_prefill_kernel(cc_major, smem_per_block, num_heads, head_tiles) ==
                       cake::cuda::PrefillKernel::kHopper
                   ? "hopper"
                   : "portable";
      },
      "Which CUDA prefill kernel serves a call ('hopper' or 'portable'), knobs included",
      pybind11::arg("cc_major"), pybind11::arg("smem_per_block"), pybind11::arg("num_heads"),
      pybind11::arg("head_tiles"));
  module.def("device_runs_hopper_prefill", &cake::cuda::device_runs_hopper_prefill,
             "Whether a device runs the Hopper prefill kernel (for its 4-tile calls), knobs included",
             pybind11::arg("cc_major"), pybind11::arg("smem_per_block"));
  module.def("plan_prefill_head_tiles", &cake::plan_prefill_head_tiles,
             "The C++ op's own plan when head_tiles is None (for tests)", pybind11::arg("num_tokens"),
             pybind11::arg("num_heads"), pybind11::arg("num_sms"), pybind11::arg("hopper") = false);
}
