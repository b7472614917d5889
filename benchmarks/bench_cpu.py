"""Time the CPU prefill kernel (this library's aim for it: T=256, H=64, topk=512 in about 1 s on
2 cores; docs/benchmarks.md, "CPU kernel", has the recorded runs).

    python benchmarks/bench_cpu.py [--tokens 256] [--heads 64] [--topk 512] [--repeats 3]
"""
import argparse
import math
import statistics
import time

import torch

import torch_ops
from bench_prefill import attention_flops


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--heads", type=int, default=64)
    parser.add_argument("--topk", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    pool_pages = 1024
    cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(torch.randn(pool_pages, 64, 512, generator=g).to(torch.bfloat16))
    q = torch.randn(args.tokens, args.heads, 512, generator=g).to(torch.bfloat16)
    indices = torch.stack([torch.randperm(pool_pages * 64, generator=g)[: args.topk] for _ in range(args.tokens)]).int()
    output = torch.empty(args.tokens, args.heads, 512, dtype=torch.bfloat16)
    out_lse = torch.empty(args.tokens, args.heads)
    sink = torch.randn(args.heads, generator=g)
    run = lambda: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(  # noqa: E731
        q, cache, indices, output, out_lse, 1 / math.sqrt(512), attn_sink=sink)
    run()
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    flops = attention_flops(args.tokens, args.heads, args.topk)
    print(f"CPU, {torch.get_num_threads()} threads: T={args.tokens} H={args.heads} topk={args.topk}: "
          f"{seconds:.3f} s median of {args.repeats} ({flops / seconds / 1e9:.1f} GFLOP/s)")


if __name__ == "__main__":
    main()
