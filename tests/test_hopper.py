"""The Hopper (sm_90a) prefill kernel: which calls it serves, and the contract on it.

The rest of the suite reaches it too (every CUDA call on an H100/H200 with a multiple of 64
heads and head_tiles 4); these tests force the edge cases through it explicitly, compare it with
the portable kernel on the same inputs, and check it is bitwise repeatable."""
import math

import pytest
import torch

import torch_ops
from helpers import (HAS_CUDA, HOPPER_SMEM, CacheSpec, assert_agrees_with_portable_and_repeatable,
                     assert_matches_reference, assert_repeatable, case_problem, make_problem, persistent_walk_problem)
from test_decode import check_decode


def _device_runs_hopper() -> bool:
    if not HAS_CUDA:
        return False
    props = torch.cuda.get_device_properties(0)
    return torch_ops._C.device_runs_hopper_prefill(props.major, props.shared_memory_per_block_optin)


needs_hopper = pytest.mark.skipif(not _device_runs_hopper(), reason="needs an sm_90 GPU and an sm_90a build")


def test_kernel_choice():
    """Only compute capability 9.x, a multiple of 64 heads and head_tiles 4 may take the Hopper
    kernel; the other calls on such a device take the small-heads Hopper kernel
    (tests/test_hopper_small.py); the kernel override "portable" keeps them all on the portable
    kernel."""
    choose = torch_ops._C.prefill_kernel_for
    device = torch_ops._C.device_runs_hopper_prefill
    with torch_ops.prefill_kernel_override():
        for cc_major, smem, heads, head_tiles in [(8, 166912, 128, 4), (12, 101376, 128, 4), (10, HOPPER_SMEM, 128, 4),
                                                  (9, 101376, 128, 4), (9, 101376, 16, 1)]:
            assert choose(cc_major, smem, heads, head_tiles) == "portable", (cc_major, smem, heads, head_tiles)
        hopper_built = choose(9, HOPPER_SMEM, 64, 4)
        assert hopper_built in ("hopper", "portable")  # "portable" only in a build without sm_90a
        small_built = "hopper_small" if hopper_built == "hopper" else "portable"
        assert choose(9, HOPPER_SMEM, 128, 4) == hopper_built
        for heads, head_tiles in [(128, 2), (16, 1), (96, 2)]:
            assert choose(9, HOPPER_SMEM, heads, head_tiles) == small_built, (heads, head_tiles)
        assert device(9, HOPPER_SMEM) == (hopper_built == "hopper")
        assert not device(8, 166912) and not device(12, 101376) and not device(9, 101376)
    for knobs in (dict(kernel="portable"), dict(variant=(2, 1))):
        with torch_ops.prefill_kernel_override(**knobs):
            assert choose(9, HOPPER_SMEM, 128, 4) == "portable" and not device(9, HOPPER_SMEM)
            assert choose(9, HOPPER_SMEM, 128, 2) == "portable"
    with torch_ops.prefill_kernel_override(kernel="hopper"):
        assert choose(9, HOPPER_SMEM, 128, 4) == hopper_built and choose(9, HOPPER_SMEM, 128, 2) == small_built
        assert device(9, HOPPER_SMEM) == (hopper_built == "hopper") and not device(8, 166912)


# (heads, topk, main cache, extra cache, extra topk, lengths, sink): partial, single-candidate and
# 16-chunk lists, page sizes 1, 2 and 256, padded page strides, all three views.
HOPPER_CASES = [
    (64, 1, CacheSpec(4, 64), None, 0, None, None),
    (64, 63, CacheSpec(5, 64, "NHD", 16), None, 0, "random", 1.0),
    (128, 65, CacheSpec(3, 256, "3d"), CacheSpec(40, 1), 7, "random", 1.0),
    (64, 200, CacheSpec(100, 2, "HND", 48), CacheSpec(3, 64, "NHD"), 129, "random", None),
    (128, 1024, CacheSpec(20, 64), None, 0, "random", 1.0),
    (128, 128, CacheSpec(2, 256, "HND", 4096), CacheSpec(9, 64), 512, None, 1.0),
]


