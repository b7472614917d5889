"""Non-finite values (docs/contract.md section 8), against the float64 reference: a NaN in q, a
non-finite sm_scale or sink, NaN and inf through both cache writers, attention over a cache holding
a NaN group. A NaN row is NaN in its output and its lse; an empty row stays zeros and -inf (or the
sink's lse)."""
import math

import pytest
import torch

import torch_ops
from helpers import (HAS_CUDA, CacheSpec, Problem, assert_matches_reference_with_nan, cache_view, make_problem,
                     random_latent)
from torch_ops.reference import cache_rows_bytes, nvfp4_quantize_reference, sparse_mla_decode_partials_reference

# (device, head_tiles). With 64 heads on an H100/H200, head_tiles 4 runs the Hopper kernel and 1
# and 2 the portable kernel; elsewhere all three are portable instances.
_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
KERNELS = [pytest.param("cpu", None, id="cpu")] + [
    pytest.param("cuda", head_tiles, marks=_cuda, id=f"cuda-ht{head_tiles}") for head_tiles in (1, 2, 4)]
NUM_HEADS = 64


def small_problem(device, seed, sink=None, sm_scale=None):
    """Six tokens over two lists; token 0 has no candidate at all."""
    problem = make_problem(num_tokens=6, num_heads=NUM_HEADS, topk=100, main=CacheSpec(4, 64, "NHD", 16), device=device,
                           seed=seed, extra=CacheSpec(20, 2), extra_topk=30, sink=sink, lse_scale=0.5,
                           invalid_fraction=0.05, sm_scale=sm_scale)
    problem.kwargs["topk_length"] = torch.tensor([0, 100, 7, 50, 1, 100], dtype=torch.int32, device=device)
    problem.kwargs["extra_topk_length"] = torch.tensor([0, 30, 0, 5, 3, 30], dtype=torch.int32, device=device)
    return problem


def run_and_check(problem, head_tiles):
    output, out_lse, _ = problem.run(head_tiles)
    ref_out, ref_lse = problem.reference()
    assert_matches_reference_with_nan(output, out_lse, ref_out, ref_lse)
    return output.cpu().float(), out_lse.cpu(), ref_lse


