// The cake operator library: every schema in one place, plus the small Python module that
// exposes the planner, the kernel override and the format's constants. Kernels register per
// device in cpu/ops_cpu.cpp and cuda/ops_cuda.cpp (the functional prefill in
// ops/prefill_functional.cpp, the Autograd kernel that refuses gradients in ops/no_backward.cpp);
// the fake (meta) implementations live in Python (torch_ops.meta).
#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include "cuda/portable/prefill_variants.h"
#include "format/nvfp4_format.h"
#include "cuda/prefill_kernel_choice.h"
#include "ops/cache_writer_args.h"
#include "ops/decode_args.h"
#include "ops/decode_plan.h"
#include "ops/fake_checks.h"
#include "ops/prefill_kernel_override.h"
#include "ops/prefill_plan.h"
#include "ops/prefill_target.h"

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
  // The decode (split-K): mutating like the prefill; each split writes its partial into the
  // caller-owned mid_out / mid_lse (required when the plan has more than one split), and the
  // merge writes output and out_lse. No allocation, so it captures in CUDA graphs.
  m.def(
      "sparse_mla_decode(Tensor q, Tensor kv_cache, Tensor indices, Tensor(a!) output, Tensor(b!) out_lse, "
      "float sm_scale, *, Tensor? topk_length=None, Tensor? attn_sink=None, Tensor? extra_kv_cache=None, "
      "Tensor? extra_indices=None, Tensor? extra_topk_length=None, Tensor(c!)? mid_out=None, "
      "Tensor(d!)? mid_lse=None, float lse_scale=1.0, int? num_splits=None, int max_splits=16, "
      "int? head_tiles=None) -> ()");
  // Quantizes latent_kv [P, page_size, 512] into every slot of `cache`.
  m.def("nvfp4_pack_cache(Tensor latent_kv, Tensor(a!) cache) -> ()");
  // Quantizes latent_kv [N, 512] into the slots named by slot_mapping [N]; invalid slots skipped.
  m.def("nvfp4_append_cache(Tensor latent_kv, Tensor slot_mapping, Tensor(a!) cache) -> ()");
  // The overlap checks of one call of `op` ("prefill", "decode", "append") alone, on its
  // tensors in that op's argument order (ops/call_apart.cpp): what a compiled call runs before the
  // mutating op, which torch hands copies of views of one storage. Mutates nothing, returns nothing.
  m.def("check_call_apart(str op, Tensor?[] tensors) -> ()");
}

namespace {

// The C++ checks raise c10::ValueError; Python callers of this module get ValueError.
template <typename Body>
auto value_errors(Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const c10::ValueError& error) {
    throw pybind11::value_error(error.what_without_backtrace());
  }
}

pybind11::dict plan_dict(const cake::PrefillPlan& plan) {
  pybind11::dict result;
  result["head_tiles"] = plan.head_tiles;
  result["num_ctas"] = plan.num_ctas;
  result["grid_size"] = plan.grid_size;
  result["kernel"] = cake::prefill_kernel_name(plan.kernel);
  return result;
}

pybind11::dict override_dict(const cake::PrefillKernelOverride& knobs) {
  pybind11::dict result;
  result["kernel"] = knobs.kernel.has_value() ? pybind11::object(pybind11::str(cake::prefill_kernel_name(*knobs.kernel)))
                                              : pybind11::object(pybind11::none());
  result["variant"] = knobs.variant.has_value()
                          ? pybind11::object(pybind11::make_tuple(knobs.variant->stages, knobs.variant->k_tiles))
                          : pybind11::object(pybind11::none());
  return result;
}

pybind11::dict decode_plan_dict(const cake::DecodePlan& plan) {
  pybind11::dict result;
  result["head_tiles"] = plan.head_tiles;
  result["num_splits"] = plan.num_splits;
  result["chunks_per_block"] = plan.chunks_per_block;
  return result;
}