@needs_hopper
@pytest.mark.parametrize("case", range(len(HOPPER_CASES)))
def test_hopper_matches_reference(case):
    heads = HOPPER_CASES[case][0]
    problem = case_problem(HOPPER_CASES[case], seed=500 + case)
    output, out_lse, plan = problem.run(head_tiles=4)
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert plan == {"head_tiles": 4, "num_ctas": 37 * heads // 64, "grid_size": min(37 * heads // 64, num_sms),
                    "kernel": "hopper"}
    assert_matches_reference(output, out_lse, *problem.reference())


@needs_hopper
def test_hopper_empty_rows_and_infinite_sinks():
    problem = make_problem(num_tokens=6, num_heads=64, topk=70, main=CacheSpec(3, 64), device="cuda", seed=31,
                           sink=1.0, extra=CacheSpec(2, 1), extra_topk=5)
    problem.kwargs["topk_length"] = torch.tensor([0, 70, 5, 0, 64, 1], dtype=torch.int32, device="cuda")
    problem.kwargs["extra_topk_length"] = torch.tensor([0, 5, 0, 0, 2, 0], dtype=torch.int32, device="cuda")
    sink = torch.randn(64)
    sink[:4] = float("inf")
    sink[4:8] = float("-inf")
    problem.kwargs["attn_sink"] = sink.cuda()
    output, out_lse, _ = problem.run(head_tiles=4)
    assert_matches_reference(output, out_lse, *problem.reference())
    assert output[:, :4].eq(0).all() and torch.isposinf(out_lse[:, :4]).all()
    assert output[0].eq(0).all() and output[3].eq(0).all()
    assert torch.isneginf(out_lse[0, 4:8]).all() and torch.isneginf(out_lse[3, 4:8]).all()
    expected = sink[8:] * (1 / math.log(2))
    torch.testing.assert_close(out_lse[0, 8:].cpu(), expected, rtol=1e-6, atol=1e-6)


@needs_hopper
def test_hopper_agrees_with_portable_and_is_repeatable():
    problem = make_problem(num_tokens=300, num_heads=128, topk=512, main=CacheSpec(64, 64, "NHD", 32), device="cuda",
                           seed=77, extra=CacheSpec(8, 256), extra_topk=128, lengths="random", sink=1.0)
    assert assert_agrees_with_portable_and_repeatable(problem, head_tiles=4)["kernel"] == "hopper"


@needs_hopper
def test_hopper_persistent_grid_crosses_items():
    """More work items than SMs, about half of them empty (zero lengths): every persistent CTA
    walks several items, so gathers, Q loads and the first dequant cross item boundaries."""
    problem = persistent_walk_problem(64)
    first = problem.run(head_tiles=4)
    assert_matches_reference(first[0], first[1], *problem.reference())
    assert_repeatable(first, problem.run(head_tiles=4))


@needs_hopper
def test_hopper_repeats_the_same_bits_many_times():
    """Thirty runs of one random problem of many items (T = 300 over the persistent grid, random
    lengths, masked entries, 64 heads, topk 512: item boundaries of every kind) give one result.
    A schedule-dependent hand-over shows as a run that differs: a development build of this
    kernel at other register budgets once gave other bits at this shape in two of seven processes
    (docs/benchmarks.md, "The item boundary's stores freed early, ..."), which a test of two runs
    would rarely see."""
    problem = make_problem(num_tokens=300, num_heads=64, topk=512, main=CacheSpec(256, 64), device="cuda", seed=11,
                           lengths="random", sink=1.0)
    first = problem.run(head_tiles=4)
    assert first[2]["kernel"] == "hopper"
    assert_matches_reference(first[0], first[1], *problem.reference())
    differing = []
    for run in range(1, 30):
        again = problem.run(head_tiles=4)
        if not (torch.equal(again[0].view(torch.int16), first[0].view(torch.int16)) and torch.equal(again[1], first[1])):
            differing.append(run)
    assert not differing, f"runs {differing} of 30 gave other bits than the first"