def assert_empty_row(output, out_lse, problem, token):
    """Zeros and -inf, or the sink's own lse (base 2, times lse_scale)."""
    assert output[token].eq(0).all()
    sink = problem.kwargs.get("attn_sink")
    if sink is None:
        assert torch.isneginf(out_lse[token]).all()
    else:
        expected = sink[:NUM_HEADS].cpu() * (1 / math.log(2)) * problem.kwargs["lse_scale"]
        torch.testing.assert_close(out_lse[token], expected, rtol=1e-6, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("device,head_tiles", KERNELS)
@pytest.mark.parametrize("sink", [None, 1.0])
def test_nan_in_q_poisons_only_its_row(device, head_tiles, sink):
    problem = small_problem(device, seed=31, sink=sink)
    problem.q[1, 5, 17] = float("nan")    # a NoPE dim
    problem.q[3, 40, 500] = float("nan")  # a RoPE dim
    problem.q[4, 63, 0] = float("nan")    # token 4 has candidates in both lists
    problem.q[0, 9, 3] = float("nan")     # token 0 has no candidate: no score, stays empty
    output, out_lse, _ = run_and_check(problem, head_tiles)
    assert torch.isnan(out_lse).nonzero().tolist() == [[1, 5], [3, 40], [4, 63]]
    assert torch.isnan(output).any(-1).nonzero().tolist() == [[1, 5], [3, 40], [4, 63]]
    assert_empty_row(output, out_lse, problem, 0)


@pytest.mark.parametrize("device,head_tiles", KERNELS)
@pytest.mark.parametrize("sm_scale", [math.inf, -math.inf, math.nan], ids=["inf", "-inf", "nan"])
@pytest.mark.parametrize("sink", [None, 1.0])
def test_non_finite_sm_scale_poisons_every_row_with_a_candidate(device, head_tiles, sm_scale, sink):
    problem = small_problem(device, seed=32, sink=sink, sm_scale=sm_scale)
    output, out_lse, _ = run_and_check(problem, head_tiles)
    assert torch.isnan(out_lse[1:]).all() and torch.isnan(output[1:]).all()
    assert_empty_row(output, out_lse, problem, 0)


@pytest.mark.parametrize("device,num_heads", [pytest.param("cpu", 64, id="cpu")] + [
    pytest.param("cuda", heads, marks=_cuda, id=f"cuda-h{heads}") for heads in (64, 32)])
@pytest.mark.parametrize("sm_scale", [1e30, -1e30], ids=["1e30", "-1e30"])
def test_the_largest_sm_scale_forms_a_finite_factor_in_every_kernel(device, num_heads, sm_scale):
    """|sm_scale| = 1e30, the largest finite one accepted (docs/contract.md section 10): every kernel
    (on Hopper at 64 heads the 64-head kernel, whose factor carries 2^9 more, at 32 the small-heads
    one) forms a finite factor, so a zero q gives each row with a candidate the plain average of
    its values, as the float64 reference does, and the decode agrees."""
    problem = make_problem(num_tokens=5, num_heads=num_heads, topk=100, main=CacheSpec(4, 64), device=device, seed=36,
                           sm_scale=sm_scale)
    problem.q.zero_()
    output, out_lse, _ = problem.run()
    ref_out, ref_lse = problem.reference()
    assert_matches_reference_with_nan(output, out_lse, ref_out, ref_lse)
    assert not torch.isnan(out_lse).any() and not torch.isnan(output.float()).any()
    decoded, decoded_lse, mid_out, mid_lse = problem.decode_buffers()
    torch_ops.sparse_mla_decode(problem.q, problem.kv_cache, problem.indices, decoded, decoded_lse, sm_scale,
                                mid_out=mid_out, mid_lse=mid_lse, **problem.kwargs)
    assert_matches_reference_with_nan(decoded, decoded_lse, ref_out, ref_lse)


def test_a_logit_past_float32_is_infinite_on_the_cpu():
    """docs/contract.md section 8, "Range": a q row of 1e38s overflows its float32 dot products to
    +-inf; a +inf logit makes the row NaN (case 1) where the float64 reference stays finite, and
    the other rows are untouched."""
    problem = make_problem(num_tokens=3, num_heads=16, topk=64, main=CacheSpec(2, 64), device="cpu", seed=37,
                           invalid_fraction=0.0)
    problem.q[1, 2] = 1e38
    output, out_lse, _ = problem.run()
    ref_out, ref_lse = problem.reference()
    assert torch.isnan(out_lse[1, 2]) and torch.isnan(output[1, 2].float()).all()
    assert math.isfinite(ref_lse[1, 2])
    keep = torch.ones(3, 16, dtype=torch.bool)
    keep[1, 2] = False
    assert_matches_reference_with_nan(output[keep], out_lse[keep], ref_out[keep], ref_lse[keep])


@pytest.mark.parametrize("device,head_tiles", KERNELS)
def test_nan_sink(device, head_tiles):
    """A NaN sink makes its head's lse NaN everywhere, and its output NaN where there are candidates."""
    problem = small_problem(device, seed=33, sink=1.0)
    problem.kwargs["attn_sink"][[2, 50]] = float("nan")
    output, out_lse, _ = run_and_check(problem, head_tiles)
    assert torch.isnan(out_lse).nonzero()[:, 1].unique().tolist() == [2, 50]
    assert torch.isnan(out_lse[:, [2, 50]]).all()
    assert torch.isnan(output[1:, [2, 50]]).all() and output[0].eq(0).all()
    assert not torch.isnan(output[:, :2]).any()


def _latent_with_non_finite(generator):
    """Six rows: NaNs in NoPE groups 1 and 27, a NaN RoPE value, +-inf, an all-NaN group."""
    rows = random_latent(6, generator)
    rows[0, 20] = float("nan")     # group 1
    rows[2, 447] = float("nan")    # group 27, the last NoPE group
    rows[3, 470] = float("nan")    # RoPE: stored bit for bit
    rows[4, 0] = float("inf")      # group 0
    rows[4, 100] = float("-inf")   # group 6
    rows[5, 16:32] = float("nan")  # all of group 1
    nan_values = torch.zeros(6, 512, dtype=torch.bool)
    nan_values[0, 16:32] = nan_values[2, 432:448] = nan_values[3, 470] = nan_values[5, 16:32] = True
    return rows, nan_values


@pytest.mark.parametrize("device", [pytest.param("cpu"), pytest.param("cuda", marks=_cuda)])
@pytest.mark.parametrize("writer", ["pack", "append"])
def test_writers_nan_group_and_inf(device, writer):
    """A NaN makes its whole group (and nothing else) NaN: scale byte 0x7F, codes zero. An
    infinite value saturates to +-2688 with scale 448 (0x7E)."""
    g = torch.Generator().manual_seed(34)
    rows, nan_values = _latent_with_non_finite(g)
    if writer == "pack":
        cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(rows.view(2, 3, 512).to(device), kv_layout="NHD")
        slots = torch.arange(6)
    else:
        base = random_latent(4 * 8, g).view(4, 8, 512)
        cache = cache_view(torch_ops.nvfp4_quantize_pack_sparse_mla_cache(base.to(device)), "HND", 32, g)
        slots = torch.tensor([17, 3, 30, 8, 0, 21])
        torch_ops.nvfp4_quantize_append_sparse_mla_cache(rows.to(device), slots.to(device), cache)
    data, scale = cache_rows_bytes(cache, slots)
    ref_data, ref_scale = nvfp4_quantize_reference(rows)
    assert torch.equal(data, ref_data) and torch.equal(scale, ref_scale)
    assert scale[0, 1] == 0x7F and scale[2, 27] == 0x7F and scale[5, 1] == 0x7F
    assert data[0, 8:16].eq(0).all() and data[2, 216:224].eq(0).all()
    assert scale[4, 0] == 0x7E and scale[4, 6] == 0x7E

    back = torch_ops.nvfp4_dequantize_sparse_mla_cache(cache, slots).cpu()
    assert torch.equal(torch.isnan(back), nan_values)
    assert back[4, 0] == 6 * 448 and back[4, 100] == -6 * 448
    # Every other value reads back as it does when the NaNs are not there.
    clean = torch.where(nan_values, torch.zeros((), dtype=torch.bfloat16), rows)
    clean_back = torch_ops.nvfp4_dequantize_sparse_mla_cache(
        torch_ops.nvfp4_quantize_pack_sparse_mla_cache(clean.view(6, 1, 512)), torch.arange(6))
    assert torch.equal(back[~nan_values], clean_back[~nan_values])


@pytest.mark.parametrize("device,head_tiles", KERNELS)
def test_nan_in_cache_poisons_exactly_the_tokens_that_select_it(device, head_tiles):
    """A NaN group in a main-cache row and a NaN RoPE value in an extra-cache row: NaN output and
    lse (all heads) for the tokens whose valid candidates include them; a masked occurrence (past
    the token's length) changes nothing."""
    problem = make_problem(num_tokens=8, num_heads=NUM_HEADS, topk=80, main=CacheSpec(3, 64), device=device, seed=35,
                           extra=CacheSpec(10, 2), extra_topk=20, sink=1.0, invalid_fraction=0.05)
    g = torch.Generator().manual_seed(35)
    poisoned_main, poisoned_extra = 77, 13
    bad_rows = random_latent(2, g)
    bad_rows[0, 50] = float("nan")
    bad_rows[1, 500] = float("nan")
    torch_ops.nvfp4_quantize_append_sparse_mla_cache(bad_rows[:1].to(device), torch.tensor([poisoned_main], device=device),
                                                     problem.kv_cache)
    extra_cache = problem.kwargs["extra_kv_cache"]
    torch_ops.nvfp4_quantize_append_sparse_mla_cache(bad_rows[1:].to(device), torch.tensor([poisoned_extra], device=device),
                                                     extra_cache)
    indices = problem.indices.cpu()
    extra_indices = problem.kwargs["extra_indices"].cpu()
    indices[indices == poisoned_main] = poisoned_main + 1
    extra_indices[extra_indices == poisoned_extra] = poisoned_extra + 1
    indices[0, 5] = poisoned_main        # valid
    indices[1, 70] = poisoned_main       # past token 1's length
    indices[6, 79] = poisoned_main       # the very last slot, valid
    extra_indices[3, 0] = poisoned_extra  # valid
    extra_indices[4, 15] = poisoned_extra  # past token 4's extra length
    problem.indices = indices.to(device)
    problem.kwargs["extra_indices"] = extra_indices.to(device)
    problem.kwargs["topk_length"] = torch.tensor([80, 40, 80, 80, 80, 0, 80, 3], dtype=torch.int32, device=device)
    problem.kwargs["extra_topk_length"] = torch.tensor([20, 20, 20, 20, 10, 20, 20, 20], dtype=torch.int32,
                                                       device=device)
    output, out_lse, _ = run_and_check(problem, head_tiles)
    nan_tokens = torch.isnan(out_lse).any(dim=1).nonzero().flatten().tolist()
    assert nan_tokens == [0, 3, 6]
    assert torch.isnan(out_lse[nan_tokens]).all() and torch.isnan(output[nan_tokens]).all()


INF_SLOTS = (5, 70)  # their RoPE dim 500 is +inf; q's dim 500 is negative, so their logits are -inf


def _inf_value_problem(device, num_heads, seed, sink, num_tokens=4):
    """Tokens over a cache of two pages of 64, 130 positions each (three chunks, so the decode can
    split), every q's dim 500 negative: token 0 selects only the INF_SLOTS (every logit -inf:
    rule 2, NaN in dim 500, zeros elsewhere), token 1 finite rows and one of them (rule 3: NaN in
    dim 500 only), token 2 on finite rows only, token 3 nothing (the empty row); tokens past 3
    finite rows only. sm_scale 0.05."""
    g = torch.Generator().manual_seed(seed)
    latent = random_latent(128, g)
    latent[list(INF_SLOTS), 500] = float("inf")
    cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent.view(2, 64, 512).to(device))
    q = (torch.rand(num_tokens, num_heads, 512, generator=g) + 0.1).to(torch.bfloat16)
    q[:, :, 500] = -1.0
    finite_slots = torch.tensor([s for s in range(128) if s not in INF_SLOTS])
    indices = finite_slots[torch.randint(0, finite_slots.numel(), (num_tokens, 130), generator=g)].to(torch.int32)
    indices[0] = torch.tensor(INF_SLOTS, dtype=torch.int32).repeat(65)
    indices[1, 97] = INF_SLOTS[1]  # in the second chunk
    indices[3] = -1
    kwargs = {}
    if sink is not None:
        kwargs["attn_sink"] = torch.linspace(-1, 1, num_heads + 1).to(torch.float32).to(device)
    return Problem(q.to(device), cache, indices.to(device), 0.05, kwargs)


