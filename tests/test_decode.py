"""cake::sparse_mla_decode against the float64 reference (docs/contract.md section 12, with the
rules of sections 6, 7, 8 and 11 it shares with the prefill): the output, and each split's partial
in the scratch, for planned and forced splits, more than 1024 candidates, 8 heads, both caches and
every mask, with hypothesis drawing the shapes; on the CPU and, where there is one, on a CUDA
device (tests/test_decode_cuda.py has the CUDA-only checks)."""
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torch_ops
from helpers import (DEVICES, VIEWS, CacheSpec, assert_matches_reference, assert_matches_reference_with_nan,
                     make_problem)
from torch_ops.reference import sparse_mla_decode_partials_reference

DECODE_HEADS = [8, 16, 24, 40, 64, 72, 128]
num_chunks = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_num_chunks


def partials_reference(problem, num_splits):
    kwargs = {k: v for k, v in problem.kwargs.items() if k not in ("attn_sink", "lse_scale")}
    return sparse_mla_decode_partials_reference(problem.q, problem.kv_cache, problem.indices, problem.sm_scale,
                                                num_splits=num_splits, **kwargs)


# Bounds on a split's partial (row error, LSE error relative to max(1, |ref|)). The CPU weighs the
# values with fp32 weights; the CUDA kernel multiplies bf16-rounded weights (as for the output, so
# the output's bound of section 11 applies) and sums the exact ones for the LSE.
PARTIAL_BOUNDS = {"cpu": (1e-4, 1e-4), "cuda": (1e-2, 1e-3)}


def assert_partials_match(mid_out, mid_lse, ref_out, ref_lse, bounds=PARTIAL_BOUNDS["cpu"]):
    """Each split's partial (fp32, never rounded to bf16): NaN and -inf exactly where the
    reference has them, zeros for an empty split, else row and LSE errors within `bounds`."""
    out_bound, lse_bound = bounds
    mid_out, mid_lse = mid_out.detach().cpu().double(), mid_lse.detach().cpu().double()
    assert torch.equal(torch.isnan(mid_lse), torch.isnan(ref_lse)), "NaN partial LSE pattern differs"
    assert torch.equal(torch.isnan(mid_out).all(-1), torch.isnan(ref_out).any(-1)), "NaN partial rows differ"
    assert torch.equal(torch.isnan(mid_out).any(-1), torch.isnan(ref_out).any(-1)), "a partial row is partly NaN"
    assert torch.equal(torch.isneginf(mid_lse), torch.isneginf(ref_lse)), "-inf partial LSE pattern differs"
    empty = torch.isneginf(ref_lse)
    assert mid_out[empty].eq(0).all(), "an empty split's partial output is not zero"
    finite = torch.isfinite(ref_lse)
    if finite.any():
        lse_err = ((mid_lse - ref_lse).abs() / ref_lse.abs().clamp(min=1.0))[finite].max().item()
        assert lse_err <= lse_bound, f"partial LSE error {lse_err:.3e}"
        ref_norm = ref_out.norm(dim=-1)[finite]
        err = (mid_out - ref_out).norm(dim=-1)[finite] / ref_norm.clamp(min=1e-30)
        assert err.max().item() <= out_bound, f"partial output error {err.max().item():.3e}"


