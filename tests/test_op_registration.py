"""The ops as torch.library operators: schema, opcheck (fake tensor, aot dispatch dynamic),
torch.compile with zero graph breaks and no copies of the in-place outputs."""
import pytest
import torch
import torch._dynamo
from torch._inductor.utils import run_and_get_code

import torch_ops
from helpers import DEVICES, CacheSpec, make_problem, random_latent


def test_schema_marks_outputs_mutated():
    schema = torch.ops.cake.sparse_mla_prefill.default._schema
    mutated = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    assert mutated == ["output", "out_lse"]
    assert len(schema.returns) == 0
    for op, name in [(torch.ops.cake.nvfp4_pack_cache, "cache"), (torch.ops.cake.nvfp4_append_cache, "cache")]:
        schema = op.default._schema
        assert [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write] == [name]


def prefill_args(device, extra=True):
    problem = make_problem(num_tokens=4, num_heads=32, topk=70, main=CacheSpec(3, 48, "NHD", 16), device=device, seed=3,
                           extra=CacheSpec(9, 2) if extra else None, extra_topk=10 if extra else 0, lengths="random",
                           sink=1.0, lse_scale=0.5)
    output = torch.full((4, 32, 512), float("nan"), dtype=torch.bfloat16, device=device)
    out_lse = torch.full((4, 32), float("nan"), device=device)
    args = (problem.q, problem.kv_cache, problem.indices, output, out_lse, problem.sm_scale)
    return args, dict(problem.kwargs, head_tiles=2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("extra", [False, True])
def test_opcheck_prefill(device, extra):
    args, kwargs = prefill_args(device, extra)
    torch.library.opcheck(torch.ops.cake.sparse_mla_prefill.default, args, kwargs,
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_check_call_apart(device):
    """The overlap-check op the Python functions put in compiled graphs: schema, fake, autograd
    registration and AOT dispatch; on tensors apart it raises nothing."""
    args, kwargs = prefill_args(device)
    tensors = [*args[:5], *(kwargs.get(name) for name in ("topk_length", "attn_sink", "extra_kv_cache",
                                                           "extra_indices", "extra_topk_length")), None, None]
    torch.library.opcheck(torch.ops.cake.check_call_apart.default, ("prefill", tensors))
    latent = random_latent(5, torch.Generator().manual_seed(1)).to(device)
    torch.library.opcheck(torch.ops.cake.check_call_apart.default, ("append", [latent, args[1]]))
    with pytest.raises(ValueError, match="output: shares memory with q"):
        torch.ops.cake.check_call_apart("prefill", [args[0], *tensors[1:3], args[0], *tensors[4:]])
    with pytest.raises(ValueError, match="op: expected 'prefill', 'decode' or 'append', got 'attention'"):
        torch.ops.cake.check_call_apart("attention", tensors)
    with pytest.raises(ValueError, match="tensors: expected the call's 12 tensor arguments, got 10"):
        torch.ops.cake.check_call_apart("decode", tensors[:10])


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_writers(device):
    g = torch.Generator().manual_seed(0)
    latent = random_latent(2 * 8, g).view(2, 8, 512).to(device)
    cache = torch.zeros(2, 1, 8, 384, dtype=torch.uint8, device=device)
    tests = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")
    torch.library.opcheck(torch.ops.cake.nvfp4_pack_cache.default, (latent, cache), test_utils=tests)
    slots = torch.tensor([3, -1, 3, 15, 100], dtype=torch.int64, device=device)
    torch.library.opcheck(torch.ops.cake.nvfp4_append_cache.default, (latent.view(-1, 512)[:5], slots, cache),
                          test_utils=tests)


def api_call(q, kv_cache, indices, output, out_lse, topk_length, attn_sink):
    torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(q, kv_cache, indices, output, out_lse, 0.05,
                                                       topk_length=topk_length, attn_sink=attn_sink, lse_scale=0.5)
    return output, out_lse


def raw_call(q, kv_cache, indices, output, out_lse, topk_length, attn_sink):
    torch.ops.cake.sparse_mla_prefill(q, kv_cache, indices, output, out_lse, 0.05, topk_length=topk_length,
                                      attn_sink=attn_sink, lse_scale=0.5, head_tiles=1)
    return output, out_lse


def compile_inputs(device, num_tokens, seed):
    problem = make_problem(num_tokens=num_tokens, num_heads=64, topk=100, main=CacheSpec(4, 64), device=device,
                           seed=seed, lengths="random", sink=1.0)
    output = torch.full((num_tokens, 64, 512), float("nan"), dtype=torch.bfloat16, device=device)
    out_lse = torch.full((num_tokens, 64), float("nan"), device=device)
    return (problem.q, problem.kv_cache, problem.indices, output, out_lse, problem.kwargs["topk_length"],
            problem.kwargs["attn_sink"])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn", [api_call, raw_call], ids=["api", "op"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph(device, fn, dynamic):
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, dynamic=dynamic)
    for num_tokens, seed in [(5, 1), (9, 2)]:
        inputs = compile_inputs(device, num_tokens, seed)
        eager_inputs = tuple(x.clone() for x in inputs)
        (out, lse), codes = run_and_get_code(compiled, *inputs)
        eager_out, eager_lse = fn(*eager_inputs)
        # Written in place into the caller's buffers, equal to eager.
        assert out.data_ptr() == inputs[3].data_ptr() and lse.data_ptr() == inputs[4].data_ptr()
        assert torch.equal(out.view(torch.int16), eager_out.view(torch.int16))
        assert torch.equal(lse, eager_lse)
        code = "\n".join(codes)
        assert "cake.sparse_mla_prefill" in code
        # No copy of output/out_lse: the op mutates the graph inputs directly.
        assert "copy_" not in code, code
    explanation = torch._dynamo.explain(fn)(*compile_inputs(device, 5, 3))
    assert explanation.graph_break_count == 0