def _check_inf_value_rows(output, out_lse, problem):
    ref_out, ref_lse = problem.reference()
    assert_matches_reference_with_nan(output, out_lse, ref_out, ref_lse)
    output = output.cpu().float()
    nan = torch.isnan(output)
    assert nan[:2, :, 500].all() and not nan[:2, :, :500].any() and not nan[:2, :, 501:].any()
    assert not nan[2:].any()
    assert output[0].nan_to_num(0.0).eq(0).all() and output[3].eq(0).all()
    assert torch.isfinite(out_lse[1:3].cpu()).all()
    if "attn_sink" not in problem.kwargs:
        assert torch.isneginf(out_lse[0].cpu()).all() and torch.isneginf(out_lse[3].cpu()).all()


# (device, heads, head_tiles): the CPU; on CUDA the 64-head Hopper kernel (head_tiles 4 on an
# H100/H200), the portable kernel (head_tiles 1) and the small-heads kernel (16 heads on Hopper).
INF_VALUE_PREFILLS = [pytest.param("cpu", 64, None, id="cpu")] + [
    pytest.param("cuda", heads, head_tiles, marks=_cuda, id=f"cuda-h{heads}-ht{head_tiles}")
    for heads, head_tiles in ((64, 4), (64, 1), (16, None))]


