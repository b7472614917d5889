"""The prefill's (or the decode's) error against the float64 reference, per output row (a token's
head), on fresh random inputs: the median, 99th percentile and worst of the rows' relative L2 errors, and the
worst LSE error, for each shape and softmax temperature.

    python benchmarks/accuracy.py [--tokens 64] [--heads 64 128] [--topk 512 1024] \
        [--scales 1 4 8] [--device cuda|cpu] [--kernel hopper|portable|hopper_small] [--json acc.json]
    python benchmarks/accuracy.py --op decode --tokens 1 8 --heads 16 64 --topk 2048   # the split-K decode

Inputs: a pool of --pool tokens of bf16 latents (normal values, each 16-value group times its own
e^N(0,1) magnitude, so the block scales matter) in pages of 64, packed by the library's writer;
each token's topk distinct pool rows at random; random bf16 q; a sink. sm_scale is 1/sqrt(512)
times each --scales entry: larger ones give peakier softmaxes (at 8, with these inputs, most rows
have one candidate carrying nearly all the weight, so their error is that row's alone). Outputs are NaN before the call; a NaN left where the reference is finite counts as
unwritten, and the script exits 1 if any is, or if any row's error exceeds --max-error (the
contract's bound, 1e-2, by default). `--op decode` runs the decode at its planned split count
(scratch from the library's allocator; `--kernel` sets the prefill's override only). The reference (torch_ops.reference, float64 on the CPU) costs
about 4 * T * H * topk * 512 double-precision operations a shape.
"""
import argparse
import contextlib
import json
import math
import os
import shlex
import sys

import torch

import torch_ops
from torch_ops.reference import sparse_mla_prefill_reference

from bench_prefill import git_commit

PAGE_SIZE = 64


def draw_problem(num_tokens, num_heads, topk, pool, generator, device):
    """q, the NVFP4 cache, indices and sink, drawn on the CPU from `generator` (the same inputs on
    every device)."""
    base = torch.randn(pool, 512, generator=generator)
    group_scale = torch.exp(torch.randn(pool, 32, generator=generator)).repeat_interleave(16, dim=1)
    latent = (base * group_scale).to(torch.bfloat16).view(pool // PAGE_SIZE, PAGE_SIZE, 512)
    cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent.to(device), kv_layout="HND")
    indices = torch.rand(num_tokens, pool, generator=generator).topk(topk, dim=1).indices.to(torch.int32)
    q = torch.randn(num_tokens, num_heads, 512, generator=generator).to(torch.bfloat16)
    sink = torch.randn(num_heads, generator=generator)
    return q.to(device), cache, indices.to(device), sink.to(device)


def row_errors(output, out_lse, ref_out, ref_lse):
    """(relative L2 error of each row where the reference row is non-zero, LSE errors where the
    reference LSE is finite, number of rows left unwritten or NaN against a finite reference)."""
    out = output.detach().cpu().to(torch.float64).flatten(0, 1)
    lse = out_lse.detach().cpu().to(torch.float64).flatten()
    ref = ref_out.flatten(0, 1)
    ref_lse = ref_lse.flatten()
    finite = torch.isfinite(ref_lse)
    bad = (torch.isnan(out).any(dim=1) & torch.isfinite(ref).all(dim=1)) | (torch.isnan(lse) & finite)
    ref_norm = ref.norm(dim=1)
    nonzero = ref_norm > 0
    rel = ((out - ref).norm(dim=1) / torch.where(nonzero, ref_norm, torch.ones_like(ref_norm)))[nonzero & ~bad]
    lse_err = (lse - ref_lse).abs()[finite & ~bad]
    return rel, lse_err, int(bad.sum())


