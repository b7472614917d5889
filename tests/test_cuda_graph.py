"""CUDA-only behaviour: graph capture and replay with in-place input changes, no device
allocation during the call, torch.compile on CUDA (fullgraph and reduce-overhead), writers
byte-identical to the CPU writers, a cache that ends exactly at its last page."""
import pytest
import torch

import torch_ops
from helpers import (HAS_CUDA, CacheSpec, assert_matches_reference, assert_replays_follow_inplace_changes, capture_graph,
                     make_problem, random_indices, random_latent)

pytestmark = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")


def fresh_problem(seed):
    return make_problem(num_tokens=40, num_heads=64, topk=300, main=CacheSpec(20, 64, "HND", 32), device="cuda",
                        seed=seed, extra=CacheSpec(30, 2), extra_topk=100, lengths="random", extra_lengths="random",
                        sink=1.0, lse_scale=0.5)


def test_graph_capture_replay_with_inplace_changes():
    problem = fresh_problem(1)
    output = torch.full((40, 64, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    out_lse = torch.full((40, 64), float("nan"), device="cuda")

    def call():
        torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(problem.q, problem.kv_cache, problem.indices, output, out_lse,
                                                           problem.sm_scale, **problem.kwargs)

    assert_replays_follow_inplace_changes(capture_graph(call), problem, fresh_problem, output, out_lse)


def test_no_device_allocation_during_call():
    problem = fresh_problem(4)
    output = torch.empty(40, 64, 512, dtype=torch.bfloat16, device="cuda")
    out_lse = torch.empty(40, 64, device="cuda")
    problem.run()  # warm-up
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_stats()
    torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(problem.q, problem.kv_cache, problem.indices, output, out_lse,
                                                       problem.sm_scale, **problem.kwargs)
    torch.cuda.synchronize()
    after = torch.cuda.memory_stats()
    assert after["allocation.all.allocated"] == before["allocation.all.allocated"]
    assert after["allocated_bytes.all.peak"] == before["allocated_bytes.all.current"]


def test_compile_reduce_overhead_graph_owned_buffers():
    problem = fresh_problem(5)

    def step(q, kv_cache, indices, topk_length, sink):
        output = torch.empty(q.shape[0], q.shape[1], 512, dtype=torch.bfloat16, device=q.device)
        out_lse = torch.empty(q.shape[0], q.shape[1], dtype=torch.float32, device=q.device)
        torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(q, kv_cache, indices, output, out_lse, 0.05,
                                                           topk_length=topk_length, attn_sink=sink)
        return output * 1, out_lse * 1

    torch._dynamo.reset()
    from torch._dynamo.utils import counters
    counters.clear()
    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    args = (problem.q, problem.kv_cache, problem.indices, problem.kwargs["topk_length"], problem.kwargs["attn_sink"])
    eager = step(*args)
    for _ in range(3):
        got = compiled(*args)
    torch.cuda.synchronize()
    assert torch.equal(got[0].view(torch.int16), eager[0].view(torch.int16)) and torch.equal(got[1], eager[1])
    assert not counters["inductor"].get("cudagraph_skips"), dict(counters["inductor"])


def test_writers_match_cpu_bytes():
    g = torch.Generator().manual_seed(12)
    latent = random_latent(7 * 48, g).view(7, 48, 512)
    latent[0, 0, 3] = float("nan")
    latent[1, 2, 5] = float("inf")
    gpu = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent.cuda(), kv_layout="NHD")
    cpu = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent, kv_layout="NHD")
    assert torch.equal(gpu.cpu(), cpu)
    rows = random_latent(500, g)
    slots = torch.randint(-20, 7 * 48 + 20, (500,), generator=g)
    torch_ops.nvfp4_quantize_append_sparse_mla_cache(rows.cuda(), slots.cuda(), gpu)
    torch_ops.nvfp4_quantize_append_sparse_mla_cache(rows, slots, cpu)
    assert torch.equal(gpu.cpu(), cpu)


def test_cache_ending_at_last_page_and_out_of_range_indices():
    """The cache allocation ends exactly at its last valid page; indices just past the end are masked."""
    g = torch.Generator().manual_seed(13)
    pages, page_size = 5, 48
    latent = random_latent(pages * page_size, g).view(pages, page_size, 512).cuda()
    cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent)  # exact-size allocation
    problem = make_problem(num_tokens=9, num_heads=32, topk=100, main=CacheSpec(1, 1), device="cuda", seed=13)
    problem.kv_cache = cache
    idx = random_indices(9, 100, pages * page_size, g, invalid_fraction=0.3)
    idx[:, :4] = torch.tensor([pages * page_size - 1, pages * page_size, -1, pages * page_size + 1])
    problem.indices = idx.cuda()
    output, out_lse, _ = problem.run()
    ref_out, ref_lse = problem.reference()
    assert_matches_reference(output, out_lse, ref_out, ref_lse)


@pytest.mark.parametrize("head_tiles,stages,k_tiles", [(1, 2, 1), (2, 2, 1), (4, 3, 2), (4, 2, 1)])
def test_every_compiled_instance(head_tiles, stages, k_tiles):
    """Each kernel instance, the A100-sized fallback {4, 2, 1} included, forced through the
    kernel override's variant."""
    problem = make_problem(num_tokens=6, num_heads=128, topk=150, main=CacheSpec(9, 48, "NHD", 16), device="cuda",
                           seed=stages * 10 + k_tiles, extra=CacheSpec(20, 2), extra_topk=40, lengths="random",
                           sink=1.0)
    with torch_ops.prefill_kernel_override(variant=(stages, k_tiles)):
        output, out_lse, plan = problem.run(head_tiles)
    assert plan["head_tiles"] == head_tiles and plan["kernel"] == "portable"
    assert_matches_reference(output, out_lse, *problem.reference())