@pytest.mark.parametrize("device,num_heads,head_tiles", INF_VALUE_PREFILLS)
@pytest.mark.parametrize("sink", [None, 1.0])
def test_zero_weight_times_infinite_value_is_nan_in_that_dim(device, num_heads, head_tiles, sink):
    """Rules 2 and 3 of section 8: a candidate whose logit is -inf weighs 0, and 0 times its
    infinite RoPE value is NaN in that dim only, whether other candidates carry weight (token 1)
    or none does (token 0, whose lse is still -inf or the sink's)."""
    problem = _inf_value_problem(device, num_heads, 36, sink)
    output, out_lse, _ = problem.run(head_tiles)
    _check_inf_value_rows(output, out_lse, problem)


@pytest.mark.parametrize("device", [pytest.param("cpu"), pytest.param("cuda", marks=_cuda)])
@pytest.mark.parametrize("num_heads", [64, 16])
@pytest.mark.parametrize("num_splits", [1, 3])
def test_zero_weight_times_infinite_value_in_the_decode(device, num_heads, num_splits):
    """The same rows through the decode: a split whose logits are all -inf gives its partial NaN
    in dim 500 (and -inf), and the merge keeps it (zero weight times NaN), as one pass does."""
    problem = _inf_value_problem(device, num_heads, 37, sink=1.0)
    output, out_lse, _, mid_out, mid_lse = problem.run_decode(num_splits=num_splits, scratch_splits=3)
    _check_inf_value_rows(output, out_lse, problem)
    if num_splits > 1:
        ref_mid_out, ref_mid_lse = sparse_mla_decode_partials_reference(problem.q, problem.kv_cache, problem.indices,
                                                                        problem.sm_scale, num_splits=num_splits)
        got_out, got_lse = mid_out[:num_splits].cpu().double(), mid_lse[:num_splits].cpu().double()
        assert torch.equal(torch.isnan(got_out), torch.isnan(ref_mid_out))
        assert torch.equal(torch.isneginf(got_lse), torch.isneginf(ref_mid_lse))
        assert torch.isnan(got_out[:, 0, :, 500]).all()  # token 0: every split all -inf, NaN kept in dim 500


