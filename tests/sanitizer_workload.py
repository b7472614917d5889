"""The workload that benchmarks/run_sanitizer.sh runs under compute-sanitizer: every head tile,
partial chunks, both caches with page sizes 1 and 2, padded strides, every view, lengths,
negative and out-of-range indices, sinks, empty rows, and a cache that ends exactly at its last
valid page; plus both writers. On Hopper every call runs on its Hopper kernel (the 64-head one
for 4 tiles, the small-heads one for the rest) and again on the portable kernel, and more
small-heads calls run 16, 32, 48 (the 64-head kernel with a padded head block) and 96 heads. Then the
decode (split kernel and merge): 8 heads (a padded head tile), 24 heads in two-tile blocks,
every head tile (on Hopper: 64 heads per item on the 64-head kernel's splits, the other plans
that split into two chunks or more on the small-heads kernel's split form, 8 and 24 heads in
padded units, 16 heads with more split units than SMs), one split and several, splits past a
token's length or holding only masked slots, more than 1024 candidates over both caches (one
split of 18 and 32 chunks on the prefill's kernels at 16 and 80 heads among them), one-chunk
splits on the Hopper kernel (override "hopper"). Output views of 4- and 16-byte alignment on
both Hopper kernels (O stored from registers, 4 or 16 bytes a lane). Small shapes, so the
sanitizer finishes in minutes."""
import torch

import torch_ops
from helpers import CacheSpec, assert_matches_reference, make_problem
from test_decode import check_decode


