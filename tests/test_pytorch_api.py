"""What a PyTorch user expects of the package (docs/contract.md section 1): a version, the short
alias, the functional op (opcheck, torch.compile fullgraph, CUDA graphs under
mode="reduce-overhead"), a clear error for inputs that require grad, and docstrings that name every
parameter."""
import inspect
import os
import re
import tomllib

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters
from torch._inductor.utils import run_and_get_code

import torch_ops
from helpers import DEVICES, HAS_CUDA, CacheSpec, assert_matches_reference, make_problem, random_latent
from torch_ops import _version
from torch_ops.reference import sparse_mla_prefill_reference

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_version_has_one_source():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as file:
        declared = tomllib.load(file)["project"]["version"]
    assert torch_ops.__version__ == declared
    installed = _version.installed_version()
    if installed is not None:  # the build copies pyproject's version into the metadata
        assert installed == declared, "the installed metadata is stale: reinstall the package"


def test_version_ignores_another_projects_pyproject(tmp_path):
    other = tmp_path / "pyproject.toml"
    other.write_text('[project]\nname = "something-else"\nversion = "9.9"\n')
    assert _version.source_tree_version(str(other)) is None
    assert _version.source_tree_version(str(tmp_path / "missing.toml")) is None


def test_short_alias():
    assert torch_ops.sparse_mla_prefill is torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill
    assert "sparse_mla_prefill" in torch_ops.__all__ and "sparse_mla_prefill_functional" in torch_ops.__all__


