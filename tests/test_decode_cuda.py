"""The CUDA decode (docs/contract.md section 12): the split kernel and the merge against the float64
reference for every head-count kind (8, 16, 24, 64, 128), each head tile, forced splits (1, 2, 5,
the most) and planned ones, more than 1024 candidates (2048, 4100) over both caches (on Hopper,
64 heads per item run the 64-head kernel's splits, the other head counts the small-heads kernel's
split form where a split holds two chunks); one split against the prefill (the same kernel: the
same bits; where the prefill runs the small-heads Hopper kernel, whose split form serves only
plans that split, against the portable prefill); bitwise repeatability, CUDA
graph capture, no allocation, torch.compile of sparse_mla_attention. test_decode.py runs its
reference, mask, length and non-finite cases on CUDA too."""
import pytest
import torch
import torch._dynamo
from torch._inductor.utils import run_and_get_code

import torch_ops
from helpers import (HAS_CUDA, CacheSpec, assert_matches_reference, assert_replays_follow_inplace_changes, capture_graph,
                     make_problem)
from test_decode import check_decode
from torch_ops.reference import sparse_mla_prefill_reference

pytestmark = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")

allocate = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch
head_tile_choices = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_decode_head_tiles
num_chunks = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_num_chunks

# (topk, extra_topk, forced split counts, max_splits): 16 chunks (11 + 5) and 2048 candidates (32
# chunks) fit one split; 4100 + 96 (65 + 2 chunks) need 3.
LIST_SHAPES = {
    "700+300": (700, 300, [1, 2, 5, 16], 16),
    "2048": (2048, 0, [1, 2, 5, 32], 32),
    "4100+96": (4100, 96, [3, 5, 67], 67),
}


def runnable_head_tiles(num_heads):
    """The decode's head tiles for H that this GPU's shared memory runs (all of them on A100/H100/H200)."""
    return tuple(t for t in head_tile_choices(num_heads) if t <= torch_ops._C.device_max_head_tiles("cuda"))


def list_problem(shape, num_heads, seed, num_tokens=3):
    topk, extra_topk, _, _ = LIST_SHAPES[shape]
    return make_problem(num_tokens=num_tokens, num_heads=num_heads, topk=topk, main=CacheSpec(80, 64, "NHD", 32),
                        device="cuda", seed=seed, extra=CacheSpec(300, 2, "3d", 16) if extra_topk else None,
                        extra_topk=extra_topk, lengths="random", extra_lengths="random", sink=1.0, lse_scale=0.5,
                        invalid_fraction=0.1)


@pytest.mark.parametrize("shape", sorted(LIST_SHAPES))
@pytest.mark.parametrize("num_heads", [8, 16, 24, 64, 128])
def test_forced_and_planned_splits(shape, num_heads):
    """Every forced split count, then the planner's, each head tile the head count allows: the
    output, every used split of the NaN-filled scratch, and nothing beyond it."""
    _, _, forced, max_splits = LIST_SHAPES[shape]
    problem = list_problem(shape, num_heads, seed=num_heads)
    # Token 0 keeps its whole lists, so that every split of it holds candidates.
    problem.kwargs["topk_length"][0] = problem.indices.shape[-1]
    if "extra_topk_length" in problem.kwargs:
        problem.kwargs["extra_topk_length"][0] = problem.kwargs["extra_indices"].shape[-1]
    tiles = runnable_head_tiles(num_heads)
    for i, num_splits in enumerate(forced + [None]):
        head_tiles = tiles[i % len(tiles)]
        _, _, plan, _, _ = check_decode(problem, num_splits, max_splits, head_tiles)
        assert plan["head_tiles"] == head_tiles
    _, _, plan, _, _ = check_decode(problem, None, max_splits, None)
    topk, extra_topk = LIST_SHAPES[shape][:2]
    # The planner's head tile: the largest, or 1 (16-head units) for the few CTAs of 64-head blocks on Hopper.
    assert plan == torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode(
        num_tokens=problem.q.shape[0], num_heads=num_heads, topk=topk, extra_topk=extra_topk, device="cuda",
        max_splits=max_splits)
    assert plan["head_tiles"] in (max(tiles), 1)