def main():
    torch.manual_seed(0)
    cases = [
        dict(num_tokens=3, num_heads=128, topk=100, main=CacheSpec(3, 64), extra=CacheSpec(7, 1), extra_topk=33,
             lengths="random", extra_lengths="random", sink=1.0, invalid_fraction=0.3),
        dict(num_tokens=2, num_heads=64, topk=65, main=CacheSpec(5, 2, "NHD", 16), extra=CacheSpec(4, 48, "3d", 48),
             extra_topk=1, sink=20.0, invalid_fraction=0.5),
        dict(num_tokens=2, num_heads=48, topk=1, main=CacheSpec(1, 1)),
        dict(num_tokens=2, num_heads=32, topk=64, main=CacheSpec(2, 64), invalid_fraction=1.0, sink=1.0),
        dict(num_tokens=1, num_heads=16, topk=1024, main=CacheSpec(9, 256, "HND", 1024), lengths="random"),
        # More work items than SMs: on Hopper each persistent CTA walks several items, empty ones
        # (zero lengths) included, so the pipeline crosses item boundaries.
        dict(num_tokens=70, num_heads=128, topk=70, main=CacheSpec(6, 64), extra=CacheSpec(3, 2), extra_topk=20,
             lengths="random", extra_lengths="random", sink=1.0, only_head_tiles=4),
    ]
    for i, case in enumerate(cases):
        only = case.pop("only_head_tiles", None)
        problem = make_problem(device="cuda", seed=i, **case)
        tiles = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill_head_tiles(case["num_heads"])
        for head_tiles in tiles if only is None else (only,):
            output, out_lse, plan = problem.run(head_tiles)
            torch.cuda.synchronize()
            assert_matches_reference(output, out_lse, *problem.reference())
            if plan["kernel"] in ("hopper", "hopper_small"):
                # The portable kernel too, which a Hopper GPU otherwise never runs for this shape.
                with torch_ops.prefill_kernel_override(kernel="portable"):
                    output, out_lse, plan = problem.run(head_tiles)
                torch.cuda.synchronize()
                assert plan["kernel"] == "portable"
                assert_matches_reference(output, out_lse, *problem.reference())
    # The small-heads calls (the default on Hopper for these head counts): 16 and 32 heads a unit,
    # 48 and 112 on the 64-head kernel with the last head block padded (the last token's padding
    # rows end where q, the output and the sink end), 96 as heads 0..63 on the 64-head kernel and
    # a unit of 32, more units than SMs with empty ones among them.
    small_cases = [
        dict(num_tokens=3, num_heads=16, topk=100, main=CacheSpec(3, 64), extra=CacheSpec(7, 1), extra_topk=33,
             lengths="random", extra_lengths="random", sink=1.0, invalid_fraction=0.3),
        dict(num_tokens=2, num_heads=32, topk=65, main=CacheSpec(5, 2, "NHD", 16), extra=CacheSpec(4, 48, "3d", 48),
             extra_topk=1, sink=20.0, invalid_fraction=0.5),
        dict(num_tokens=2, num_heads=48, topk=1024, main=CacheSpec(9, 256, "HND", 1024), lengths="random"),
        dict(num_tokens=2, num_heads=48, topk=64, main=CacheSpec(2, 64), invalid_fraction=1.0, sink=1.0),
        dict(num_tokens=3, num_heads=112, topk=130, main=CacheSpec(4, 64), extra=CacheSpec(3, 2), extra_topk=9,
             lengths="random", sink=1.0),
        dict(num_tokens=150, num_heads=96, topk=70, main=CacheSpec(6, 64), extra=CacheSpec(3, 2), extra_topk=20,
             lengths="random", extra_lengths="random", sink=1.0),
    ]
    props = torch.cuda.get_device_properties(0)
    runs_small = torch_ops._C.device_runs_hopper_small_prefill(props.major, props.shared_memory_per_block_optin)
    # Every sm_90 part has the shared memory for it: a Hopper GPU that skipped it would be a bug.
    assert runs_small == torch_ops._C.device_runs_hopper_prefill(props.major, props.shared_memory_per_block_optin)
    for i, case in enumerate(small_cases if runs_small else []):
        problem = make_problem(device="cuda", seed=200 + i, **case)
        output, out_lse, plan = problem.run()
        torch.cuda.synchronize()
        assert plan["kernel"] == "hopper_small"
        assert_matches_reference(output, out_lse, *problem.reference())
    # Output views at an offset of 2 elements (4-byte aligned: the 64-head kernel stores O 4 bytes a
    # lane) and 8 (16-byte aligned: 16 bytes a lane), with NaN guards around the
    # view, on the 64-head kernel (64 heads) and the small-heads one (32, and 96: its launch moved
    # to head 64).
    for i, (num_heads, offset) in enumerate([(64, 2), (64, 8), (32, 2), (32, 8), (96, 2)]):
        problem = make_problem(num_tokens=3, num_heads=num_heads, topk=130, main=CacheSpec(4, 64), device="cuda",
                               seed=300 + i, lengths="random", sink=1.0)
        size = 3 * num_heads * 512
        storage = torch.full((size + offset + 16,), float("nan"), dtype=torch.bfloat16, device="cuda")
        output = storage[offset:offset + size].view(3, num_heads, 512)
        out_lse = torch.full((3, num_heads), float("nan"), device="cuda")
        torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(problem.q, problem.kv_cache, problem.indices, output, out_lse,
                                                            problem.sm_scale, **problem.kwargs)
        torch.cuda.synchronize()
        assert_matches_reference(output, out_lse, *problem.reference())
        assert torch.isnan(storage[:offset]).all() and torch.isnan(storage[offset + size:]).all(), "a guard was written"
    decode_cases = [
        # (problem, [(num_splits, head_tiles, max_splits), ...]). On Hopper the plans of 8, 24 and
        # 128 heads at head tile 2 (32-head units) and of 64 and 128 heads at head tile 1 (16-head
        # units) that split into two chunks or more run the small-heads kernel's split form (H = 8,
        # 24: its padded units), and so do the one-split plans of 24 and 56 heads (its one-split
        # form, which writes the output); the rest the portable body or the 64-head kernel.
        (dict(num_tokens=3, num_heads=8, topk=1100, main=CacheSpec(20, 64, "NHD", 16), extra=CacheSpec(9, 1),
              extra_topk=70, lengths="random", extra_lengths="random", sink=1.0, invalid_fraction=0.3),
         [(None, None, 16), (2, 1, 16), (19, 1, 19)]),
        (dict(num_tokens=2, num_heads=24, topk=300, main=CacheSpec(3, 64), extra=CacheSpec(4, 2, "3d", 48),
              extra_topk=33, sink=20.0, invalid_fraction=0.5),
         [(1, 2, 16), (3, 2, 16), (6, 1, 16)]),
        (dict(num_tokens=2, num_heads=128, topk=200, main=CacheSpec(5, 64), lengths="random", sink=1.0),
         [(1, 4, 16), (4, 4, 16), (2, 2, 16), (2, 1, 16)]),
        (dict(num_tokens=1, num_heads=56, topk=64, main=CacheSpec(1, 64), invalid_fraction=1.0), [(1, 4, 16)]),
        # One split of more than 16 chunks (32 and 18 over both caches) at head counts the prefill's
        # launches take: the small-heads kernel's whole-list units at 16 heads, the 64-head kernel
        # and a 16-head unit at 80, over lists longer than the prefill accepts.
        (dict(num_tokens=2, num_heads=16, topk=2048, main=CacheSpec(40, 64), sink=1.0, invalid_fraction=0.1),
         [(1, 1, 16)]),
        (dict(num_tokens=2, num_heads=80, topk=1000, main=CacheSpec(20, 64), extra=CacheSpec(6, 1), extra_topk=100,
              sink=1.0), [(1, 1, 16)]),
        # More split items than SMs (40 tokens x 2 head blocks x 4 splits of two chunks): the
        # persistent CTAs of the 64-head kernel walk several split items each.
        (dict(num_tokens=40, num_heads=128, topk=512, main=CacheSpec(40, 64), lengths="random", sink=1.0),
         [(4, 4, 16)]),
        # More split units than SMs on the small-heads kernel's split form (40 tokens x 16 heads x 4
        # splits of two chunks), some splits empty (random lengths).
        (dict(num_tokens=40, num_heads=16, topk=512, main=CacheSpec(40, 64), lengths="random", sink=1.0),
         [(4, 1, 16)]),
        # 64 heads per item: the Hopper kernel's splits on Hopper (13 chunks: splits of one to three
        # chunks; 13 splits, one chunk each, run the portable body).
        (dict(num_tokens=3, num_heads=64, topk=700, main=CacheSpec(12, 64, "NHD", 16), extra=CacheSpec(5, 2),
              extra_topk=100, lengths="random", extra_lengths="random", sink=1.0, invalid_fraction=0.2),
         [(1, 4, 16), (5, 4, 16), (7, 4, 16), (13, 4, 16), (5, 1, 16)]),
    ]
    for i, (case, plans) in enumerate(decode_cases):
        problem = make_problem(device="cuda", seed=100 + i, **case)
        if "topk_length" in problem.kwargs:
            problem.kwargs["topk_length"][0] = 0  # every split of token 0 is empty
        for num_splits, head_tiles, max_splits in plans:
            check_decode(problem, num_splits, max_splits, head_tiles)
            torch.cuda.synchronize()
    # One-chunk splits on the 64-head kernel (the override "hopper"; the default runs them on the
    # portable body).
    problem = make_problem(device="cuda", seed=150, **decode_cases[-1][0])
    with torch_ops.prefill_kernel_override(kernel="hopper" if runs_small else None):
        check_decode(problem, 13, 16, 4)
        torch.cuda.synchronize()
    # Writers: pack into an exact-size cache, append with invalid and repeated slots.
    latent = torch.randn(3, 5, 512, device="cuda").to(torch.bfloat16)
    cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent)
    slots = torch.tensor([0, 14, -1, 15, 14, 3], device="cuda")
    torch_ops.nvfp4_quantize_append_sparse_mla_cache(torch.randn(6, 512, device="cuda").to(torch.bfloat16), slots, cache)
    torch.cuda.synchronize()
    print("sanitizer workload done")


if __name__ == "__main__":
    main()