// The head tile of a decode request described by ints and split rules given apart (plan_decode),
// the request checked as the op checks its tensors (ValueError naming the argument). The
// device-based planners check the request alone: plan_decode_on_target checks the head tile.
int64_t checked_request_head_tiles(int64_t num_tokens, int64_t num_heads, int64_t topk, int64_t extra_topk,
                                   int64_t num_sms, int64_t max_splits, std::optional<int64_t> head_tiles,
                                   int64_t max_head_tiles) {
  cake::check_decode_request(num_tokens, num_heads, topk, extra_topk, max_splits, num_sms);
  TORCH_CHECK_VALUE(max_head_tiles >= 1, "max_head_tiles: expected >= 1, got ", max_head_tiles);
  return cake::plan_decode_head_tiles(num_heads, head_tiles, max_head_tiles);
}

// The SM count the planners use for a device (intra-op threads on the CPU).
int64_t device_num_sms(const std::optional<std::string>& device) {
  return cake::resolve_prefill_target(device, std::nullopt, std::nullopt).num_sms;
}

// The largest head tile a device runs (its shared memory per block; the same for both ops).
int64_t device_max_head_tiles(const std::optional<std::string>& device) {
  return cake::resolve_prefill_target(device, std::nullopt, std::nullopt).max_head_tiles;
}

bool is_python_int(const pybind11::handle& value) {
  return pybind11::isinstance<pybind11::int_>(value) && !pybind11::isinstance<pybind11::bool_>(value);
}

// kernel: None or a str; variant: None or a (stages, k_tiles) pair of ints. Then the same
// validation as the environment's values.
cake::PrefillKernelOverride override_from_python(const pybind11::object& kernel, const pybind11::object& variant) {
  std::optional<std::string> kernel_name;
  if (!kernel.is_none()) {
    TORCH_CHECK_VALUE(pybind11::isinstance<pybind11::str>(kernel), "kernel: expected None, 'hopper', 'portable' or "
                      "'hopper_small', got ", std::string(pybind11::repr(kernel)));
    kernel_name = kernel.cast<std::string>();
  }
  std::optional<cake::PrefillPipeline> pipeline;
  if (!variant.is_none()) {
    const bool pair = (pybind11::isinstance<pybind11::tuple>(variant) || pybind11::isinstance<pybind11::list>(variant)) &&
                      pybind11::len(variant) == 2 && is_python_int(variant[pybind11::int_(0)]) &&
                      is_python_int(variant[pybind11::int_(1)]);
    TORCH_CHECK_VALUE(pair, "variant: expected None or (stages, k_tiles), two ints, got ",
                      std::string(pybind11::repr(variant)));
    // Values past 64 bits go to the range check as 0 (a cast would raise pybind's RuntimeError).
    const auto small_int = [](const pybind11::handle& value) -> int64_t {
      int overflow = 0;
      const long long result = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
      return overflow != 0 ? 0 : int64_t(result);
    };
    const int64_t stages = small_int(variant[pybind11::int_(0)]);
    const int64_t k_tiles = small_int(variant[pybind11::int_(1)]);
    TORCH_CHECK_VALUE(stages > 0 && stages < 1000 && k_tiles > 0 && k_tiles < 1000, "variant: expected (stages, k_tiles) "
                      "of a compiled portable instance, got ", std::string(pybind11::repr(variant)));
    pipeline = cake::PrefillPipeline{int(stages), int(k_tiles)};
  }
  return cake::make_prefill_kernel_override(kernel_name, pipeline);
}

}  // namespace