@pytest.mark.parametrize("device,num_heads,head_tiles", INF_VALUE_PREFILLS)
@pytest.mark.parametrize("sink_value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_infinite_value_under_special_sinks(device, num_heads, head_tiles, sink_value):
    """The same rows with a NaN, +inf or -inf sink on some heads: as the float64 reference, element
    by element (a +inf sink keeps the NaN dims, a NaN sink poisons the rows with weight)."""
    problem = _inf_value_problem(device, num_heads, 38, sink=1.0)
    problem.kwargs["attn_sink"][[0, num_heads - 1]] = sink_value
    run_and_check(problem, head_tiles)


@pytest.mark.parametrize("device,num_heads,head_tiles", INF_VALUE_PREFILLS)
def test_masked_infinite_value_is_never_read(device, num_heads, head_tiles):
    """An infinite value at a masked position (past the token's length, or the slot only beside -1
    and out-of-range entries) is never read: no NaN, as the reference."""
    problem = _inf_value_problem(device, num_heads, 39, sink=None)
    indices = problem.indices.cpu()
    indices[0] = indices[2]            # finite rows only ...
    indices[0, 100] = INF_SLOTS[0]     # ... and an infinite one past the length below
    indices[1, :64] = -1               # token 1: its infinite slot among masked entries
    indices[1, 64:90] = 128 + torch.arange(26, dtype=torch.int32)  # out of range (128 slots)
    indices[1, 97] = INF_SLOTS[1]
    indices[1, 98:] = -5
    problem.indices = indices.to(device)
    # token 1's length stops before its infinite slot at 97
    problem.kwargs["topk_length"] = torch.tensor([100, 97, 130, 0], dtype=torch.int32, device=device)
    output, _, _ = run_and_check(problem, head_tiles)
    assert not torch.isnan(output).any()


@pytest.mark.parametrize("device,num_heads,head_tiles", INF_VALUE_PREFILLS)
def test_infinite_value_does_not_leak_into_a_later_units_masked_rows(device, num_heads, head_tiles):
    """More tokens than SMs, so a persistent CTA takes a later token after an earlier one: tokens
    0..149 select an infinite row at position 5 (NaN in dim 500), tokens 150.. hold -1 there, in
    the same lanes (the small-heads kernel keeps masked rows' stale registers, masked by zero
    scales): no NaN may reach them, as the reference says."""
    problem = _inf_value_problem(device, num_heads, 40, sink=None, num_tokens=300)
    indices = problem.indices.cpu()
    indices[:4] = indices[4:8]  # the first four tokens' special rows set aside
    indices[:150, 5] = INF_SLOTS[0]
    indices[150:, 5] = -1
    problem.indices = indices.to(device)
    output, _, _ = run_and_check(problem, head_tiles)
    assert torch.isnan(output[:150, :, 500]).all() and not torch.isnan(output[150:]).any()
