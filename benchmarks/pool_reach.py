"""How much the prefill's time depends on where its gathered rows come from: the same launch with
each token's candidates drawn (unique, random) from the first P tokens of the benchmark's pool
instead of all 65536, so that a smaller P leaves more of the rows in L2 between their uses.

    python benchmarks/pool_reach.py [--tokens 4096] [--heads 64 128] [--topk 128 512 1024] \
        [--pools 65536 16384 4096 1024] [--json pool_reach.json]

Method and inputs as `bench_prefill.py` (its `prepare_run`: the same pool, q, sink and timing, the
L2 flushed before every timed launch, the bf16 matmul measured in the same run); only the range
the indices are drawn from changes. P = 65536 is `bench_prefill.py`'s row. A pool of P tokens
holds P * 384 bytes of cache rows (65536: 24 MiB; 4096: 1.5 MiB).
"""
import argparse
import datetime
import json
import math
import sys

import torch

import torch_ops
from bench_prefill import POOL_TOKENS, attention_flops, git_commit, prepare_run, random_indices, timed_median


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096])
    parser.add_argument("--heads", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--topk", type=int, nargs="+", default=[128, 512, 1024])
    parser.add_argument("--pools", type=int, nargs="+", default=[POOL_TOKENS, 16384, 4096, 1024])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    for pool in args.pools:
        if not 0 < pool <= POOL_TOKENS:
            raise SystemExit(f"--pools: {pool} is not in 1..{POOL_TOKENS}")

    flush, ceiling, device_name, _, cache = prepare_run()
    sm_scale = 1 / math.sqrt(512)
    commit = git_commit()
    print(f"device {device_name}, commit {commit}, bf16 matmul ceiling {ceiling / 1e12:.0f} TFLOP/s")
    print("| T | H | topk | pool tokens | time us | of matmul | / pool 65536 |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for num_tokens in args.tokens:
        for num_heads in args.heads:
            q = torch.randn(num_tokens, num_heads, 512, device="cuda").to(torch.bfloat16)
            sink = torch.randn(num_heads, device="cuda")
            output = torch.empty(num_tokens, num_heads, 512, device="cuda", dtype=torch.bfloat16)
            out_lse = torch.empty(num_tokens, num_heads, device="cuda")
            for topk in args.topk:
                full = None
                for pool in args.pools:
                    if topk > pool:
                        continue
                    indices = random_indices(num_tokens, topk, pool)

                    def run():
                        torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(
                            q, cache, indices, output, out_lse, sm_scale, attn_sink=sink)

                    seconds = timed_median(run, args.repeats, args.warmup, flush)
                    flops = attention_flops(num_tokens, num_heads, topk)
                    if pool == POOL_TOKENS:
                        full = seconds
                    row = dict(T=num_tokens, H=num_heads, topk=topk, pool_tokens=pool, us=seconds * 1e6,
                               of_matmul=flops / seconds / ceiling,
                               of_full_pool=(seconds / full) if full else None)
                    rows.append(row)
                    ratio = f"{row['of_full_pool']:.3f}" if full else "-"
                    print(f"| {num_tokens} | {num_heads} | {topk} | {pool} | {seconds * 1e6:.1f} | "
                          f"{row['of_matmul']:.3f} | {ratio} |", flush=True)
                    del indices
                    torch.cuda.empty_cache()
    if args.json:
        meta = dict(device=device_name, commit=commit, matmul_tflops=ceiling / 1e12, torch=torch.__version__,
                    date=datetime.date.today().isoformat(),
                    command="python3 benchmarks/pool_reach.py " + " ".join(sys.argv[1:]))
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