PYBIND11_MODULE(_C, module) {
  module.doc() = "cake sparse-MLA NVFP4 operators (registered under torch.ops.cake)";
  module.def(
      "prefill_plan_table",
      [](const std::string& kernel) {
        return value_errors([&] {
          const std::optional<cake::PrefillKernel> family = cake::prefill_kernel_from_name(kernel);
          TORCH_CHECK_VALUE(family.has_value(), "kernel: expected 'hopper', 'portable', 'cpu' or 'hopper_small', got '",
                            kernel, "'");
          std::vector<std::pair<int64_t, int64_t>> table;
          for (const auto& row : cake::prefill_plan_table(*family)) table.emplace_back(row.head_tiles, row.min_items_percent);
          return table;
        });
      },
      "(head_tiles, min_items_percent of the SM count) rows of the prefill planner's table for a kernel family",
      pybind11::arg("kernel") = "portable");
  // The fake implementations (torch_ops.meta) run the ops' own tensor checks through this, so a
  // meta or fake call raises the ValueError a real one would (the data pointers aside).
  module.def(
      "check_attention_inputs",
      [](const std::string& op, const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& indices,
         const at::Tensor& output, const at::Tensor& out_lse, const std::optional<at::Tensor>& topk_length,
         const std::optional<at::Tensor>& attn_sink, const std::optional<at::Tensor>& extra_kv_cache,
         const std::optional<at::Tensor>& extra_indices, const std::optional<at::Tensor>& extra_topk_length,
         int64_t max_splits, const std::optional<at::Tensor>& mid_out, const std::optional<at::Tensor>& mid_lse,
         std::optional<int64_t> head_tiles, std::optional<int64_t> num_splits, double sm_scale,
         double lse_scale) {
        value_errors([&] {
          TORCH_CHECK_VALUE(op == "prefill" || op == "decode", "op: expected 'prefill' or 'decode', got '", op, "'");
          cake::DecodeArgs args;
          cake::pack_attention_inputs(args, q, kv_cache, indices, output, out_lse, sm_scale, topk_length,
                                      attn_sink, extra_kv_cache, extra_indices, extra_topk_length, lse_scale);
          args.mid_out = mid_out.value_or(at::Tensor());
          args.mid_lse = mid_lse.value_or(at::Tensor());
          args.max_splits = max_splits;
          args.head_tiles = head_tiles;
          args.num_splits = num_splits;
          cake::check_call_without_data(op == "decode", args);
        });
      },
      "The prefill's or the decode's checks that need neither data nor a device (ValueError naming the "
      "argument): the tensors' (alignment aside), sm_scale, lse_scale, head_tiles, the decode's explicit num_splits "
      "and scratch",
      pybind11::arg("op"), pybind11::arg("q"), pybind11::arg("kv_cache"), pybind11::arg("indices"),
      pybind11::arg("output"), pybind11::arg("out_lse"), pybind11::arg("topk_length"), pybind11::arg("attn_sink"),
      pybind11::arg("extra_kv_cache"), pybind11::arg("extra_indices"), pybind11::arg("extra_topk_length"),
      pybind11::arg("max_splits") = 16, pybind11::arg("mid_out") = pybind11::none(),
      pybind11::arg("mid_lse") = pybind11::none(), pybind11::arg("head_tiles") = pybind11::none(),
      pybind11::arg("num_splits") = pybind11::none(), pybind11::arg("sm_scale") = 0.0,
      pybind11::arg("lse_scale") = 1.0);
  // The same for the cache writers' fakes: the writers' own checks (the cache's alignment aside).
  module.def(
      "check_writer_inputs",
      [](const std::string& op, const at::Tensor& latent_kv, const std::optional<at::Tensor>& slot_mapping,
         const at::Tensor& cache) {
        value_errors([&] {
          TORCH_CHECK_VALUE(op == "pack" || op == "append", "op: expected 'pack' or 'append', got '", op, "'");
          if (op == "pack") {
            cake::check_pack_args(latent_kv, cache, cake::PointerChecks::kWithoutData);
          } else {
            TORCH_CHECK_VALUE(slot_mapping.has_value(), "slot_mapping: required by append");
            cake::check_append_args(latent_kv, *slot_mapping, cache, cake::PointerChecks::kWithoutData);
          }
        });
      },
      "The pack or append writer's checks that need no data (ValueError naming the argument; the cache's "
      "alignment aside)",
      pybind11::arg("op"), pybind11::arg("latent_kv"), pybind11::arg("slot_mapping"), pybind11::arg("cache"));
  module.def("prefill_max_head_tiles", &cake::cuda::prefill_max_head_tiles,
             "Largest head tile whose CUDA instance fits `smem_per_block` bytes of shared memory",
             pybind11::arg("smem_per_block"));
  module.def(
      "prefill_kernel_for",
      [](int cc_major, long long smem_per_block, long long num_heads, long long head_tiles) {
        return value_errors([&] {
          return cake::prefill_kernel_name(cake::cuda::select_prefill_kernel(
              cc_major, smem_per_block, num_heads, head_tiles, cake::prefill_kernel_override()));
        });
      },
      "Which CUDA prefill kernel serves a call ('hopper', 'hopper_small' or 'portable') under the kernel override",
      pybind11::arg("cc_major"), pybind11::arg("smem_per_block"), pybind11::arg("num_heads"),
      pybind11::arg("head_tiles"));
  module.def(
      "device_runs_hopper_prefill",
      [](int cc_major, long long smem_per_block) {
        return value_errors([&] {
          return cake::cuda::device_runs_hopper_prefill(cc_major, smem_per_block, cake::prefill_kernel_override());
        });
      },
      "Whether a device runs the Hopper prefill kernel (for its 4-tile calls) under the kernel override",
      pybind11::arg("cc_major"), pybind11::arg("smem_per_block"));
  module.def(
      "device_runs_hopper_small_prefill",
      [](int cc_major, long long smem_per_block) {
        return value_errors([&] {
          return cake::cuda::device_runs_hopper_small_prefill(cc_major, smem_per_block, cake::prefill_kernel_override());
        });
      },
      "Whether a device runs the small-heads Hopper prefill kernel (for the calls the 64-head one does not serve) "
      "under the kernel override",
      pybind11::arg("cc_major"), pybind11::arg("smem_per_block"));
  module.def(
      "decode_split_kernel_for",
      [](int cc_major, long long smem_per_block, long long num_heads, long long head_tiles, long long num_splits,
         long long chunks_per_block) {
        return value_errors([&] {
          return cake::prefill_kernel_name(cake::cuda::select_decode_split_kernel(
              cc_major, smem_per_block, num_heads, head_tiles, num_splits, chunks_per_block,
              cake::prefill_kernel_override()));
        });
      },
      "Which kernel runs the decode's splits ('hopper' or 'portable') under the kernel override, for "
      "a plan of num_splits splits whose largest holds chunks_per_block chunks",
      pybind11::arg("cc_major"), pybind11::arg("smem_per_block"), pybind11::arg("num_heads"),
      pybind11::arg("head_tiles"), pybind11::arg("num_splits"), pybind11::arg("chunks_per_block"));
  module.def(
      "divided_slot_pages",
      [](long long page_size, const std::vector<long long>& slots) {
        const cake::nvfp4::SlotPageDivisor divisor = cake::nvfp4::slot_page_divisor(page_size);
        std::vector<long long> pages;
        for (const long long slot : slots) pages.push_back(cake::nvfp4::divided_slot_page(slot, divisor));
        return pages;
      },
      "The CUDA gathers' page of each slot (0 <= slot < 2^31) by multiply and shift, for tests",
      pybind11::arg("page_size"), pybind11::arg("slots"));
  module.def(
      "slot_row_offsets",
      [](long long page_size, long long page_stride, const std::vector<long long>& slots) {
        const cake::nvfp4::SlotPageDivisor divisor = cake::nvfp4::slot_page_divisor(page_size);
        std::vector<std::pair<unsigned long long, unsigned long long>> offsets;
        for (const long long slot : slots) {
          const cake::nvfp4::SlotRowOffsets o = cake::nvfp4::slot_row_offsets(uint32_t(slot), divisor, page_size, page_stride);
          offsets.emplace_back(o.data, o.scale);
        }
        return offsets;
      },
      "The CUDA gathers' (data row, scale row) byte offsets of each slot (0 <= slot < 2^31), for tests",
      pybind11::arg("page_size"), pybind11::arg("page_stride"), pybind11::arg("slots"));
  module.def("decode_splits_fit_hopper", &cake::cuda::decode_splits_fit_hopper,
             "Whether a decode plan of num_splits splits, the largest holding chunks_per_block chunks, gives the "
             "Hopper kernels enough work a split (one split always does: it runs as the prefill does)",
             pybind11::arg("num_splits"), pybind11::arg("chunks_per_block"));
  module.attr("HOPPER_DECODE_MIN_CHUNKS_PER_SPLIT") = cake::cuda::kHopperDecodeMinChunksPerSplit;
  // Shared memory per block each Hopper kernel needs (the small-heads one at its largest unit).
  module.attr("HOPPER_PREFILL_SMEM_BYTES") = cake::cuda::HopperPrefillLayout::kSmemBytes;
  module.attr("HOPPER_SMALL_PREFILL_SMEM_BYTES") = cake::cuda::HopperSmallPrefillLayout::kMaxSmemBytes;
  // The small-heads kernel's 16-head split units of a decode of several splits whose largest split
  // holds at most this many chunks run its short form (cuda/hopper_small/prefill_small_layout.h, UnitForm).
  module.attr("HOPPER_SMALL_SHORT_SPLIT_CHUNKS") = cake::cuda::hopper_small::kShortSplitChunks;

  // The byte format's and the planner's constants (torch_ops reads them from here).
  module.attr("HEAD_DIM") = cake::nvfp4::kHeadDim;
  module.attr("NOPE_DIM") = cake::nvfp4::kNopeDim;
  module.attr("ROPE_DIM") = cake::nvfp4::kRopeDim;
  module.attr("GROUP_SIZE") = cake::nvfp4::kGroupSize;
  module.attr("DATA_ROW_BYTES") = cake::nvfp4::kDataRowBytes;
  module.attr("SCALE_ROW_BYTES") = cake::nvfp4::kScaleRowBytes;
  module.attr("TOKEN_BYTES") = cake::nvfp4::kTokenBytes;
  module.attr("HEADS_PER_TILE") = cake::nvfp4::kHeadsPerTile;
  module.attr("CHUNK_SIZE") = cake::nvfp4::kChunkSize;
  module.attr("MAX_CHUNKS") = cake::nvfp4::kMaxChunks;

  // The planner (csrc/ops/prefill_plan.h), for torch_ops/planner.py and torch_ops/prefill.py.
  module.def(
      "prefill_head_tile_choices",
      [](int64_t num_heads) { return cake::prefill_head_tile_choices(num_heads); },
      "Head-tile choices for a head count ([] without a prefill instance)", pybind11::arg("num_heads"));
  module.def(
      "plan_prefill",
      [](int64_t num_tokens, int64_t num_heads, int64_t topk, int64_t extra_topk, std::optional<int64_t> num_sms,
         std::optional<std::string> device, std::optional<std::string> kernel, std::optional<int64_t> head_tiles) {
        return value_errors([&] {
          cake::check_prefill_plan_request(num_tokens, num_heads, topk, extra_topk);
          return plan_dict(cake::plan_prefill(num_tokens, num_heads, head_tiles,
                                              cake::resolve_prefill_target(device, kernel, num_sms)));
        });
      },
      "The prefill plan {head_tiles, num_ctas, grid_size, kernel} for a shape on a device or kernel family",
      pybind11::arg("num_tokens"), pybind11::arg("num_heads"), pybind11::arg("topk"), pybind11::arg("extra_topk") = 0,
      pybind11::arg("num_sms") = pybind11::none(), pybind11::arg("device") = pybind11::none(),
      pybind11::arg("kernel") = pybind11::none(), pybind11::arg("head_tiles") = pybind11::none());
  module.def(
      "prefill_plan_steps",
      [](int64_t num_heads, std::optional<int64_t> head_tiles, std::optional<int64_t> num_sms,
         std::optional<std::string> device, std::optional<std::string> kernel) {
        return value_errors([&] {
          std::vector<pybind11::tuple> steps;
          for (const cake::PrefillPlanStep& step :
               cake::prefill_plan_steps(num_heads, head_tiles, cake::resolve_prefill_target(device, kernel, num_sms))) {
            steps.push_back(pybind11::make_tuple(step.min_tokens, step.head_tiles, cake::prefill_kernel_name(step.kernel),
                                                 step.ctas_per_token, step.grid_per_token, step.grid_base));
          }
          return steps;
        });
      },
      "The plan for every token count, as (min_tokens, head_tiles, kernel, ctas_per_token, grid_per_token, grid_base) "
      "steps; device, kernel and num_sms as for plan_prefill",
      pybind11::arg("num_heads"), pybind11::arg("head_tiles") = pybind11::none(),
      pybind11::arg("num_sms") = pybind11::none(), pybind11::arg("device") = pybind11::none(),
      pybind11::arg("kernel") = pybind11::none());

  // The kernel override (csrc/ops/prefill_kernel_override.h), for torch_ops/kernel_override.py.
  module.def(
      "get_prefill_kernel_override", [] { return value_errors([] { return override_dict(cake::prefill_kernel_override()); }); },
      "The kernel override in force (the environment's until one is set)");
  module.def(
      "set_prefill_kernel_override",
      [](const pybind11::object& kernel, const pybind11::object& variant) {
        value_errors([&] { cake::set_prefill_kernel_override(override_from_python(kernel, variant)); });
      },
      "Validates and sets the kernel override", pybind11::arg("kernel") = pybind11::none(),
      pybind11::arg("variant") = pybind11::none());
  module.def(
      "parse_prefill_kernel_override",
      [](std::optional<std::string> kernel_text, std::optional<std::string> variant_text) {
        return value_errors([&] {
          return override_dict(cake::parse_prefill_kernel_override(kernel_text ? kernel_text->c_str() : nullptr,
                                                                    variant_text ? variant_text->c_str() : nullptr));
        });
      },
      "Parses the environment's text form (CAKE_PREFILL_KERNEL, CAKE_PREFILL_VARIANT) without setting it",
      pybind11::arg("kernel_text") = pybind11::none(), pybind11::arg("variant_text") = pybind11::none());

  // The decode planner (csrc/ops/decode_plan.h), for torch_ops/decode_planner.py.
  module.attr("DEFAULT_MAX_SPLITS") = cake::kDefaultMaxSplits;
  module.attr("MAX_CHUNKS_PER_SPLIT") = cake::kMaxChunksPerSplit;
  module.attr("LIST_CHUNKS_PER_SPLIT") = cake::kListChunksPerSplit;
  module.attr("DECODE_CROSSOVER_ITEMS_PERCENT_WIDE") = cake::kDecodeCrossoverItemsPercentWide;
  module.attr("DECODE_CROSSOVER_ITEMS_PERCENT_NARROW") = cake::kDecodeCrossoverItemsPercentNarrow;
  module.attr("DECODE_CROSSOVER_ITEMS_PERCENT_TWO_GRIDS") = cake::kDecodeCrossoverItemsPercentTwoGrids;
  module.def(
      "decode_head_tile_choices", [](int64_t num_heads) { return cake::decode_head_tile_choices(num_heads); },
      "Head-tile choices of the decode for a head count ([] for a head count it rejects)", pybind11::arg("num_heads"));
  module.def(
      "decode_num_chunks",
      [](int64_t topk, int64_t extra_topk) {
        return value_errors([&] {
          TORCH_CHECK_VALUE(topk >= 1, "topk: expected >= 1, got ", topk);
          TORCH_CHECK_VALUE(extra_topk >= 0, "extra_topk: expected >= 0, got ", extra_topk);
          return cake::decode_num_chunks(topk, extra_topk);
        });
      },
      "Chunks of 64 in a token's candidate lists: ceil(topk/64) + ceil(extra_topk/64)", pybind11::arg("topk"),
      pybind11::arg("extra_topk") = 0);
  module.def(
      "plan_decode",
      [](int64_t num_tokens, int64_t num_heads, int64_t topk, int64_t extra_topk, int64_t num_sms, int64_t max_splits,
         std::optional<int64_t> head_tiles, std::optional<int64_t> num_splits, int64_t max_head_tiles,
         int64_t min_chunks_per_split, int64_t max_unsplit_chunks) {
        return value_errors([&] {
          const int64_t tiles = checked_request_head_tiles(num_tokens, num_heads, topk, extra_topk, num_sms, max_splits,
                                                           head_tiles, max_head_tiles);
          return decode_plan_dict(cake::plan_decode(num_tokens, num_heads, cake::decode_num_chunks(topk, extra_topk),
                                                    num_sms, max_splits, tiles, num_splits,
                                                    cake::DecodeSplitRules{min_chunks_per_split, max_unsplit_chunks}));
        });
      },
      "The decode plan {head_tiles, num_splits, chunks_per_block} for a shape on num_sms SMs whose shared memory runs "
      "head tiles up to max_head_tiles, whose split kernels want min_chunks_per_split chunks a split and whose "
      "one-split decode should hold at most max_unsplit_chunks chunks",
      pybind11::arg("num_tokens"), pybind11::arg("num_heads"), pybind11::arg("topk"), pybind11::arg("extra_topk"),
      pybind11::arg("num_sms"), pybind11::arg("max_splits"), pybind11::arg("head_tiles") = pybind11::none(),
      pybind11::arg("num_splits") = pybind11::none(), pybind11::arg("max_head_tiles") = cake::kMaxHeadTiles,
      pybind11::arg("min_chunks_per_split") = 1, pybind11::arg("max_unsplit_chunks") = cake::kMaxChunksPerSplit);
  module.def(
      "plan_decode_on_device",
      [](int64_t num_tokens, int64_t num_heads, int64_t topk, int64_t extra_topk, std::optional<int64_t> num_sms,
         int64_t max_splits, std::optional<int64_t> head_tiles, std::optional<int64_t> num_splits,
         std::optional<std::string> device, std::optional<std::string> kernel) {
        return value_errors([&] {
          const cake::PrefillTarget target = cake::resolve_prefill_target(device, kernel, num_sms);
          // The head tile is checked by plan_decode_on_target, after the request (as the op checks them).
          cake::check_decode_request(num_tokens, num_heads, topk, extra_topk, max_splits, target.num_sms);
          return decode_plan_dict(cake::plan_decode_on_target(target, num_tokens, num_heads,
                                                              cake::decode_num_chunks(topk, extra_topk), max_splits,
                                                              head_tiles, num_splits));
        });
      },
      "The plan the decode op runs for a shape on a device (None: the current one): its SMs (or num_sms), its "
      "head-tile cap and its split kernels' fewest chunks a split; `kernel` describes a kernel family as the "
      "prefill planner's does (without a device: that family in general, num_sms required)",
      pybind11::arg("num_tokens"), pybind11::arg("num_heads"), pybind11::arg("topk"), pybind11::arg("extra_topk"),
      pybind11::arg("num_sms"), pybind11::arg("max_splits"), pybind11::arg("head_tiles") = pybind11::none(),
      pybind11::arg("num_splits") = pybind11::none(), pybind11::arg("device") = pybind11::none(),
      pybind11::arg("kernel") = pybind11::none());
  module.def(
      "decode_plan_steps",
      [](int64_t num_heads, int64_t topk, int64_t extra_topk, int64_t max_splits, std::optional<int64_t> head_tiles,
         std::optional<int64_t> num_splits, std::optional<std::string> device) -> pybind11::object {
        const cake::PrefillTarget target =
            value_errors([&] { return cake::resolve_prefill_target(device, std::nullopt, std::nullopt); });
        int64_t num_chunks = 0;
        try {
          // Checked once, for no token (num_splits too); the steps then hold for every token count.
          cake::check_decode_request(0, num_heads, topk, extra_topk, max_splits, target.num_sms);
          num_chunks = cake::decode_num_chunks(topk, extra_topk);
          cake::plan_decode_on_target(target, 0, num_heads, num_chunks, max_splits, head_tiles, num_splits);
        } catch (const c10::ValueError&) {
          return pybind11::none();  // the op rejects these arguments, naming its tensors
        }
        pybind11::list steps;
        for (const cake::DecodePlanStep& step : cake::decode_plan_steps_on_target(target, num_heads, num_chunks,
                                                                                 max_splits, head_tiles, num_splits)) {
          steps.append(pybind11::make_tuple(step.min_tokens, step.plan.head_tiles, step.plan.num_splits,
                                            step.plan.chunks_per_block));
        }
        return pybind11::tuple(steps);
      },
      "The decode plan on a device for every token count, as (min_tokens, head_tiles, num_splits, chunks_per_block) "
      "steps; None when the decode op rejects these ints",
      pybind11::arg("num_heads"), pybind11::arg("topk"), pybind11::arg("extra_topk"), pybind11::arg("max_splits"),
      pybind11::arg("head_tiles") = pybind11::none(), pybind11::arg("num_splits") = pybind11::none(),
      pybind11::arg("device") = pybind11::none());
  module.def(
      "decode_scratch_splits",
      [](int64_t topk, int64_t extra_topk, std::optional<int64_t> max_splits) {
        return value_errors([&] {
          cake::check_decode_lists(topk, extra_topk, max_splits.value_or(cake::kDefaultMaxSplits));
          return cake::decode_scratch_splits(cake::decode_num_chunks(topk, extra_topk), max_splits);
        });
      },
      "Splits of scratch (dim 0 of mid_out and mid_lse) that cover every decode plan of a shape",
      pybind11::arg("topk"), pybind11::arg("extra_topk") = 0, pybind11::arg("max_splits") = pybind11::none());
  module.def(
      "decode_scratch_bytes",
      [](int64_t num_tokens, int64_t num_heads, int64_t topk, int64_t extra_topk, std::optional<int64_t> max_splits) {
        return value_errors([&] {
          cake::check_decode_request(num_tokens, num_heads, topk, extra_topk,
                                     max_splits.value_or(cake::kDefaultMaxSplits), std::nullopt);
          return cake::decode_scratch_bytes(num_tokens, num_heads, cake::decode_num_chunks(topk, extra_topk),
                                            max_splits);
        });
      },
      "Bytes of mid_out and mid_lse covering every decode plan of a shape", pybind11::arg("num_tokens"),
      pybind11::arg("num_heads"), pybind11::arg("topk"), pybind11::arg("extra_topk") = 0,
      pybind11::arg("max_splits") = pybind11::none());
  module.def(
      "select_attention_op",
      [](int64_t num_tokens, int64_t num_heads, int64_t topk, int64_t extra_topk, int64_t num_sms) {
        return value_errors([&] {
          // The decode's limits at its default max_splits: the shapes one of the two ops serves.
          cake::check_decode_request(num_tokens, num_heads, topk, extra_topk, cake::kDefaultMaxSplits, num_sms);
          return std::string(cake::attention_op_name(
              cake::select_attention_op(num_tokens, num_heads, cake::decode_num_chunks(topk, extra_topk), num_sms)));
        });
      },
      "'decode' or 'prefill': the op that serves a shape on num_sms SMs (the crossover of csrc/ops/decode_plan.h)",
      pybind11::arg("num_tokens"), pybind11::arg("num_heads"), pybind11::arg("topk"), pybind11::arg("extra_topk"),
      pybind11::arg("num_sms"));
  module.def(
      "decode_token_limit",
      [](int64_t num_heads, int64_t topk, int64_t extra_topk, std::optional<std::string> device) -> pybind11::object {
        const int64_t num_sms = value_errors([&] { return device_num_sms(device); });
        try {
          cake::check_decode_request(0, num_heads, topk, extra_topk, cake::kDefaultMaxSplits, num_sms);
        } catch (const c10::ValueError&) {
          return pybind11::none();  // neither op serves these ints; the op called rejects them
        }
        return pybind11::int_(cake::decode_token_limit(num_heads, cake::decode_num_chunks(topk, extra_topk), num_sms));
      },
      "The token count from which select_attention_op picks the prefill on a device (-1: never; None: neither op "
      "serves the shape)",
      pybind11::arg("num_heads"), pybind11::arg("topk"), pybind11::arg("extra_topk"),
      pybind11::arg("device") = pybind11::none());
  module.def(
      "prefill_serves",
      [](int64_t num_heads, int64_t topk, int64_t extra_topk) {
        return topk >= 1 && extra_topk >= 0 && cake::prefill_serves(num_heads, cake::decode_num_chunks(topk, extra_topk));
      },
      "Whether the prefill runs a shape (H a multiple of 16 up to 128, at most 16 chunks of 64 candidates)",
      pybind11::arg("num_heads"), pybind11::arg("topk"), pybind11::arg("extra_topk") = 0);
  module.def(
      "device_num_sms", [](std::optional<std::string> device) { return value_errors([&] { return device_num_sms(device); }); },
      "The SM count the planners use for a device (intra-op threads on the CPU)", pybind11::arg("device") = pybind11::none());
  module.def(
      "device_max_head_tiles",
      [](std::optional<std::string> device) { return value_errors([&] { return device_max_head_tiles(device); }); },
      "The largest head tile a device's shared memory runs, in either op (4 on the CPU)",
      pybind11::arg("device") = pybind11::none());
}