@needs_hopper
def test_hopper_output_views_of_each_alignment():
    """O leaves the kernel by TMA stores through a K tile when the output is 16-byte aligned and from
    registers, 4 bytes a lane, when it is only 4-byte aligned (a view 2 bf16 into 16-byte aligned
    storage): both paths write every element, match the reference and give the same bits, and
    neither writes outside the view (the 16 guard elements on each side keep their NaN)."""
    problem = persistent_walk_problem(64)
    num_tokens, num_heads = problem.q.shape[0], problem.q.shape[1]
    size = num_tokens * num_heads * 512
    guard = 16
    results = {}
    for offset in (0, 2, 8):  # bf16 elements past a 16-byte boundary: 16-, 4-, 16-byte stores
        storage = torch.full((guard + offset + size + guard,), float("nan"), dtype=torch.bfloat16, device="cuda")
        output = storage[guard + offset:guard + offset + size].view(num_tokens, num_heads, 512)
        assert (output.data_ptr() % 16 == 0) == (offset % 8 == 0)
        out_lse = torch.full((num_tokens, num_heads), float("nan"), dtype=torch.float32, device="cuda")
        plan = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(problem.q, problem.kv_cache, problem.indices, output,
                                                                  out_lse, problem.sm_scale, head_tiles=4, **problem.kwargs)
        assert plan["kernel"] == "hopper"
        assert_matches_reference(output, out_lse, *problem.reference())
        assert torch.isnan(storage[:guard + offset]).all() and torch.isnan(storage[guard + offset + size:]).all()
        results[offset] = (output.view(torch.int16).clone(), out_lse.view(torch.int32).clone())
    for offset in (2, 8):
        assert torch.equal(results[offset][0], results[0][0]) and torch.equal(results[offset][1], results[0][1]), offset


@needs_hopper
def test_hopper_split_partials_match_whole_lists_bitwise():
    """The decode's split items store their fp32 partials through the Q tile by TMA (two rounds
    of 128 dims a consumer, boxes of 32 fp32 dims of a mid_out tensor map). Against the float64
    reference with NaN-filled outputs and scratch (every element written, a spare split left
    alone), over more items than SMs and both head blocks of H = 128; then, for every token whose
    candidates all lie in split 0 (length <= 128 of 512, four splits of two chunks), split 0's
    partial is the whole-list item's O before the bf16 rounding (the same blocks, reference and
    scale, no sink): rounded to bf16 it must give the whole-list output's bits, its LSE the
    whole-list LSE's (lse_scale 1), and the other splits zeros and -inf. A misplaced element fails
    the first comparison below; a rounding difference between the two instances only the second."""
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    num_tokens, num_heads, topk, num_splits = num_sms // 8 + 8, 128, 512, 4
    problem = make_problem(num_tokens=num_tokens, num_heads=num_heads, topk=topk, main=CacheSpec(64, 64, "NHD", 32),
                           device="cuda", seed=909, lse_scale=1.0, invalid_fraction=0.1)
    pattern = [512, 128, 1, 0, 300, 64, 129, 600, 100, -3]
    lengths = torch.tensor([pattern[t % len(pattern)] for t in range(num_tokens)], dtype=torch.int32)
    problem.kwargs["topk_length"] = lengths.cuda()
    assert num_tokens * (num_heads // 64) * num_splits > num_sms  # persistent CTAs walk several split items

    output, out_lse, plan, mid_out, mid_lse = check_decode(problem, num_splits, max_splits=16, head_tiles=4)
    props = torch.cuda.get_device_properties(0)
    assert torch_ops._C.decode_split_kernel_for(props.major, props.shared_memory_per_block_optin, num_heads, 4,
                                                num_splits, plan["chunks_per_block"]) == "hopper"
    whole_out, whole_lse, whole_plan = problem.run(head_tiles=4)
    assert whole_plan["kernel"] == "hopper"

    in_split0 = lengths.clamp(min=0) <= topk // num_splits
    assert in_split0.any() and (~in_split0).any()
    rows = in_split0.nonzero().flatten().cuda()
    partial = mid_out[0, rows]
    expected = whole_out[rows]
    torch.testing.assert_close(partial.to(torch.bfloat16).float(), expected.float(), rtol=2**-7, atol=0.0)
    assert torch.equal(partial.to(torch.bfloat16).view(torch.int16), expected.view(torch.int16))
    assert torch.equal(mid_lse[0, rows].view(torch.int32), whole_lse[rows].view(torch.int32))
    assert mid_out[1:num_splits, rows].eq(0).all() and torch.isneginf(mid_lse[1:num_splits, rows]).all()
