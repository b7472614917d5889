"""The small-heads Hopper (sm_90a) prefill kernel (docs/hopper_small_kernel.md): which calls it
serves (on Hopper, by default, every call the 64-head kernel does not), and the contract on it.

These tests run with no kernel override (the device's own choice). They cover 16 and 32 heads a
unit, the head counts that take several units a token or heads 0..63 on the 64-head kernel, and
48 and 112 heads (the 64-head kernel with its last head block padded, planned as small-heads
calls), masks, both caches, sinks, the non-finite rules, empty rows, repeatability, a persistent
grid that crosses units, and output views of 4- and 16-byte alignment (O stored from registers, 4
bytes a store); everything against the float64 reference. The override "hopper_small" is a
synonym of "hopper". Also the decode's split form of the kernel: which plans run it, its outputs
and partials."""
import dataclasses
import math

import pytest
import torch

import torch_ops
from helpers import (HAS_CUDA, HOPPER_SMEM, CacheSpec, assert_agrees_with_portable_and_repeatable,
                     assert_matches_reference, assert_matches_reference_with_nan, assert_repeatable, case_problem,
                     make_problem, persistent_walk_problem)


def _device_runs_small_heads() -> bool:
    if not HAS_CUDA:
        return False
    props = torch.cuda.get_device_properties(0)
    with torch_ops.prefill_kernel_override():
        return torch_ops._C.device_runs_hopper_small_prefill(props.major, props.shared_memory_per_block_optin)


needs_small_heads = pytest.mark.skipif(not _device_runs_small_heads(),
                                       reason="needs an sm_90 GPU and an sm_90a build")


@pytest.fixture(autouse=True)
def default_choice():
    """No override: the device's own choice, whatever CAKE_PREFILL_KERNEL said at import."""
    with torch_ops.prefill_kernel_override():
        yield


SMALL_CALLS = [(16, 1), (32, 1), (32, 2), (48, 1), (80, 1), (96, 1), (96, 2), (112, 1), (64, 1), (64, 2), (128, 1),
               (128, 2)]


def test_kernel_choice():
    """By default compute capability 9.x runs every call the 64-head kernel does not serve on the
    small-heads kernel, given its shared memory; the overrides "hopper" and "hopper_small" choose
    the same way; "portable" (or a variant) and other GPUs run the portable kernel."""
    choose = torch_ops._C.prefill_kernel_for
    runs_small = torch_ops._C.device_runs_hopper_small_prefill
    built = choose(9, HOPPER_SMEM, 16, 1)
    assert built in ("hopper_small", "portable")  # "portable" only in a build without sm_90a
    assert runs_small(9, HOPPER_SMEM) == (built == "hopper_small")
    for knobs in ({}, dict(kernel="hopper"), dict(kernel="hopper_small")):
        with torch_ops.prefill_kernel_override(**knobs):
            for heads, head_tiles in SMALL_CALLS:
                assert choose(9, HOPPER_SMEM, heads, head_tiles) == built, (knobs, heads, head_tiles)
            for heads in (64, 128):
                assert choose(9, HOPPER_SMEM, heads, 4) == ("hopper" if built == "hopper_small" else "portable")
    for knobs in (dict(kernel="portable"), dict(variant=(2, 1))):
        with torch_ops.prefill_kernel_override(**knobs):
            assert not runs_small(9, HOPPER_SMEM)
            for heads, head_tiles in SMALL_CALLS + [(64, 4)]:
                assert choose(9, HOPPER_SMEM, heads, head_tiles) == "portable", (knobs, heads, head_tiles)
    for cc_major, smem in [(8, 166912), (12, 101376), (10, HOPPER_SMEM), (9, 101376)]:
        assert choose(cc_major, smem, 16, 1) == "portable" and not runs_small(cc_major, smem), (cc_major, smem)
    # The small-heads kernel runs where both Hopper kernels fit (it falls back on the 64-head one
    # for some heads); one byte short of either keeps its calls on the portable kernel, and one
    # byte short of the 64-head kernel's keeps the 64-head calls there too.
    hopper_smem, small_smem = torch_ops._C.HOPPER_PREFILL_SMEM_BYTES, torch_ops._C.HOPPER_SMALL_PREFILL_SMEM_BYTES
    both = max(hopper_smem, small_smem)
    assert both <= HOPPER_SMEM
    assert runs_small(9, both) == (built == "hopper_small") and not runs_small(9, both - 1)
    assert choose(9, both - 1, 16, 1) == "portable" and choose(9, both, 16, 1) == built
    assert choose(9, hopper_smem, 64, 4) == choose(9, HOPPER_SMEM, 64, 4)
    assert choose(9, hopper_smem - 1, 64, 4) == "portable"