def measure(num_tokens, num_heads, topk, scale, args, generator):
    q, cache, indices, sink = draw_problem(num_tokens, num_heads, topk, args.pool, generator, args.device)
    sm_scale = scale / math.sqrt(512)
    output = torch.full((num_tokens, num_heads, 512), float("nan"), dtype=torch.bfloat16, device=args.device)
    out_lse = torch.full((num_tokens, num_heads), float("nan"), dtype=torch.float32, device=args.device)
    if args.op == "decode":
        mid_out, mid_lse = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch(
            num_tokens, num_heads, topk, device=args.device)
        plan = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_decode(q, cache, indices, output, out_lse, sm_scale,
                                                                 attn_sink=sink, mid_out=mid_out, mid_lse=mid_lse)
        kernel = f"decode, {plan['num_splits']} splits"
    else:
        plan = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(q, cache, indices, output, out_lse, sm_scale,
                                                                  attn_sink=sink)
        kernel = plan.get("kernel")
    ref_out, ref_lse = sparse_mla_prefill_reference(q, cache, indices, sm_scale, attn_sink=sink)
    rel, lse_err, unwritten = row_errors(output, out_lse, ref_out, ref_lse)
    return dict(op=args.op, T=num_tokens, H=num_heads, topk=topk, scale=scale, kernel=kernel,
                plan={key: value for key, value in plan.items()}, rows=int(rel.numel()), unwritten=unwritten,
                median=rel.median().item() if rel.numel() else 0.0,
                p99=rel.quantile(0.99).item() if rel.numel() else 0.0,
                max=rel.max().item() if rel.numel() else 0.0,
                lse_max=lse_err.max().item() if lse_err.numel() else 0.0)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--op", choices=["prefill", "decode"], default="prefill")
    parser.add_argument("--tokens", type=int, nargs="+", default=[64])
    parser.add_argument("--heads", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--topk", type=int, nargs="+", default=[512, 1024])
    parser.add_argument("--scales", type=float, nargs="+", default=[1.0, 4.0, 8.0],
                        help="sm_scale as multiples of 1/sqrt(512)")
    parser.add_argument("--pool", type=int, default=8192, help="pool tokens (a multiple of 64)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--kernel", choices=["hopper", "portable", "hopper_small"], default=None,
                        help="kernel override for the run (CUDA)")
    parser.add_argument("--max-error", type=float, default=1e-2, help="fail above this row error")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.pool < 64 or args.pool % PAGE_SIZE:
        parser.error(f"--pool: a positive multiple of {PAGE_SIZE}, got {args.pool}")
    if min(args.tokens + args.heads + args.topk) < 1:
        parser.error("--tokens, --heads, --topk: positive")
    if max(args.topk) > args.pool:
        parser.error(f"--topk: at most --pool ({args.pool}) distinct rows a token")

    generator = torch.Generator().manual_seed(args.seed)
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"device {device_name}, commit {git_commit()}, pool {args.pool}, seed {args.seed}")
    print("| T | H | topk | scale | kernel | rows | median | p99 | max | LSE max | unwritten |")
    print("|" + "---|" * 11)
    rows = []
    override = torch_ops.prefill_kernel_override(args.kernel) if args.kernel else contextlib.nullcontext()
    with override:
        for num_tokens in args.tokens:
            for num_heads in args.heads:
                for topk in args.topk:
                    for scale in args.scales:
                        row = measure(num_tokens, num_heads, topk, scale, args, generator)
                        rows.append(row)
                        print(f"| {num_tokens} | {num_heads} | {topk} | {scale:g} | {row['kernel']} | {row['rows']} | "
                              f"{row['median']:.2e} | {row['p99']:.2e} | {row['max']:.2e} | {row['lse_max']:.2e} | "
                              f"{row['unwritten']} |", flush=True)
    if args.json:
        meta = dict(op=args.op, device=device_name, commit=git_commit(), torch=torch.__version__, pool=args.pool, seed=args.seed,
                    command=" ".join(shlex.quote(w) for w in [os.path.basename(sys.executable)] + sys.argv),
                    environment={k: v for k, v in sorted(os.environ.items()) if k.startswith("CAKE_")},
                    torch_ops_file=torch_ops.__file__)
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)
    failed = [r for r in rows if r["unwritten"] or r["max"] > args.max_error]
    if failed:
        print(f"FAILED: {len(failed)} shape(s) with unwritten rows or a row error above {args.max_error:g}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
