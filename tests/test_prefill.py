"""cake::sparse_mla_prefill against the float64 reference (docs/contract.md sections 6, 7, 11), on
every available device, with hypothesis drawing the shapes and edge cases."""
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torch_ops
from helpers import DEVICES, HAS_CUDA, PREFILL_HEADS, VIEWS, CacheSpec, assert_matches_reference, make_problem

PAGE_SIZES = [1, 2, 48, 64, 256]


@st.composite
def cache_specs(draw, max_slots=4096):
    page_size = draw(st.sampled_from(PAGE_SIZES))
    pages = draw(st.integers(1, max(1, max_slots // page_size)))
    view = draw(st.sampled_from(VIEWS))
    pad = draw(st.sampled_from([0, 0, 16, 48, 1024]))
    return CacheSpec(pages=pages, page_size=page_size, view=view, pad_bytes=pad)


@st.composite
def problems(draw, device, max_tokens=24, max_heads=128):
    num_heads = draw(st.sampled_from([h for h in PREFILL_HEADS if h <= max_heads]))
    num_tokens = draw(st.sampled_from([0, 1, 3, 7, max_tokens]))
    has_extra = draw(st.booleans())
    if has_extra:
        topk = draw(st.integers(1, 640))
        extra_topk = draw(st.integers(1, 1024 - 64 * (-(-topk // 64))))
    else:
        topk = draw(st.integers(1, 1024))
        extra_topk = 0
    sink = draw(st.sampled_from([None, 1.0, 20.0, 1e4]))
    return dict(
        num_tokens=num_tokens,
        num_heads=num_heads,
        topk=topk,
        main=draw(cache_specs()),
        device=device,
        seed=draw(st.integers(0, 2**31 - 1)),
        extra=draw(cache_specs()) if has_extra else None,
        extra_topk=extra_topk,
        lengths=draw(st.sampled_from([None, "random"])),
        extra_lengths=draw(st.sampled_from([None, "random"])),
        sink=sink,
        lse_scale=draw(st.sampled_from([1.0, 0.5, -2.0])),
        invalid_fraction=draw(st.sampled_from([0.0, 0.1, 0.6, 1.0])),
        sm_scale=draw(st.sampled_from([None, 0.3, 0.01])),
        indices_3d=draw(st.booleans()),
    )


def check(problem, head_tiles=None):
    output, out_lse, plan = problem.run(head_tiles)
    ref_out, ref_lse = problem.reference()
    assert_matches_reference(output, out_lse, ref_out, ref_lse)
    num_heads = problem.q.shape[1]
    assert plan["head_tiles"] in torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill_head_tiles(num_heads)
    assert plan["num_ctas"] == problem.q.shape[0] * num_heads // (16 * plan["head_tiles"])
    return output, out_lse


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_prefill_matches_reference(device, data):
    spec = data.draw(problems(device))
    problem = make_problem(**spec)
    choices = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill_head_tiles(spec["num_heads"])
    head_tiles = data.draw(st.sampled_from((None,) + choices))
    check(problem, head_tiles)


@pytest.mark.parametrize("device", DEVICES)
def test_prefill_few_hundred_tokens(device):
    problem = make_problem(num_tokens=300, num_heads=64, topk=700, main=CacheSpec(64, 64, "NHD", 32), device=device,
                           seed=5, extra=CacheSpec(40, 2, "3d", 16), extra_topk=300, lengths="random", sink=1.0)
    check(problem)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_heads", PREFILL_HEADS)
def test_every_head_count_and_tile(device, num_heads):
    for head_tiles in torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill_head_tiles(num_heads):
        problem = make_problem(num_tokens=5, num_heads=num_heads, topk=130, main=CacheSpec(9, 48), device=device,
                               seed=num_heads + head_tiles, sink=1.0, lengths="random")
        check(problem, head_tiles)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_rows(device):
    """Every candidate masked: zeros and -inf, or the sink's lse; never NaN."""
    for sink in (None, 1.0):
        problem = make_problem(num_tokens=4, num_heads=32, topk=70, main=CacheSpec(3, 64), device=device, seed=2,
                               sink=sink, invalid_fraction=1.0, extra=CacheSpec(2, 1), extra_topk=5, lse_scale=0.5)
        output, out_lse = check(problem)
        assert output.eq(0).all()
        if sink is None:
            assert torch.isneginf(out_lse).all()
        else:
            expected = problem.kwargs["attn_sink"][:32].cpu() * (1 / math.log(2)) * 0.5
            torch.testing.assert_close(out_lse.cpu(), expected.expand(4, 32), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_infinite_sinks(device):
    """A +inf sink takes all the weight (zeros, lse +inf); a -inf sink is no sink, also for an
    empty row (-inf, not NaN)."""
    problem = make_problem(num_tokens=4, num_heads=16, topk=40, main=CacheSpec(2, 64), device=device, seed=21,
                           sink=1.0, lengths="random")
    problem.kwargs["topk_length"] = torch.tensor([0, 40, 5, 0], dtype=torch.int32, device=device)
    sink = torch.randn(16)
    sink[:4] = float("inf")
    sink[4:8] = float("-inf")
    problem.kwargs["attn_sink"] = sink.to(device)
    output, out_lse = check(problem)
    assert output[:, :4].eq(0).all() and torch.isposinf(out_lse[:, :4]).all()
    assert torch.isneginf(out_lse[0, 4:8]).all() and torch.isneginf(out_lse[3, 4:8]).all()


@pytest.mark.parametrize("device", DEVICES)
def test_zero_lengths_mask_everything(device):
    problem = make_problem(num_tokens=3, num_heads=16, topk=64, main=CacheSpec(2, 64), device=device, seed=4)
    problem.kwargs["topk_length"] = torch.zeros(3, dtype=torch.int32, device=device)
    output, out_lse = check(problem)
    assert output.eq(0).all() and torch.isneginf(out_lse).all()


@pytest.mark.parametrize("device", DEVICES)
def test_duplicates_are_separate_terms(device):
    """A slot listed twice counts twice: same result as two distinct slots holding the same row."""
    problem = make_problem(num_tokens=2, num_heads=16, topk=4, main=CacheSpec(1, 8), device=device, seed=8,
                           invalid_fraction=0.0)
    problem.indices = torch.tensor([[1, 1, 1, 2], [3, 4, 4, 4]], dtype=torch.int32, device=device)
    check(problem)


@pytest.mark.parametrize("device", DEVICES)
def test_bitwise_repeatable_and_view_independent(device):
    results = []
    for view, pad in [("HND", 0), ("NHD", 0), ("3d", 0), ("HND", 16), ("NHD", 4096), ("3d", 48)]:
        problem = make_problem(num_tokens=17, num_heads=64, topk=200, main=CacheSpec(12, 64, view, pad),
                               device=device, seed=99, extra=CacheSpec(50, 2, view, pad), extra_topk=100,
                               lengths="random", sink=1.0)
        for _ in range(2):
            output, out_lse, _ = problem.run()
            results.append((output.cpu(), out_lse.cpu()))
    for output, out_lse in results[1:]:
        assert torch.equal(output.view(torch.int16), results[0][0].view(torch.int16))
        assert torch.equal(out_lse, results[0][1])


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_cuda_matches_cpu_op(data):
    spec = data.draw(problems("cuda"))
    problem = make_problem(**spec)
    head_tiles = data.draw(st.sampled_from(torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill_head_tiles(spec["num_heads"])))
    out_cuda, lse_cuda, _ = problem.run(head_tiles)
    cpu = make_problem(**dict(spec, device="cpu"))
    out_cpu, lse_cpu, _ = cpu.run(head_tiles)
    # The CPU op as the reference, under the same contract.
    assert_matches_reference(out_cuda, lse_cuda, out_cpu.double(), lse_cpu.double())


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("num_heads,topk,extra_topk", [(128, 1024, 0), (16, 512, 512), (64, 128, 0)])
def test_cuda_several_thousand_tokens(num_heads, topk, extra_topk):
    problem = make_problem(num_tokens=3000, num_heads=num_heads, topk=topk, main=CacheSpec(256, 64, "HND", 0),
                           device="cuda", seed=num_heads, extra=CacheSpec(2000, 2) if extra_topk else None,
                           extra_topk=extra_topk, lengths="random", sink=1.0)
    output, out_lse, _ = problem.run()
    # The float64 reference is slow for 3000 tokens: check a random sample of tokens fully.
    sample = torch.randperm(3000, generator=torch.Generator().manual_seed(0))[:48].sort().values
    sub = make_problem(num_tokens=1, num_heads=num_heads, topk=1, main=CacheSpec(1, 1), device="cuda", seed=0)
    sub.q, sub.kv_cache, sub.indices = problem.q[sample], problem.kv_cache, problem.indices[sample]
    sub.kwargs = dict(problem.kwargs)
    for key in ("topk_length", "extra_topk_length"):
        if key in sub.kwargs:
            sub.kwargs[key] = sub.kwargs[key][sample.to(sub.kwargs[key].device)]
    if "extra_indices" in sub.kwargs:
        sub.kwargs["extra_indices"] = sub.kwargs["extra_indices"][sample.to("cuda")]
    ref_out, ref_lse = sub.reference()
    assert_matches_reference(output[sample], out_lse[sample], ref_out, ref_lse)
    assert not torch.isnan(output).any() and not torch.isnan(out_lse).any()