def test_decode_split_kernels():
    """The decode's splits run the 64-head Hopper kernel where it serves the call and, for the
    other calls, this kernel (any head count of the decode: 8 and 24 in padded units of 16), one
    split included. Both Hopper kernels need two chunks in the largest split of a plan that splits
    unless an override asks for the Hopper kernels; the override "portable" and other GPUs keep
    everything portable."""
    def decode(cc_major, smem, heads, head_tiles, num_splits=2, chunks=16):
        return torch_ops._C.decode_split_kernel_for(cc_major, smem, heads, head_tiles, num_splits, chunks)
    hopper_built = torch_ops._C.prefill_kernel_for(9, HOPPER_SMEM, 64, 4)
    small_built = "hopper_small" if hopper_built == "hopper" else "portable"
    fewest = torch_ops._C.HOPPER_DECODE_MIN_CHUNKS_PER_SPLIT
    decode_calls = SMALL_CALLS + [(8, 1), (24, 1), (40, 1), (8, 2)]
    for knobs in ({}, dict(kernel="hopper"), dict(kernel="hopper_small")):
        with torch_ops.prefill_kernel_override(**knobs):
            for heads, head_tiles in decode_calls:
                assert decode(9, HOPPER_SMEM, heads, head_tiles) == small_built, (knobs, heads, head_tiles)
                assert decode(9, HOPPER_SMEM, heads, head_tiles, 16, fewest) == small_built
                assert decode(9, HOPPER_SMEM, heads, head_tiles, 1, 16) == small_built  # one split
                assert decode(9, HOPPER_SMEM, heads, head_tiles, 1, 1) == small_built
                # One-chunk splits only under an override that asks for the Hopper kernels.
                assert decode(9, HOPPER_SMEM, heads, head_tiles, 16, 1) == (small_built if knobs else "portable")
            assert decode(9, HOPPER_SMEM, 64, 4) == hopper_built and decode(9, HOPPER_SMEM, 128, 4) == hopper_built
            assert decode(9, HOPPER_SMEM, 64, 4, 1, 16) == hopper_built
    with torch_ops.prefill_kernel_override(kernel="portable"):
        assert decode(9, HOPPER_SMEM, 64, 4) == "portable" and decode(9, HOPPER_SMEM, 16, 1) == "portable"
    assert decode(8, 166912, 64, 4) == "portable" and decode(8, 166912, 16, 1) == "portable"


# (heads, topk, main cache, extra cache, extra topk, lengths, sink): single-candidate, partial and
# 16-chunk lists, page sizes 1, 2, 48 and 256, padded page strides, all three views; 80, 96 and 112
# heads take several units a token.
SMALL_CASES = [
    (16, 1, CacheSpec(4, 64), None, 0, None, None),
    (16, 1024, CacheSpec(20, 64), None, 0, "random", 1.0),
    (32, 63, CacheSpec(5, 64, "NHD", 16), None, 0, "random", 1.0),
    (32, 200, CacheSpec(100, 2, "HND", 48), CacheSpec(3, 64, "NHD"), 129, "random", None),
    (48, 65, CacheSpec(3, 256, "3d"), CacheSpec(40, 1), 7, "random", 1.0),
    (48, 512, CacheSpec(9, 48, "HND", 4096), CacheSpec(9, 64), 448, None, 1.0),
    (80, 130, CacheSpec(6, 64), CacheSpec(5, 2), 20, "random", 1.0),
    (96, 300, CacheSpec(12, 64, "NHD"), None, 0, "random", None),
    (112, 70, CacheSpec(4, 64), CacheSpec(3, 256), 64, "random", 1.0),
]


@needs_small_heads
@pytest.mark.parametrize("case", range(len(SMALL_CASES)))
def test_small_heads_matches_reference(case):
    heads = SMALL_CASES[case][0]
    problem = case_problem(SMALL_CASES[case], seed=900 + case)
    output, out_lse, plan = problem.run()
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert plan["kernel"] == "hopper_small"
    assert plan["grid_size"] == min(37 * small_call_units_per_token(heads), num_sms)
    assert_matches_reference(output, out_lse, *problem.reference())