def small_problem(device, seed=41, extra=True):
    return make_problem(num_tokens=5, num_heads=32, topk=70, main=CacheSpec(3, 48, "NHD", 16), device=device, seed=seed,
                        extra=CacheSpec(9, 2) if extra else None, extra_topk=10 if extra else 0, lengths="random",
                        extra_lengths="random" if extra else None, sink=1.0, lse_scale=0.5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("head_tiles", [None, 1, 2])
def test_functional_equals_mutating(device, head_tiles):
    problem = small_problem(device)
    output, out_lse, _ = problem.run(head_tiles)
    got_out, got_lse = torch_ops.sparse_mla_prefill_functional(problem.q, problem.kv_cache, problem.indices,
                                                               problem.sm_scale, head_tiles=head_tiles, **problem.kwargs)
    assert got_out.shape == (5, 32, 512) and got_out.dtype == torch.bfloat16 and got_out.device == problem.q.device
    assert got_lse.shape == (5, 32) and got_lse.dtype == torch.float32 and got_lse.is_contiguous()
    assert torch.equal(got_out.view(torch.int16), output.view(torch.int16)) and torch.equal(got_lse, out_lse)
    assert_matches_reference(got_out, got_lse, *problem.reference())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_tokens", [1, 70, 300])
def test_functional_runs_the_planners_plan(device, num_tokens):
    """The API plans in Python (through the C++ planner) and passes head_tiles to the op; the
    functional op lets the op plan for head_tiles=None, or checks the given one. With 64 heads
    every head tile is allowed (4 runs the Hopper kernel on H100/H200): for each, planned or given,
    the functional result equals the API's bit for bit, and the API's plan is the planner's."""
    problem = make_problem(num_tokens=num_tokens, num_heads=64, topk=70, main=CacheSpec(3, 48), device=device,
                           seed=num_tokens, extra=CacheSpec(5, 4), extra_topk=20, lengths="random", sink=1.0)
    for head_tiles in (None, 1, 2, 4):
        output, out_lse, result = problem.run(head_tiles)
        assert result == torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill_details(
            num_tokens=num_tokens, num_heads=64, topk=70, extra_topk=20, device=problem.q.device, head_tiles=head_tiles)
        got_out, got_lse = torch_ops.sparse_mla_prefill_functional(problem.q, problem.kv_cache, problem.indices,
                                                                   problem.sm_scale, head_tiles=head_tiles,
                                                                   **problem.kwargs)
        assert torch.equal(got_out.view(torch.int16), output.view(torch.int16)), head_tiles
        assert torch.equal(got_lse, out_lse), head_tiles
        assert_matches_reference(got_out, got_lse, *problem.reference())


@pytest.mark.parametrize("device", DEVICES)
def test_functional_validates_like_the_op(device):
    problem = small_problem(device)
    with pytest.raises(ValueError, match="q: expected shape"):
        torch_ops.sparse_mla_prefill_functional(problem.q[0], problem.kv_cache, problem.indices, 0.1)
    with pytest.raises(ValueError, match="indices: expected dtype int32"):
        torch_ops.sparse_mla_prefill_functional(problem.q, problem.kv_cache, problem.indices.long(), 0.1)
    with pytest.raises(ValueError, match="head_tiles"):
        torch_ops.sparse_mla_prefill_functional(problem.q, problem.kv_cache, problem.indices, 0.1, head_tiles=3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("extra", [False, True])
def test_opcheck_functional(device, extra):
    problem = small_problem(device, extra=extra)
    args = (problem.q, problem.kv_cache, problem.indices, problem.sm_scale)
    torch.library.opcheck(torch.ops.cake.sparse_mla_prefill_functional.default, args, dict(problem.kwargs, head_tiles=2),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


def test_functional_schema_mutates_nothing():
    schema = torch.ops.cake.sparse_mla_prefill_functional.default._schema
    assert not any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
    assert [r.name for r in schema.returns] == ["output", "out_lse"]


def functional_step(q, kv_cache, indices, topk_length, attn_sink):
    return torch_ops.sparse_mla_prefill_functional(q, kv_cache, indices, 0.05, topk_length=topk_length,
                                                   attn_sink=attn_sink, lse_scale=0.5)


def step_inputs(device, num_tokens, seed):
    problem = make_problem(num_tokens=num_tokens, num_heads=64, topk=100, main=CacheSpec(4, 64), device=device,
                           seed=seed, lengths="random", sink=1.0)
    return (problem.q, problem.kv_cache, problem.indices, problem.kwargs["topk_length"], problem.kwargs["attn_sink"])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dynamic", [False, True])
def test_functional_compile_fullgraph(device, dynamic):
    torch._dynamo.reset()
    compiled = torch.compile(functional_step, fullgraph=True, dynamic=dynamic)
    for num_tokens, seed in [(5, 1), (9, 2)]:
        inputs = step_inputs(device, num_tokens, seed)
        (out, lse), codes = run_and_get_code(compiled, *inputs)
        eager_out, eager_lse = functional_step(*inputs)
        assert torch.equal(out.view(torch.int16), eager_out.view(torch.int16)) and torch.equal(lse, eager_lse)
        assert "cake.sparse_mla_prefill_functional" in "\n".join(codes)
    assert torch._dynamo.explain(functional_step)(*step_inputs(device, 5, 3)).graph_break_count == 0


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_functional_runs_under_cudagraph_trees():
    """mode="reduce-overhead" records the functional op into a CUDA graph (no skip); the mutating
    op writing into buffers that are graph inputs is skipped ("mutated inputs"), which is why
    the functional op exists."""
    from torch._inductor import cudagraph_trees

    torch._dynamo.reset()
    cudagraph_trees.reset_cudagraph_trees()
    counters.clear()
    compiled = torch.compile(functional_step, mode="reduce-overhead", fullgraph=True)
    inputs = step_inputs("cuda", 40, 4)
    eager_out, eager_lse = functional_step(*inputs)
    for _ in range(3):  # warm-up, record, replay
        out, lse = compiled(*inputs)
        out, lse = out.clone(), lse.clone()  # graph outputs are overwritten by the next replay
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.int16), eager_out.view(torch.int16)) and torch.equal(lse, eager_lse)
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
    manager = cudagraph_trees.get_manager(torch.cuda.current_device(), create_if_none_exists=False)
    assert manager is not None and any(manager.roots.values()), "no CUDA graph was recorded"
    assert_matches_reference(out, lse, *sparse_mla_prefill_reference(*inputs[:3], 0.05, topk_length=inputs[3],
                                                                      attn_sink=inputs[4], lse_scale=0.5))

    def mutating_step(q, kv_cache, indices, output, out_lse, topk_length, attn_sink):
        torch_ops.sparse_mla_prefill(q, kv_cache, indices, output, out_lse, 0.05, topk_length=topk_length,
                                     attn_sink=attn_sink, lse_scale=0.5)

    torch._dynamo.reset()
    counters.clear()
    buffers = (torch.empty_like(eager_out), torch.empty_like(eager_lse))
    compiled_mutating = torch.compile(mutating_step, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):
        compiled_mutating(*inputs[:3], *buffers, *inputs[3:])
    torch.cuda.synchronize()
    assert counters["inductor"]["cudagraph_skips"] >= 1
    assert torch.equal(buffers[0].view(torch.int16), eager_out.view(torch.int16))


@pytest.mark.parametrize("device", DEVICES)
def test_inputs_requiring_grad_raise_clearly(device):
    problem = small_problem(device)
    q = problem.q.clone().requires_grad_()
    sink = problem.kwargs["attn_sink"].clone().requires_grad_()
    kwargs = {k: v for k, v in problem.kwargs.items() if k != "attn_sink"}
    output = torch.full((5, 32, 512), float("nan"), dtype=torch.bfloat16, device=device)
    out_lse = torch.full((5, 32), float("nan"), device=device)
    no_backward = r"no backward\. Call it under torch\.no_grad\(\) or torch\.inference_mode\(\), or pass {}\.detach\(\)"
    api_args = (q, problem.kv_cache, problem.indices, output, out_lse, problem.sm_scale)
    functional_args = (q, problem.kv_cache, problem.indices, problem.sm_scale)
    calls = [
        ("cake_sparse_mla_sm120_dsv4_nvfp4_prefill: q requires grad", torch_ops.sparse_mla_prefill, api_args),
        ("sparse_mla_prefill_functional: q requires grad", torch_ops.sparse_mla_prefill_functional, functional_args),
        ("cake::sparse_mla_prefill: q requires grad", torch.ops.cake.sparse_mla_prefill, api_args),
        ("cake::sparse_mla_prefill_functional: q requires grad", torch.ops.cake.sparse_mla_prefill_functional,
         functional_args),
    ]
    for message, fn, args in calls:
        with pytest.raises(NotImplementedError, match=f"{message}, but this operat(ion|or) has {no_backward.format('q')}"):
            fn(*args, **kwargs)
        detached_args = (problem.q,) + args[1:]
        with pytest.raises(NotImplementedError, match=f"attn_sink requires grad.*{no_backward.format('attn_sink')}"):
            fn(*detached_args, attn_sink=sink, **kwargs)
    assert torch.isnan(output.float()).all() and torch.isnan(out_lse).all(), "nothing may be written"

    # The ways out the message names: no_grad / inference_mode, or detached inputs.
    expected_out, expected_lse = torch_ops.sparse_mla_prefill_functional(problem.q, problem.kv_cache, problem.indices,
                                                                         problem.sm_scale, **problem.kwargs)
    with torch.no_grad():
        got = torch_ops.sparse_mla_prefill_functional(q, problem.kv_cache, problem.indices, problem.sm_scale,
                                                      attn_sink=sink, **kwargs)
        torch.ops.cake.sparse_mla_prefill(*api_args, attn_sink=sink, **kwargs)
    assert not got[0].requires_grad and torch.equal(got[0].view(torch.int16), expected_out.view(torch.int16))
    assert torch.equal(output.view(torch.int16), expected_out.view(torch.int16)) and torch.equal(out_lse, expected_lse)
    with torch.inference_mode():
        got = torch_ops.sparse_mla_prefill_functional(q, problem.kv_cache, problem.indices, problem.sm_scale,
                                                      attn_sink=sink, **kwargs)
    assert torch.equal(got[1], expected_lse)


@pytest.mark.parametrize("device", DEVICES)
def test_writer_inputs_requiring_grad_raise_clearly(device):
    latent = random_latent(8, torch.Generator().manual_seed(42)).to(device).requires_grad_()
    cache = torch.zeros(2, 1, 4, 384, dtype=torch.uint8, device=device)
    slots = torch.arange(8, device=device)
    for fn, args in [(torch_ops.nvfp4_quantize_pack_sparse_mla_cache, (latent.view(2, 4, 512),)),
                     (torch_ops.nvfp4_quantize_append_sparse_mla_cache, (latent, slots, cache)),
                     (torch.ops.cake.nvfp4_pack_cache, (latent.view(2, 4, 512), cache)),
                     (torch.ops.cake.nvfp4_append_cache, (latent, slots, cache))]:
        with pytest.raises(NotImplementedError, match="latent_kv requires grad, but this operat(ion|or) has no backward"):
            fn(*args)
    assert cache.eq(0).all()
    with torch.no_grad():
        torch.ops.cake.nvfp4_pack_cache(latent.view(2, 4, 512), cache)
    assert torch.equal(cache, torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent.detach().view(2, 4, 512)))


def test_every_raw_op_has_an_autograd_kernel():
    for name in ("sparse_mla_prefill", "sparse_mla_prefill_functional", "nvfp4_pack_cache", "nvfp4_append_cache"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"cake::{name}", "Autograd"), name


PUBLIC = [getattr(torch_ops, name) for name in torch_ops.__all__] + [sparse_mla_prefill_reference]


@pytest.mark.parametrize("fn", PUBLIC, ids=lambda fn: fn.__name__)
def test_docstring_names_every_parameter(fn):
    doc = inspect.getdoc(fn)
    assert doc, f"{fn.__name__} has no docstring"
    missing = [name for name in inspect.signature(fn).parameters if not re.search(rf"\b{name}\b", doc)]
    assert not missing, f"{fn.__name__}: the docstring does not mention {missing}"