@pytest.mark.parametrize("many_rows", [False, True])
def test_merge_row_mappings(many_rows):
    """The merge maps a row onto four warps while T * H <= 8 rows an SM, onto one warp beyond
    (decode_merge.cu): both mappings, each with splits that fit one round of a lane's loads (2)
    and more than one (11: the LSE pass first), against the reference and the partials."""
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    num_tokens = 8 * num_sms // 64 + 2 if many_rows else 2
    assert (num_tokens * 64 > 8 * num_sms) == many_rows
    problem = list_problem("2048", 64, seed=11 + many_rows, num_tokens=num_tokens)
    for num_splits in (2, 11):
        check_decode(problem, num_splits, 32, 4)


@pytest.mark.parametrize("kernel", [None, "portable"])
@pytest.mark.parametrize("num_heads,head_tiles,topk,extra_topk", [
    (16, 1, 700, 300), (64, 1, 700, 300), (64, 2, 700, 300), (64, 4, 700, 300), (128, 4, 700, 300), (96, 2, 700, 300),
    (64, 4, 64, 0), (128, 4, 40, 0)])
def test_one_split_is_the_prefill(num_heads, head_tiles, topk, extra_topk, kernel):
    """One split runs the prefill's kernels over the whole lists and ends like it: the same bits as
    the prefill with the same head tile and kernel override (on Hopper, 64 heads per item run the
    64-head kernel in both ops, the other calls the small-heads dispatch, H = 96 on both kernels,
    unless the override keeps them on the portable kernel). A single chunk (topk <= 64) too: the
    decode's minimum of chunks per split for the Hopper kernels applies only to plans that split."""
    if head_tiles not in runnable_head_tiles(num_heads):
        pytest.skip("this GPU's shared memory does not run the head tile")
    extra = dict(extra=CacheSpec(40, 2), extra_topk=extra_topk, extra_lengths="random") if extra_topk else {}
    problem = make_problem(num_tokens=5, num_heads=num_heads, topk=topk, main=CacheSpec(20, 64, "HND", 16),
                           device="cuda", seed=14, lengths="random", sink=1.0, lse_scale=0.5, **extra)
    chunks = -(-topk // 64) + -(-extra_topk // 64)
    props = torch.cuda.get_device_properties(0)
    with torch_ops.prefill_kernel_override(kernel=kernel):
        output, out_lse, plan, _, _ = problem.run_decode(num_splits=1, head_tiles=head_tiles, scratch_splits=0)
        prefill_out, prefill_lse, prefill_plan = problem.run(head_tiles)
        expected_kernel = torch_ops._C.prefill_kernel_for(props.major, props.shared_memory_per_block_optin, num_heads,
                                                          head_tiles)
        split_kernel = torch_ops._C.decode_split_kernel_for(props.major, props.shared_memory_per_block_optin, num_heads,
                                                            head_tiles, 1, plan["chunks_per_block"])
    assert plan == {"head_tiles": head_tiles, "num_splits": 1, "chunks_per_block": chunks}
    assert prefill_plan["kernel"] == expected_kernel
    if kernel == "portable":
        assert prefill_plan["kernel"] == "portable" and split_kernel == "portable"
    assert split_kernel == prefill_plan["kernel"]
    assert torch.equal(output.view(torch.int16), prefill_out.view(torch.int16)) and torch.equal(out_lse, prefill_lse)
    assert_matches_reference(output, out_lse, *problem.reference())


def test_bitwise_repeatable_and_plans_agree():
    """The same plan gives the same bits on every call; other plans (splits, head tiles) meet the
    contract too (checked by check_decode)."""
    problem = list_problem("4100+96", 24, seed=3, num_tokens=4)
    head_tiles = max(runnable_head_tiles(24))
    runs = [problem.run_decode(num_splits=7, head_tiles=head_tiles) for _ in range(3)]
    for output, out_lse, _, mid_out, mid_lse in runs[1:]:
        assert torch.equal(output.view(torch.int16), runs[0][0].view(torch.int16))
        assert torch.equal(out_lse, runs[0][1])
        assert torch.equal(mid_out[:7].view(torch.int32), runs[0][3][:7].view(torch.int32))
        assert torch.equal(mid_lse[:7].view(torch.int32), runs[0][4][:7].view(torch.int32))
    check_decode(problem, 7, head_tiles=1)


def graph_problem(seed):
    """15 chunks (13 + 2): one split can hold them all."""
    return make_problem(num_tokens=3, num_heads=64, topk=800, main=CacheSpec(60, 64, "HND", 32), device="cuda",
                        seed=seed, extra=CacheSpec(30, 2), extra_topk=100, lengths="random", extra_lengths="random",
                        sink=1.0, lse_scale=0.5)


@pytest.mark.parametrize("num_splits", [1, 6])
def test_graph_capture_replay_with_inplace_changes(num_splits):
    """The split kernel and the merge captured in a CUDA graph: replays follow in-place changes of
    q, the lists, the lengths and the caches, and repeat bit for bit."""
    problem = graph_problem(1)
    output = torch.full((3, 64, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    out_lse = torch.full((3, 64), float("nan"), device="cuda")
    mid_out, mid_lse = allocate(3, 64, 800, 100, device="cuda")

    def call():
        torch_ops.sparse_mla_decode(problem.q, problem.kv_cache, problem.indices, output, out_lse, problem.sm_scale,
                                    mid_out=mid_out, mid_lse=mid_lse, num_splits=num_splits, **problem.kwargs)

    assert_replays_follow_inplace_changes(capture_graph(call), problem, graph_problem, output, out_lse)


def test_no_device_allocation_during_call():
    problem = graph_problem(4)
    output = torch.empty(3, 64, 512, dtype=torch.bfloat16, device="cuda")
    out_lse = torch.empty(3, 64, device="cuda")
    mid_out, mid_lse = allocate(3, 64, 800, 100, device="cuda")

    def call():
        return torch_ops.sparse_mla_decode(problem.q, problem.kv_cache, problem.indices, output, out_lse,
                                           problem.sm_scale, mid_out=mid_out, mid_lse=mid_lse, **problem.kwargs)

    assert call()["num_splits"] > 1  # warm-up; the split kernel and the merge both run
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_stats()
    call()
    torch.cuda.synchronize()
    after = torch.cuda.memory_stats()
    assert after["allocation.all.allocated"] == before["allocation.all.allocated"]
    assert after["allocated_bytes.all.peak"] == before["allocated_bytes.all.current"]


def attention(q, kv_cache, indices, output, out_lse, mid_out, mid_lse, topk_length, attn_sink):
    torch_ops.sparse_mla_attention(q, kv_cache, indices, output, out_lse, 0.05, topk_length=topk_length,
                                   attn_sink=attn_sink, mid_out=mid_out, mid_lse=mid_lse, lse_scale=0.5)
    return output, out_lse


def attention_inputs(num_tokens, num_heads, topk, seed):
    problem = make_problem(num_tokens=num_tokens, num_heads=num_heads, topk=topk, main=CacheSpec(40, 64),
                           device="cuda", seed=seed, lengths="random", sink=1.0)
    mid_out, mid_lse = allocate(num_tokens, num_heads, topk, device="cuda")
    output = torch.full((num_tokens, num_heads, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    out_lse = torch.full((num_tokens, num_heads), float("nan"), device="cuda")
    return (problem.q, problem.kv_cache, problem.indices, output, out_lse, mid_out, mid_lse,
            problem.kwargs["topk_length"], problem.kwargs["attn_sink"])


def expected_op(num_tokens, num_heads, topk):
    return torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_select_kernel(
        num_tokens=num_tokens, num_heads=num_heads, topk=topk,
        num_sms=torch.cuda.get_device_properties(0).multi_processor_count)


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_sparse_mla_attention(dynamic):
    """torch.compile(fullgraph=True) of sparse_mla_attention on CUDA: the decode for few tokens
    (and for 8 heads, which the prefill cannot run), the prefill for many; the same bits as eager,
    on the caller's buffers, no copies, no graph break."""
    torch._dynamo.reset()
    compiled = torch.compile(attention, fullgraph=True, dynamic=dynamic)
    cases = [(1, 64, 2048), (2, 64, 700), (3, 8, 500), (1024, 16, 300)]
    assert [expected_op(*case) for case in cases] == ["decode", "decode", "decode", "prefill"]
    for seed, (num_tokens, num_heads, topk) in enumerate(cases):
        inputs = attention_inputs(num_tokens, num_heads, topk, seed)
        eager_inputs = tuple(x.clone() for x in inputs)
        (out, lse), codes = run_and_get_code(compiled, *inputs)
        eager_out, eager_lse = attention(*eager_inputs)
        assert out.data_ptr() == inputs[3].data_ptr() and lse.data_ptr() == inputs[4].data_ptr()
        assert torch.equal(out.view(torch.int16), eager_out.view(torch.int16)) and torch.equal(lse, eager_lse)
        code = "\n".join(codes)
        op = "cake.sparse_mla_decode" if expected_op(num_tokens, num_heads, topk) == "decode" else "cake.sparse_mla_prefill"
        assert op in code
        assert "copy_" not in code, code
    assert torch._dynamo.explain(attention)(*attention_inputs(2, 16, 300, 9)).graph_break_count == 0


@pytest.mark.parametrize("num_tokens,num_heads,topk", [(1, 64, 700), (2, 8, 3000), (5, 24, 1100), (1024, 32, 200)])
def test_attention_runs_the_selected_op(num_tokens, num_heads, topk):
    inputs = attention_inputs(num_tokens, num_heads, topk, seed=num_tokens)
    problem_args = inputs[:3]
    result = torch_ops.sparse_mla_attention(*problem_args, inputs[3], inputs[4], 0.05, topk_length=inputs[7],
                                            attn_sink=inputs[8], mid_out=inputs[5], mid_lse=inputs[6])
    assert result["op"] == expected_op(num_tokens, num_heads, topk)
    reference = sparse_mla_prefill_reference(*problem_args, 0.05, topk_length=inputs[7], attn_sink=inputs[8])
    assert_matches_reference(inputs[3], inputs[4], *reference)


def test_misaligned_scratch_is_rejected():
    problem = make_problem(num_tokens=2, num_heads=16, topk=300, main=CacheSpec(8, 64), device="cuda", seed=5)
    storage = torch.zeros(5 * 2 * 16 * 512 + 1, device="cuda")
    mid_out = storage[1:].view(5, 2, 16, 512)
    mid_lse = torch.zeros(5, 2, 16, device="cuda")
    output = torch.empty(2, 16, 512, dtype=torch.bfloat16, device="cuda")
    out_lse = torch.empty(2, 16, device="cuda")
    with pytest.raises(ValueError, match="mid_out: expected a 16-byte aligned data pointer"):
        torch_ops.sparse_mla_decode(problem.q, problem.kv_cache, problem.indices, output, out_lse, problem.sm_scale,
                                    mid_out=mid_out, mid_lse=mid_lse, num_splits=5)


@pytest.mark.parametrize("num_heads,head_tiles", [(64, 4), (128, 4), (16, 1), (64, 2)])
def test_planned_splits_on_the_device_kernels(num_heads, head_tiles):
    """Where the device runs the splits on the Hopper kernels, the planner gives each split two
    chunks at least (one-chunk splits would fall back to the slower portable body); under the
    portable override (and on GPUs without the Hopper kernels) it splits down to one chunk. The op
    runs the plan the planner describes, and its splits run the kernel the plan is for."""
    if head_tiles not in runnable_head_tiles(num_heads):
        pytest.skip("this GPU's shared memory does not run the head tile")
    props = torch.cuda.get_device_properties(0)
    problem = make_problem(num_tokens=2, num_heads=num_heads, topk=1024, main=CacheSpec(40, 64, "HND", 16),
                           device="cuda", seed=21, lengths="random", sink=1.0)

    def split_kernel(num_splits, chunks_per_block):
        return torch_ops._C.decode_split_kernel_for(props.major, props.shared_memory_per_block_optin, num_heads,
                                                    head_tiles, num_splits, chunks_per_block)

    for kernel in (None, "portable"):
        with torch_ops.prefill_kernel_override(kernel=kernel):
            # Asked under the override the op runs with (the environment's is cleared here).
            min_chunks = 2 if split_kernel(2, 2) != "portable" else 1
            expected = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_splits(
                num_tokens=2, num_heads=num_heads, topk=1024, num_sms=props.multi_processor_count,
                head_tiles=head_tiles, min_chunks_per_split=min_chunks)
            _, _, plan, _, _ = check_decode(problem, head_tiles=head_tiles)
            assert (plan["num_splits"], plan["chunks_per_block"]) == expected
            ran = split_kernel(plan["num_splits"], plan["chunks_per_block"])
        if kernel == "portable":
            assert min_chunks == 1 and ran == "portable"
        elif min_chunks == 2:
            assert plan["chunks_per_block"] >= 2 and ran != "portable"


@pytest.mark.parametrize("num_heads,head_tiles", [(64, 4), (128, 4), (16, 1), (24, 2), (64, 2), (64, 1), (32, 1),
                                                  (96, 1)])
def test_items_of_more_than_16_chunks_on_every_kernel(num_heads, head_tiles):
    """A work item holds up to 32 chunks (kMaxChunksPerSplit) on every kernel that runs a decode:
    2048 candidates in one split (the 64-head kernel's whole-list instance for 64 heads per item,
    else the small-heads kernels as the prefill runs them), 4100 + 96 in three splits of 22 or 23
    chunks and 4096 in two of 32 (the 64-head kernel's split items, or the small-heads kernel's
    split form), and all of them on the portable body under the override "portable"; against the
    reference, every used split of the scratch too."""
    if head_tiles not in runnable_head_tiles(num_heads):
        pytest.skip("this GPU's shared memory does not run the head tile")
    props = torch.cuda.get_device_properties(0)
    smem = props.shared_memory_per_block_optin
    whole = list_problem("2048", num_heads, seed=40 + num_heads)
    split = list_problem("4100+96", num_heads, seed=41 + num_heads)
    wide = make_problem(num_tokens=3, num_heads=num_heads, topk=4096, main=CacheSpec(80, 64, "NHD", 32), device="cuda",
                        seed=42 + num_heads, lengths="random", sink=1.0, lse_scale=0.5, invalid_fraction=0.1)
    for problem in (whole, split, wide):  # token 0 fills every split
        problem.kwargs["topk_length"][0] = problem.indices.shape[-1]
        if "extra_topk_length" in problem.kwargs:
            problem.kwargs["extra_topk_length"][0] = problem.kwargs["extra_indices"].shape[-1]
    for kernel in (None, "portable"):
        with torch_ops.prefill_kernel_override(kernel=kernel):
            runs_hopper = torch_ops._C.prefill_kernel_for(props.major, smem, 64, 4) == "hopper"
            for problem, num_splits, most_chunks in ((whole, 1, 32), (split, 3, 23), (wide, 2, 32)):
                _, _, plan, _, _ = check_decode(problem, num_splits, 16, head_tiles)
                assert plan["chunks_per_block"] == most_chunks
                ran = torch_ops._C.decode_split_kernel_for(props.major, smem, num_heads, head_tiles, num_splits,
                                                           most_chunks)
                if kernel == "portable" or not runs_hopper:
                    assert ran == "portable"
                elif num_heads % 64 == 0 and head_tiles == 4:
                    assert ran == "hopper"
                else:
                    assert ran == "hopper_small"


def decode_call(q, kv_cache, indices, output, out_lse, mid_out, mid_lse, topk_length, attn_sink):
    torch_ops.sparse_mla_decode(q, kv_cache, indices, output, out_lse, 0.05, topk_length=topk_length,
                                attn_sink=attn_sink, mid_out=mid_out, mid_lse=mid_lse)
    return output, out_lse


def test_compiled_decode_follows_the_kernel_override():
    """Under torch.compile the decode's plan is read off the planner's steps; the kernel override
    decides whether the splits run the Hopper kernels (two chunks a split at least) or the portable
    body (one chunk), so changing it must change the compiled call's plan as it changes the eager
    one: the same bits, the same splits of the NaN-filled scratch written (T = 2, H = 64, 1024
    candidates: 8 splits on Hopper, 16 under the portable override, on an H200)."""
    problem = make_problem(num_tokens=2, num_heads=64, topk=1024, main=CacheSpec(40, 64, "HND", 16), device="cuda",
                           seed=22, lengths="random", sink=1.0)
    torch._dynamo.reset()
    compiled = torch.compile(decode_call, fullgraph=True)

    def inputs():
        mid_out, mid_lse = allocate(2, 64, 1024, device="cuda")
        mid_out.fill_(float("nan")), mid_lse.fill_(float("nan"))
        output = torch.full((2, 64, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
        out_lse = torch.full((2, 64), float("nan"), device="cuda")
        return (problem.q, problem.kv_cache, problem.indices, output, out_lse, mid_out, mid_lse,
                problem.kwargs["topk_length"], problem.kwargs["attn_sink"])

    written = {}
    for kernel in (None, "portable", None):
        with torch_ops.prefill_kernel_override(kernel=kernel):
            compiled_inputs, eager_inputs = inputs(), inputs()
            out, lse = compiled(*compiled_inputs)
            eager_out, eager_lse = decode_call(*eager_inputs)
            props = torch.cuda.get_device_properties(0)
            hopper_splits = torch_ops._C.decode_split_kernel_for(props.major, props.shared_memory_per_block_optin,
                                                                 64, 4, 2, 2) != "portable"
        assert torch.equal(out.view(torch.int16), eager_out.view(torch.int16)) and torch.equal(lse, eager_lse), kernel
        for scratch, eager_scratch in zip(compiled_inputs[5:7], eager_inputs[5:7]):
            torch.testing.assert_close(scratch, eager_scratch, rtol=0, atol=0, equal_nan=True)
        written[kernel] = int((~torch.isnan(compiled_inputs[6][:, 0, 0])).sum())  # splits of the plan
    if hopper_splits:
        assert written[None] < written["portable"], written
