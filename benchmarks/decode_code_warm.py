"""Whether a decode's time at small shapes is the kernels' code and small tensors arriving cold:
each shape timed (CUDA events around one decode call, median of 50 after 10 warm-ups, two passes)
with the L2 flushed first (`cold`, as bench_decode.py times), and with the L2 flushed and then one
call of the same shape on other random indices before the timed one (`codewarm`: the kernels'
instructions, q, the sink and the scratch back in L2 and whatever the SMs keep, the cache rows of
the timed call still cold). Both modes queue GPU work ahead of the timed call, so the host's
launch time stays outside the events.

    python3 benchmarks/decode_code_warm.py 8x16x1024 1x64x2048 [--json out.json]
"""
import argparse
import json
import math
import statistics

import torch

import torch_ops

POOL_TOKENS = 65536


def time_shape(cache, flush, num_tokens, num_heads, candidates, passes=2, repeats=50, warmup=10):
    """{mode: [median us of each pass]} for one T x H x candidates shape."""
    q = torch.randn(num_tokens, num_heads, 512, device="cuda").to(torch.bfloat16)
    indices = [torch.rand(num_tokens, POOL_TOKENS, device="cuda").topk(candidates, dim=1).indices.to(torch.int32)
               for _ in range(2)]
    sink = torch.randn(num_heads, device="cuda")
    output = torch.empty(num_tokens, num_heads, 512, device="cuda", dtype=torch.bfloat16)
    out_lse = torch.empty(num_tokens, num_heads, device="cuda")
    mid_out, mid_lse = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch(
        num_tokens, num_heads, candidates, device="cuda")

    def call(which):
        return torch_ops.sparse_mla_decode(q, cache, indices[which], output, out_lse, 1 / math.sqrt(512),
                                           attn_sink=sink, mid_out=mid_out, mid_lse=mid_lse)

    medians = {"cold": [], "codewarm": []}
    for _ in range(passes):
        for mode in medians:
            times = []
            for repeat in range(warmup + repeats):
                flush.random_()
                if mode == "codewarm":
                    call(1)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                call(0)
                end.record()
                torch.cuda.synchronize()
                if repeat >= warmup:
                    times.append(start.elapsed_time(end) * 1000)
            medians[mode].append(statistics.median(times))
    return medians


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shapes", nargs="+", metavar="TxHxCANDIDATES")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    shapes = []
    for shape in args.shapes:
        try:
            shapes.append(tuple(int(part) for part in shape.split("x")))
        except ValueError:
            parser.error(f"shape {shape!r}: expected TxHxCANDIDATES")
        if len(shapes[-1]) != 3:
            parser.error(f"shape {shape!r}: expected TxHxCANDIDATES")
    latent = torch.randn(POOL_TOKENS // 64, 64, 512, device="cuda").to(torch.bfloat16)
    cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    rows = []
    print("| T | H | candidates | cold us (passes) | codewarm us (passes) |\n|---|---|---|---|---|")
    for num_tokens, num_heads, candidates in shapes:
        medians = time_shape(cache, flush, num_tokens, num_heads, candidates)
        rows.append(dict(T=num_tokens, H=num_heads, candidates=candidates, **{f"{m}_us": v for m, v in medians.items()}))
        print(f"| {num_tokens} | {num_heads} | {candidates} | "
              + " | ".join(", ".join(f"{t:.1f}" for t in medians[m]) for m in ("cold", "codewarm")) + " |", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"meta": {"device": torch.cuda.get_device_name()}, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