def check_decode(problem, num_splits=None, max_splits=16, head_tiles=None, spare_splits=1):
    """Runs the decode (on the problem's device) with NaN-filled outputs and scratch of
    spare_splits more splits than its plan needs; checks the output against the reference, the
    used splits against the partials reference (so every entry was written), and that nothing
    beyond them was written."""
    device = problem.q.device
    plan_args = dict(num_tokens=problem.q.shape[0], num_heads=problem.q.shape[1], topk=problem.indices.shape[-1],
                     extra_topk=problem.kwargs["extra_indices"].shape[-1] if "extra_indices" in problem.kwargs else 0,
                     device=device, max_splits=max_splits, head_tiles=head_tiles, num_splits=num_splits)
    expected_plan = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode(**plan_args)
    splits = expected_plan["num_splits"]
    scratch = splits + spare_splits if splits > 1 else 0
    output, out_lse, plan, mid_out, mid_lse = problem.run_decode(num_splits, max_splits, head_tiles, scratch)
    assert plan == expected_plan
    if num_splits is not None:
        assert plan["num_splits"] == num_splits
    assert plan["chunks_per_block"] == -(-num_chunks(plan_args["topk"], plan_args["extra_topk"]) // splits) <= 32
    assert plan["head_tiles"] in torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_decode_head_tiles(problem.q.shape[1])
    ref_out, ref_lse = problem.reference()
    assert_matches_reference_with_nan(output, out_lse, ref_out, ref_lse)
    if splits > 1:
        assert_partials_match(mid_out[:splits], mid_lse[:splits], *partials_reference(problem, splits),
                              bounds=PARTIAL_BOUNDS[device.type])
        assert torch.isnan(mid_out[splits:]).all() and torch.isnan(mid_lse[splits:]).all(), "a spare split was written"
    return output, out_lse, plan, mid_out, mid_lse


@st.composite
def decode_problems(draw, device="cpu"):
    num_heads = draw(st.sampled_from(DECODE_HEADS))
    has_extra = draw(st.booleans())
    topk = draw(st.integers(1, 1600))
    extra_topk = draw(st.integers(1, 700)) if has_extra else 0
    page_size = draw(st.sampled_from([1, 16, 64]))
    extra_page_size = draw(st.sampled_from([1, 2, 64]))
    return dict(
        num_tokens=draw(st.sampled_from([0, 1, 2, 5])),
        num_heads=num_heads,
        topk=topk,
        main=CacheSpec(pages=draw(st.integers(1, 2048 // page_size)), page_size=page_size,
                       view=draw(st.sampled_from(VIEWS)), pad_bytes=draw(st.sampled_from([0, 16, 1024]))),
        device=device,
        seed=draw(st.integers(0, 2**31 - 1)),
        extra=CacheSpec(pages=draw(st.integers(1, 512 // extra_page_size)), page_size=extra_page_size,
                        view=draw(st.sampled_from(VIEWS))) if has_extra else None,
        extra_topk=extra_topk,
        lengths=draw(st.sampled_from([None, "random"])),
        extra_lengths=draw(st.sampled_from([None, "random"])),
        sink=draw(st.sampled_from([None, 1.0, 20.0])),
        lse_scale=draw(st.sampled_from([1.0, 0.5, -2.0])),
        invalid_fraction=draw(st.sampled_from([0.0, 0.1, 0.6, 1.0])),
        sm_scale=draw(st.sampled_from([None, 0.3, 0.01])),
        indices_3d=draw(st.booleans()),
    )


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_decode_matches_reference(device, data):
    spec = data.draw(decode_problems(device))
    problem = make_problem(**spec)
    chunks = num_chunks(spec["topk"], spec["extra_topk"])
    max_splits = data.draw(st.sampled_from([16, 64]))
    fewest, most = -(-chunks // 32), min(chunks, max_splits)
    num_splits = data.draw(st.one_of(st.none(), st.integers(fewest, most)))
    runnable = tuple(t for t in torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_decode_head_tiles(spec["num_heads"])
                     if t <= torch_ops._C.device_max_head_tiles(device))  # all but on ~100 KB-per-block GPUs
    head_tiles = data.draw(st.sampled_from((None,) + runnable))
    check_decode(problem, num_splits, max_splits, head_tiles)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_splits", [None, 2, 3, 7, 34])
def test_eight_heads_more_than_1024_candidates_both_caches(device, num_splits):
    """2100 candidates in 34 chunks (1500 -> 24, 600 -> 10) over two caches with every mask:
    lengths past the end, negative and zero, -1 and other negative slots, slots past the cache,
    duplicates."""
    problem = make_problem(num_tokens=4, num_heads=8, topk=1500, main=CacheSpec(40, 64, "NHD", 32), device=device,
                           seed=12, extra=CacheSpec(300, 2, "3d", 16), extra_topk=600, lengths="random",
                           extra_lengths="random", sink=1.0, lse_scale=0.5, invalid_fraction=0.2)
    problem.kwargs["topk_length"][:4] = torch.tensor([1500, 1100, -3, 2000], dtype=torch.int32, device=device)
    problem.kwargs["extra_topk_length"][:4] = torch.tensor([0, 600, 599, 64], dtype=torch.int32, device=device)
    problem.indices[1, 5:9] = problem.indices[1, 0]  # duplicates count twice
    _, _, plan, _, _ = check_decode(problem, num_splits, max_splits=34)
    assert plan["num_splits"] >= 2  # 34 chunks need two splits of at most 32


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_heads", [16, 64, 128])
def test_one_split_of_32_chunks(device, num_heads):
    """A split holds up to 32 chunks: 2048 candidates (24 + 8 chunks over both caches) in one split,
    no scratch, with every mask; and the same lists in two splits of 16, for the partials."""
    problem = make_problem(num_tokens=3, num_heads=num_heads, topk=1536, main=CacheSpec(40, 64, "NHD", 32),
                           device=device, seed=31 + num_heads, extra=CacheSpec(300, 2, "3d", 16), extra_topk=512,
                           lengths="random", extra_lengths="random", sink=1.0, lse_scale=0.5, invalid_fraction=0.2)
    problem.kwargs["topk_length"][0] = 1536
    problem.kwargs["extra_topk_length"][0] = 512
    _, _, plan, _, _ = check_decode(problem, num_splits=1, spare_splits=0)
    assert plan["num_splits"] == 1 and plan["chunks_per_block"] == 32
    _, _, plan, _, _ = check_decode(problem, num_splits=2)
    assert plan["chunks_per_block"] == 16


@pytest.mark.parametrize("device", DEVICES)
def test_default_max_splits_reach_16384_candidates(device):
    problem = make_problem(num_tokens=1, num_heads=8, topk=16384, main=CacheSpec(64, 64), device=device, seed=13,
                           lengths="random", sink=1.0)
    problem.kwargs["topk_length"][0] = 16000
    _, _, plan, _, _ = check_decode(problem, spare_splits=0)
    # 256 chunks: 8 splits of 32 at least, 16 (max_splits) of 16 at most, by the device's SM count.
    assert plan["head_tiles"] == 1 and 8 <= plan["num_splits"] <= 16
    assert plan["chunks_per_block"] == -(-256 // plan["num_splits"])


@pytest.mark.parametrize("num_heads", [16, 64])
def test_one_split_is_the_prefill(num_heads):
    """With one split the decode finishes its rows in place as the CPU prefill does: same bits."""
    problem = make_problem(num_tokens=6, num_heads=num_heads, topk=700, main=CacheSpec(20, 64, "HND", 16), device="cpu",
                           seed=14, extra=CacheSpec(40, 2), extra_topk=300, lengths="random", sink=1.0, lse_scale=0.5)
    output, out_lse, plan, _, _ = problem.run_decode(num_splits=1, scratch_splits=0)
    assert plan["num_splits"] == 1
    prefill_out, prefill_lse, _ = problem.run()
    assert torch.equal(output.view(torch.int16), prefill_out.view(torch.int16)) and torch.equal(out_lse, prefill_lse)


@pytest.mark.parametrize("device", DEVICES)
def test_bitwise_repeatable_for_a_fixed_plan(device):
    """The same plan gives the same bits on every run, whatever the thread count (CPU), cache view
    and page padding."""
    results = []
    threads = torch.get_num_threads()
    try:
        for view, pad, num_threads in [("HND", 0, 1), ("NHD", 48, 2), ("3d", 1024, 3), ("HND", 0, 2)]:
            torch.set_num_threads(num_threads)
            problem = make_problem(num_tokens=3, num_heads=24, topk=900, main=CacheSpec(30, 64, view, pad),
                                   device=device, seed=15, extra=CacheSpec(100, 2, view, pad), extra_topk=200,
                                   lengths="random", sink=1.0)
            output, out_lse, _, mid_out, mid_lse = problem.run_decode(num_splits=5, head_tiles=2)
            results.append((output, out_lse, mid_out[:5], mid_lse[:5]))
    finally:
        torch.set_num_threads(threads)
    for result in results[1:]:
        assert torch.equal(result[0].view(torch.int16), results[0][0].view(torch.int16))
        for got, first in zip(result[1:], results[0][1:]):
            assert torch.equal(got, first)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_rows_and_empty_splits(device):
    """Splits past a token's length, or holding only masked slots, are empty (zeros, -inf); a
    token with no valid candidate at all gets zeros and -inf, or the sink's LSE."""
    for sink in (None, 1.0):
        problem = make_problem(num_tokens=4, num_heads=16, topk=640, main=CacheSpec(12, 64), device=device, seed=16,
                               sink=sink, lse_scale=0.5, invalid_fraction=0.0)
        problem.kwargs["topk_length"] = torch.tensor([0, 5, 640, 130], dtype=torch.int32, device=device)
        problem.indices[2, 64:128] = -1  # split 1 of token 2 holds only masked slots
        output, out_lse, _, _, mid_lse = check_decode(problem, num_splits=10)
        assert output[0].eq(0).all()
        assert torch.isneginf(mid_lse[1:10, 1]).all() and torch.isneginf(mid_lse[3:10, 3]).all()
        assert torch.isneginf(mid_lse[1, 2]).all() and torch.isfinite(mid_lse[[0, 2], 2]).all()
        if sink is None:
            assert torch.isneginf(out_lse[0]).all()
        else:
            expected = problem.kwargs["attn_sink"][:16] * (1 / math.log(2)) * 0.5
            torch.testing.assert_close(out_lse[0], expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_scratch_needs_no_initialisation(device):
    """Whatever the scratch holds before the call (NaN, inf, garbage), the used splits are
    written before they are read."""
    problem = make_problem(num_tokens=2, num_heads=8, topk=300, main=CacheSpec(8, 64), device=device, seed=17, sink=1.0)
    first = problem.run_decode(num_splits=5)
    mid_out = torch.full_like(first[3], float("inf"))
    mid_lse = torch.randn_like(first[4]) * 1e30
    output = torch.empty_like(first[0])
    out_lse = torch.empty_like(first[1])
    torch_ops.sparse_mla_decode(problem.q, problem.kv_cache, problem.indices, output, out_lse, problem.sm_scale,
                                mid_out=mid_out, mid_lse=mid_lse, num_splits=5, **problem.kwargs)
    assert torch.equal(output.view(torch.int16), first[0].view(torch.int16)) and torch.equal(out_lse, first[1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_splits", [1, 4])
def test_non_finite_rules_through_the_merge(device, num_splits):
    """docs/contract.md section 8 holds however the row is split: a NaN in q, in a selected cache
    row (one split of the token) or a NaN sink poisons exactly what the prefill's rule says; the
    splits of a NaN row that do not hold the NaN stay finite in the scratch."""
    problem = make_problem(num_tokens=5, num_heads=16, topk=256, main=CacheSpec(6, 64), device=device, seed=18,
                           extra=CacheSpec(20, 2), extra_topk=20, sink=1.0, lse_scale=0.5, invalid_fraction=0.0)
    problem.kwargs["topk_length"] = torch.tensor([0, 256, 256, 100, 256], dtype=torch.int32, device=device)
    problem.kwargs["extra_topk_length"] = torch.tensor([0, 20, 0, 20, 20], dtype=torch.int32, device=device)
    poisoned = 77
    problem.indices[problem.indices == poisoned] = poisoned + 1
    problem.indices[2, 200] = poisoned  # chunk 3 of token 2: its last split
    rows = torch_ops.nvfp4_dequantize_sparse_mla_cache(problem.kv_cache, torch.tensor([poisoned]))
    rows[0, 30] = float("nan")
    torch_ops.nvfp4_quantize_append_sparse_mla_cache(rows.to(torch.bfloat16), torch.tensor([poisoned], device=device),
                                                     problem.kv_cache)
    problem.q[3, 7, 100] = float("nan")
    problem.q[0, 2, 0] = float("nan")  # token 0 has no candidate: stays empty
    problem.kwargs["attn_sink"][11] = float("nan")
    problem.kwargs["attn_sink"][12] = float("inf")
    problem.kwargs["attn_sink"][13] = float("-inf")
    output, out_lse, _, _, mid_lse = check_decode(problem, num_splits=num_splits, spare_splits=0)
    assert torch.isnan(out_lse[2]).all() and torch.isnan(output[2].float()).all()
    assert torch.isnan(out_lse[3, 7]) and torch.isnan(output[3, 7].float()).all()
    assert output[0].eq(0).all() and torch.isnan(out_lse[0, 11]) and torch.isposinf(out_lse[0, 12])
    assert torch.isneginf(out_lse[0, 13])
    assert torch.isnan(out_lse[:, 11]).all() and output[4, 12].eq(0).all() and torch.isposinf(out_lse[4, 12])
    if num_splits > 1:
        assert torch.isnan(mid_lse[-1, 2]).all() and torch.isfinite(mid_lse[:-1, 2]).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sm_scale", [math.inf, -math.inf, math.nan], ids=["inf", "-inf", "nan"])
def test_non_finite_sm_scale(device, sm_scale):
    problem = make_problem(num_tokens=3, num_heads=8, topk=200, main=CacheSpec(4, 64), device=device, seed=19, sink=1.0,
                           sm_scale=sm_scale)
    problem.kwargs["topk_length"] = torch.tensor([0, 200, 70], dtype=torch.int32, device=device)
    output, out_lse, _, _, _ = check_decode(problem, num_splits=4, spare_splits=0)
    assert torch.isnan(out_lse[1:]).all() and output[0].eq(0).all() and torch.isfinite(out_lse[0]).all()