def small_call_units_per_token(heads):
    """Per token, what the larger of a small-heads call's grids walks: the 64-head kernel's items
    (H = 48, 112: every head, the last block of 64 padded; H = 80, 96: heads 0..63) and the
    small-heads kernel's units over the rest."""
    wide = 0 if heads % 64 == 0 else (-(-heads // 64) * 64 if heads % 64 == 48 else heads // 64 * 64)
    rest = heads - wide if wide < heads else 0
    group = 32 if rest % 32 == 0 else 16
    return max(wide // 64, rest // group)


def run_both_caches(*, num_tokens, heads, seed):
    """A small-heads call (its planned kernel family) over both caches with random lengths and a
    sink: the problem, its output and LSE, checked against the reference."""
    problem = make_problem(num_tokens=num_tokens, num_heads=heads, topk=300, main=CacheSpec(12, 64), device="cuda",
                           seed=seed, extra=CacheSpec(5, 2), extra_topk=40, lengths="random",
                           extra_lengths="random", sink=1.0)
    output, out_lse, plan = problem.run()
    assert plan["kernel"] == "hopper_small"
    assert_matches_reference(output, out_lse, *problem.reference())
    return problem, output, out_lse


@needs_small_heads
@pytest.mark.parametrize("heads", [80, 96])
def test_leading_64_heads_run_on_the_64_head_kernel(heads):
    """With H = 80 or 96, heads 0..63 run on the 64-head Hopper kernel: the same bits as a
    64-head call on those heads' q and sink (which the 64-head kernel runs); the other heads run on
    the small-heads kernel and meet the contract."""
    problem, output, out_lse = run_both_caches(num_tokens=150, heads=heads, seed=70 + heads)
    leading = dataclasses.replace(problem, q=problem.q[:, :64].contiguous(),
                                  kwargs=dict(problem.kwargs, attn_sink=problem.kwargs["attn_sink"][:64].contiguous()))
    leading_out, leading_lse, leading_plan = leading.run()
    assert leading_plan["kernel"] == "hopper"
    assert torch.equal(output[:, :64].contiguous().view(torch.int16), leading_out.view(torch.int16))
    assert torch.equal(out_lse[:, :64].contiguous(), leading_lse)


@needs_small_heads
@pytest.mark.parametrize("heads", [48, 112])
def test_padded_last_head_block(heads):
    """With H = 48 or 112 the 64-head Hopper kernel runs every head, its last block of 64 padded
    with zero q rows that are never stored: the contract holds, and each head's output and LSE
    are the same bits as in a call with H rounded up to 64 / 128 whose extra heads carry other
    (random) q and sink values, which the 64-head kernel runs without padding."""
    problem, output, out_lse = run_both_caches(num_tokens=70, heads=heads, seed=90 + heads)
    full_heads = heads + 16
    generator = torch.Generator(device="cuda").manual_seed(heads)
    extra_q = torch.randn(problem.q.shape[0], 16, problem.q.shape[2], device="cuda", generator=generator)
    extra_sink = torch.randn(16, device="cuda", generator=generator)
    full = dataclasses.replace(problem, q=torch.cat([problem.q, extra_q.to(problem.q.dtype)], dim=1),
                               kwargs=dict(problem.kwargs, attn_sink=torch.cat([problem.kwargs["attn_sink"], extra_sink])))
    full_out, full_lse, full_plan = full.run()
    assert full_plan["kernel"] == "hopper" and full_out.shape[1] == full_heads
    assert torch.equal(output.view(torch.int16), full_out[:, :heads].contiguous().view(torch.int16))
    assert torch.equal(out_lse, full_lse[:, :heads].contiguous())


@needs_small_heads
@pytest.mark.parametrize("heads", [16, 96])
def test_small_heads_is_the_default(heads):
    """No override runs the small-heads kernel; "hopper" and "hopper_small" run it too (the same
    bits); "portable" runs the portable kernel, which meets the contract as well."""
    problem = make_problem(num_tokens=5, num_heads=heads, topk=70, main=CacheSpec(3, 64), device="cuda", seed=41,
                           sink=1.0)
    output, out_lse, plan = problem.run()
    assert plan["kernel"] == "hopper_small"
    assert_matches_reference(output, out_lse, *problem.reference())
    for kernel in ("hopper", "hopper_small"):
        with torch_ops.prefill_kernel_override(kernel=kernel):
            again, again_lse, again_plan = problem.run()
        assert again_plan == plan
        assert torch.equal(again.view(torch.int16), output.view(torch.int16)) and torch.equal(again_lse, out_lse)
    with torch_ops.prefill_kernel_override(kernel="portable"):
        portable, portable_lse, portable_plan = problem.run()
    assert portable_plan["kernel"] == "portable"
    assert_matches_reference(portable, portable_lse, *problem.reference())


@needs_small_heads
@pytest.mark.parametrize("heads", [16, 48])
def test_small_heads_empty_rows_and_infinite_sinks(heads):
    problem = make_problem(num_tokens=6, num_heads=heads, topk=70, main=CacheSpec(3, 64), device="cuda", seed=31,
                           sink=1.0, extra=CacheSpec(2, 1), extra_topk=5)
    problem.kwargs["topk_length"] = torch.tensor([0, 70, 5, 0, 64, 1], dtype=torch.int32, device="cuda")
    problem.kwargs["extra_topk_length"] = torch.tensor([0, 5, 0, 0, 2, 0], dtype=torch.int32, device="cuda")
    sink = torch.randn(heads)
    sink[:4] = float("inf")
    sink[4:8] = float("-inf")
    problem.kwargs["attn_sink"] = sink.cuda()
    output, out_lse, plan = problem.run()
    assert plan["kernel"] == "hopper_small"
    assert_matches_reference(output, out_lse, *problem.reference())
    assert output[:, :4].eq(0).all() and torch.isposinf(out_lse[:, :4]).all()
    assert output[0].eq(0).all() and output[3].eq(0).all()
    assert torch.isneginf(out_lse[0, 4:8]).all() and torch.isneginf(out_lse[3, 4:8]).all()
    expected = sink[8:] * (1 / math.log(2))
    torch.testing.assert_close(out_lse[0, 8:].cpu(), expected, rtol=1e-6, atol=1e-6)


def _non_finite_problem(heads, seed, sm_scale=None):
    """Six tokens over two lists; token 0 has no candidate at all."""
    problem = make_problem(num_tokens=6, num_heads=heads, topk=100, main=CacheSpec(4, 64, "NHD", 16), device="cuda",
                           seed=seed, extra=CacheSpec(20, 2), extra_topk=30, sink=1.0, lse_scale=0.5,
                           invalid_fraction=0.05, sm_scale=sm_scale)
    problem.kwargs["topk_length"] = torch.tensor([0, 100, 7, 50, 1, 100], dtype=torch.int32, device="cuda")
    problem.kwargs["extra_topk_length"] = torch.tensor([0, 30, 0, 5, 3, 30], dtype=torch.int32, device="cuda")
    return problem


def _run_with_nan(problem):
    output, out_lse, plan = problem.run()
    assert plan["kernel"] == "hopper_small"
    assert_matches_reference_with_nan(output, out_lse, *problem.reference())
    return output.cpu().float(), out_lse.cpu()


@needs_small_heads
@pytest.mark.parametrize("heads", [16, 32, 48])
def test_small_heads_nan_in_q_and_sink(heads):
    """A NaN in q poisons its row only (not a row without candidates); a NaN sink its head's lse
    everywhere and its output where there are candidates."""
    problem = _non_finite_problem(heads, seed=50 + heads)
    problem.q[1, 5, 17] = float("nan")           # a NoPE dim of converter 0's half
    problem.q[3, heads - 1, 500] = float("nan")  # a RoPE dim
    problem.q[4, 2, 300] = float("nan")          # a NoPE dim of converter 1's half
    problem.q[0, 9, 3] = float("nan")            # token 0 has no candidate: stays empty
    problem.kwargs["attn_sink"][7] = float("nan")
    output, out_lse = _run_with_nan(problem)
    nan_rows = {(1, 5), (3, heads - 1), (4, 2)} | {(t, 7) for t in range(1, 6)}
    assert {tuple(x) for x in torch.isnan(output).any(-1).nonzero().tolist()} == nan_rows
    assert torch.isnan(out_lse[:, 7]).all() and output[0].eq(0).all()


@needs_small_heads
@pytest.mark.parametrize("sm_scale", [math.inf, math.nan], ids=["inf", "nan"])
def test_small_heads_non_finite_sm_scale(sm_scale):
    problem = _non_finite_problem(32, seed=60, sm_scale=sm_scale)
    output, out_lse = _run_with_nan(problem)
    assert torch.isnan(out_lse[1:]).all() and torch.isnan(output[1:]).all()
    assert output[0].eq(0).all()


@needs_small_heads
@pytest.mark.parametrize("heads", [16, 48])
def test_small_heads_nan_in_cache(heads):
    """A NaN group in a selected row poisons every head of the tokens that select it; a masked
    occurrence (past the length) changes nothing."""
    problem = _non_finite_problem(heads, seed=70 + heads)
    bad = torch.randn(1, 512).to(torch.bfloat16)
    bad[0, 300] = float("nan")  # group 18: converter 1's half
    poisoned = 77
    torch_ops.nvfp4_quantize_append_sparse_mla_cache(bad.cuda(), torch.tensor([poisoned], device="cuda"),
                                                     problem.kv_cache)
    indices = problem.indices.cpu()
    indices[indices == poisoned] = poisoned + 1
    indices[2, 3] = poisoned   # valid (token 2 has 7)
    indices[3, 60] = poisoned  # past token 3's length of 50
    problem.indices = indices.cuda()
    output, out_lse = _run_with_nan(problem)
    assert torch.isnan(out_lse).any(dim=1).nonzero().flatten().tolist() == [2]
    assert torch.isnan(output[2]).all()


def _write_nan_rows(problem, count, seed):
    """Cache slots 0..count-1 rewritten as rows with a NaN in each converter's NoPE half and in the
    RoPE dims; returns the slots (on the CPU)."""
    bad = torch.randn(count, 512, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)
    bad[:, 10] = float("nan")   # converter 0's half
    bad[:, 300] = float("nan")  # converter 1's NoPE dims
    bad[:, 460] = float("nan")  # RoPE
    nan_slots = torch.arange(count)
    device = problem.kv_cache.device
    torch_ops.nvfp4_quantize_append_sparse_mla_cache(bad.to(device), nan_slots.to(device), problem.kv_cache)
    return nan_slots


@needs_small_heads
@pytest.mark.parametrize("heads", [16, 32])
def test_small_heads_masked_rows_after_nan_rows(heads):
    """Every persistent CTA walks two units: first a token whose 64 candidates are rows with a NaN
    in each converter's NoPE half and in the RoPE dims, then a token with one valid candidate
    whose 63 masked slots point at those rows (past its length: never read). In units of 32 heads
    a masked row's registers keep the previous unit's NaN bytes, which the converters must mask
    where they use them (in the prefill's units of 16 they are zeroed; the decode's short split form
    predicates them too: test_decode_short_splits_mask_rows_after_nan_rows): the first tokens come
    out NaN, the second finite and as the reference."""
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    num_tokens = 2 * num_sms
    problem = make_problem(num_tokens=num_tokens, num_heads=heads, topk=64, main=CacheSpec(16, 64), device="cuda",
                           seed=90 + heads, sink=1.0, invalid_fraction=0.0)
    nan_slots = _write_nan_rows(problem, 64, seed=5)
    indices = nan_slots.repeat(num_tokens, 1)
    indices[num_sms:, 0] = 64 + torch.arange(num_tokens - num_sms) % 900  # one ordinary row
    problem.indices = indices.to(torch.int32).cuda()
    lengths = torch.full((num_tokens,), 64, dtype=torch.int32)
    lengths[num_sms:] = 1
    problem.kwargs["topk_length"] = lengths.cuda()
    output, out_lse, plan = problem.run()
    assert plan["kernel"] == "hopper_small" and plan["grid_size"] == num_sms
    assert_matches_reference_with_nan(output, out_lse, *problem.reference())
    assert torch.isnan(out_lse[:num_sms]).all() and torch.isfinite(out_lse[num_sms:]).all()
    assert torch.isfinite(output[num_sms:].float()).all()


def _short_split_nan_problem(device, num_tokens):
    """16 heads, 256 candidates (two splits of two chunks): tokens below num_tokens // 2 take 128
    rows with a NaN in each converter's NoPE half and in the RoPE dims, twice over (both splits);
    the others one ordinary row (length 1), their masked slots pointing at the NaN rows."""
    problem = make_problem(num_tokens=num_tokens, num_heads=16, topk=256, main=CacheSpec(16, 64), device=device,
                           seed=97, sink=1.0, invalid_fraction=0.0)
    nan_slots = _write_nan_rows(problem, 128, seed=6)
    indices = nan_slots.repeat(num_tokens, 2)
    second = num_tokens // 2
    indices[second:, 0] = 128 + torch.arange(num_tokens - second) % 800  # one ordinary row
    problem.indices = indices.to(torch.int32).to(device)
    lengths = torch.full((num_tokens,), 256, dtype=torch.int32)
    lengths[second:] = 1
    problem.kwargs["topk_length"] = lengths.to(device)
    return problem


@needs_small_heads
def test_decode_short_splits_mask_rows_after_nan_rows():
    """The short form of the 16-head split units loads rows by predicated loads with converter 1's
    RoPE k-steps first (a combination the prefill's units do not have). Every persistent CTA walks
    two split units of the same split index: one of a token whose rows hold NaNs, then one of a
    token with one valid candidate whose masked slots point at those rows (never read), so a masked
    row's registers keep the NaN bytes, which the converters must mask where they use them. The
    first tokens come out NaN, the second finite, and both (outputs and every split's partial)
    as the reference."""
    from test_decode import check_decode
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    # Two units a token, one CTA an SM: with an even SM count CTA c walks units c and c + num_sms, of
    # tokens c // 2 (NaN rows) and c // 2 + num_sms / 2 (masked slots), in the same split.
    num_tokens = num_sms
    problem = _short_split_nan_problem("cuda", num_tokens)
    props = torch.cuda.get_device_properties(0)
    output, out_lse, plan, _, _ = check_decode(problem, num_splits=2, head_tiles=1)
    assert plan["chunks_per_block"] == 2 <= torch_ops._C.HOPPER_SMALL_SHORT_SPLIT_CHUNKS
    assert torch_ops._C.decode_split_kernel_for(props.major, props.shared_memory_per_block_optin, 16, 1, 2,
                                                2) == "hopper_small"
    second = num_tokens // 2
    assert torch.isnan(out_lse[:second]).all() and torch.isfinite(out_lse[second:]).all()
    assert torch.isfinite(output[second:].float()).all()


@needs_small_heads
@pytest.mark.parametrize("heads", [32, 48])
def test_small_heads_agrees_with_portable_and_is_repeatable(heads):
    problem = make_problem(num_tokens=300, num_heads=heads, topk=512, main=CacheSpec(64, 64, "NHD", 32), device="cuda",
                           seed=77, extra=CacheSpec(8, 256), extra_topk=128, lengths="random", sink=1.0)
    assert assert_agrees_with_portable_and_repeatable(problem)["kernel"] == "hopper_small"


@needs_small_heads
@pytest.mark.parametrize("heads", [16, 96])
def test_small_heads_persistent_grid_crosses_units(heads):
    """More units than SMs, about half of them empty (zero lengths): every persistent CTA walks
    several units, so gathers, Q loads and the K tiles cross unit boundaries."""
    problem = persistent_walk_problem(heads)
    first = problem.run()
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert first[2]["kernel"] == "hopper_small" and first[2]["grid_size"] == num_sms
    assert_matches_reference(first[0], first[1], *problem.reference())
    assert_repeatable(first, problem.run())


@needs_small_heads
@pytest.mark.parametrize("heads", [16, 32, 80, 96])
def test_small_heads_output_views_of_each_alignment(heads):
    """Units of 16 heads (H = 16, 80) and of 32 (H = 32, 96) store O from registers, 4 bytes a
    store, into a 16-byte aligned output and into views 4 and 16 bytes into their storage: every
    view matches the reference and gives the same bits, and no store lands outside the view (the
    guard elements around it keep their NaN). The persistent grid walks several units a CTA; with
    H = 80 and 96 the kernel runs heads 64.. from pointers moved by 64 heads (heads 0..63 run on
    the 64-head kernel)."""
    problem = persistent_walk_problem(heads)
    expected_out, expected_lse, expected_plan = problem.run()
    assert expected_plan["kernel"] == "hopper_small"
    reference = problem.reference()
    num_tokens = problem.q.shape[0]
    size = num_tokens * heads * 512
    guard = 16
    for offset_elements in (0, 2, 8):
        start = guard + offset_elements
        storage = torch.full((start + size + guard,), float("nan"), dtype=torch.bfloat16, device="cuda")
        output = storage[start:start + size].view(num_tokens, heads, 512)
        assert (output.data_ptr() % 16 == 0) == (offset_elements % 8 == 0)
        out_lse = torch.full((num_tokens, heads), float("nan"), dtype=torch.float32, device="cuda")
        plan = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(problem.q, problem.kv_cache, problem.indices, output,
                                                                  out_lse, problem.sm_scale, **problem.kwargs)
        assert plan == expected_plan
        assert_matches_reference(output, out_lse, *reference)
        assert torch.equal(output.view(torch.int16), expected_out.view(torch.int16)), offset_elements
        assert torch.equal(out_lse, expected_lse), offset_elements
        assert torch.isnan(storage[:start]).all() and torch.isnan(storage[start + size:]).all()


# (heads, tokens, topk, extra topk, split counts): padded units (8, 24), one and several units of 16
# or 32 (16, 32, 48, 96) a token; 2048 candidates (32 chunks) fit one split, 4100 + 96 (67 chunks)
# need three; every count leaves two chunks or more in the largest split. The 16-head units run
# both forms of the split instance: the short one where the largest split holds at most
# HOPPER_SMALL_SHORT_SPLIT_CHUNKS chunks (four: H = 8 at 16 splits, 16 at 5 and 8, 24 at 9, 48 at
# 33), the long one at the other counts.
SPLIT_CASES = [(8, 70, 2048, 0, [2, 7, 16]), (16, 5, 700, 300, [2, 5, 8]), (24, 9, 1024, 96, [2, 3, 9]),
               (32, 40, 1024, 0, [4, 8]), (48, 3, 4100, 96, [5, 33]), (96, 2, 300, 130, [2, 4])]


@needs_small_heads
@pytest.mark.parametrize("case", range(len(SPLIT_CASES)))
def test_decode_splits_on_the_small_kernel(case):
    """The decode's split form of this kernel: random lengths over both caches (some splits of some
    tokens empty), a sink, masked candidates; every forced split count runs it (the plan's largest
    split holds two chunks or more), and the output, every used split of the NaN-filled scratch
    and nothing beyond it match the references (check_decode); with H = 8 and 24 the padding heads
    write nothing (their rows would be the next token's). Repeatable bit for bit."""
    from test_decode import check_decode
    heads, num_tokens, topk, extra_topk, split_counts = SPLIT_CASES[case]
    extra = dict(extra=CacheSpec(40, 2, "3d", 16), extra_topk=extra_topk, extra_lengths="random") if extra_topk else {}
    problem = make_problem(num_tokens=num_tokens, num_heads=heads, topk=topk, main=CacheSpec(80, 64, "NHD", 32),
                           device="cuda", seed=1100 + case, lengths="random", sink=1.0, lse_scale=0.5,
                           invalid_fraction=0.1, **extra)
    problem.kwargs["topk_length"][0] = topk  # token 0 fills every split
    if extra_topk:
        problem.kwargs["extra_topk_length"][0] = extra_topk
    props = torch.cuda.get_device_properties(0)
    forms = set()
    for num_splits in split_counts:
        output, out_lse, plan, _, _ = check_decode(problem, num_splits, max_splits=max(split_counts))
        forms.add(plan["chunks_per_block"] <= torch_ops._C.HOPPER_SMALL_SHORT_SPLIT_CHUNKS)
        assert plan["chunks_per_block"] >= torch_ops._C.HOPPER_DECODE_MIN_CHUNKS_PER_SPLIT
        assert torch_ops._C.decode_split_kernel_for(props.major, props.shared_memory_per_block_optin, heads,
                                                    plan["head_tiles"], num_splits,
                                                    plan["chunks_per_block"]) == "hopper_small"
        again = problem.run_decode(num_splits, max(split_counts), plan["head_tiles"], num_splits)
        assert torch.equal(output.view(torch.int16), again[0].view(torch.int16)) and torch.equal(out_lse, again[1])
    if heads in (8, 16, 24, 48):  # 16-head units: both forms of the split instance ran
        assert forms == {True, False}, forms


# (heads, tokens, topk, extra topk): one-split decodes without scratch. H = 8, 24 and 40 run this
# kernel's split form with one split (padded units of 16; more units than SMs at H = 8, so the
# persistent CTAs walk several); H = 16 and 80 the prefill's dispatch (80: heads 0..63 on the
# 64-head kernel) over 32 chunks, more than the prefill itself takes.
ONE_SPLIT_CASES = [(8, 150, 1024, 0), (24, 9, 700, 300), (40, 5, 2048, 0), (16, 7, 2048, 0), (80, 3, 1500, 500)]


@needs_small_heads
@pytest.mark.parametrize("case", range(len(ONE_SPLIT_CASES)))
def test_decode_one_split_on_the_small_kernel(case):
    """A decode of one split that the 64-head kernel does not serve runs this kernel and writes the
    output itself (no scratch given): random lengths over both caches, some tokens empty or with
    a negative length, a sink and masked candidates; the NaN-filled output matches the reference
    everywhere (padding heads write nothing: at H = 8 and 24 their rows would be the next token's,
    and past the last token the guard elements keep their NaN), and the bits repeat."""
    heads, num_tokens, topk, extra_topk = ONE_SPLIT_CASES[case]
    extra = dict(extra=CacheSpec(40, 2, "3d", 16), extra_topk=extra_topk, extra_lengths="random") if extra_topk else {}
    problem = make_problem(num_tokens=num_tokens, num_heads=heads, topk=topk, main=CacheSpec(80, 64, "NHD", 32),
                           device="cuda", seed=1300 + case, lengths="random", sink=1.0, lse_scale=0.5,
                           invalid_fraction=0.1, **extra)
    lengths = problem.kwargs["topk_length"]
    lengths[0], lengths[1 % num_tokens] = topk, 0
    if num_tokens > 2:
        lengths[2] = -5
    props = torch.cuda.get_device_properties(0)
    size = num_tokens * heads * 512
    guard = 16 * 512  # a padded unit's rows past the last head of the last token
    storage = torch.full((size + guard,), float("nan"), dtype=torch.bfloat16, device="cuda")
    output = storage[:size].view(num_tokens, heads, 512)
    out_lse = torch.full((num_tokens, heads), float("nan"), dtype=torch.float32, device="cuda")
    runs = []
    for _ in range(2):
        output.fill_(float("nan"))
        out_lse.fill_(float("nan"))
        plan = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_decode(problem.q, problem.kv_cache, problem.indices, output,
                                                                 out_lse, problem.sm_scale, num_splits=1,
                                                                 **problem.kwargs)
        assert plan["num_splits"] == 1
        assert torch_ops._C.decode_split_kernel_for(props.major, props.shared_memory_per_block_optin, heads,
                                                    plan["head_tiles"], 1, plan["chunks_per_block"]) == "hopper_small"
        assert_matches_reference_with_nan(output, out_lse, *problem.reference())
        assert torch.isnan(storage[size:]).all(), "a padding head wrote past the output"
        runs.append((output.clone(), out_lse.clone()))
    assert torch.equal(runs[0][0].view(torch.int16), runs[1][0].view(torch.int16))
    assert torch.equal(runs[0][1], runs[1][1])


@needs_small_heads
@pytest.mark.parametrize("heads", [16, 32])
def test_decode_split_partials_are_the_prefills(heads):
    """Where a token's lists end inside split 0, split 0's partial is the whole-list prefill of the
    same kernel (units of the same size): rounded to bf16 it is the prefill's output bit for bit,
    and its LSE is the prefill's (no sink, lse_scale 1); the other splits hold zeros and -inf. More
    split units than SMs, so the persistent CTAs walk several, empty ones among them."""
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    num_tokens, topk, num_splits = num_sms + 7, 512, 4
    problem = make_problem(num_tokens=num_tokens, num_heads=heads, topk=topk, main=CacheSpec(64, 64, "NHD", 32),
                           device="cuda", seed=1200 + heads, lse_scale=1.0, invalid_fraction=0.1)
    pattern = [512, 128, 1, 0, 300, 64, 129, 600, 100, -3]
    lengths = torch.tensor([pattern[t % len(pattern)] for t in range(num_tokens)], dtype=torch.int32)
    problem.kwargs["topk_length"] = lengths.cuda()
    from test_decode import check_decode
    _, _, plan, mid_out, mid_lse = check_decode(problem, num_splits, max_splits=16)
    props = torch.cuda.get_device_properties(0)
    assert torch_ops._C.decode_split_kernel_for(props.major, props.shared_memory_per_block_optin, heads,
                                                plan["head_tiles"], num_splits,
                                                plan["chunks_per_block"]) == "hopper_small"
    whole_out, whole_lse, whole_plan = problem.run()
    assert whole_plan["kernel"] == "hopper_small"
    in_split0 = lengths.clamp(min=0) <= topk // num_splits
    assert in_split0.any() and (~in_split0).any()
    rows = in_split0.nonzero().flatten().cuda()
    assert torch.equal(mid_out[0, rows].to(torch.bfloat16).view(torch.int16), whole_out[rows].view(torch.int16))
    assert torch.equal(mid_lse[0, rows].view(torch.int32), whole_lse[rows].view(torch.int32))
    assert (mid_out[1:num_splits, rows] == 0).all() and (mid_lse[1:num_splits, rows] == -math.inf).all()

