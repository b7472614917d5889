"""The prefill's (or the decode's) error against the float64 reference, per output row (a token's
head), on fresh random inputs: the median, 99th percentile and worst of the rows' relative L2
errors, and the worst LSE error, for each shape and softmax temperature.

    python benchmarks/accuracy.py [--tokens 64] [--heads 64 128] [--topk 512 1024] \
        [--scales 1 4 8] [--device cuda|cpu] [--kernel hopper|portable|hopper_small] [--json acc.json]
    python benchmarks/accuracy.py --op decode --tokens 1 8 --heads 16 64 --topk 2048   # the split-K decode

Inputs: a pool of --pool tokens of bf16 latents (normal values, each 16-value group times its own
e^N(0,1) magnitude, so the block scales matter) in pages of 64, packed by the library's writer;
each token's topk distinct pool rows at random; random bf16 q; a sink; drawn on the CPU from a
generator seeded by --seed and the row's shape and scale, so a row's inputs do not depend on the
other rows asked for. sm_scale is 1/sqrt(512) times each --scales entry: larger ones give peakier
softmaxes (at 8, with these inputs, most rows have one candidate carrying nearly all the weight,
so their error is that row's alone). `--op decode` runs the decode at its planned split count
(scratch from the library's allocator); `--kernel` sets the kernel override, which both ops follow.

Outputs are NaN before the call. The errors are the contract's (docs/contract.md section 11):
each row's relative L2 error (absolute where the reference row is below 1e-30) and
|lse - ref| / max(1, |ref|). The script exits 1 if a row is NaN (unwritten, or written as NaN)
where the reference is finite, if the LSE is -inf anywhere the reference's is not or the other way
round, or if an error exceeds --max-error (1e-2) or --max-lse-error (1e-3); its last line says
whether it passed, with the worst errors. The reference (torch_ops.reference, float64 on the CPU)
costs about 4 * T * H * topk * 512 double-precision operations a shape.
"""
import argparse
import contextlib
import json
import math
import os
import shlex
import sys
import zlib

from pathlib import Path

import torch

import torch_ops
from torch_ops.reference import sparse_mla_prefill_reference

from bench_prefill import PAGE_SIZE, git_commit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from helpers import random_latent  # noqa: E402  the tests' latents (groups spanning several magnitudes)


def draw_problem(num_tokens, num_heads, topk, pool, generator, device):
    """q, the NVFP4 cache, indices and sink, drawn on the CPU from `generator` (the same inputs on
    every device)."""
    latent = random_latent(pool, generator).view(pool // PAGE_SIZE, PAGE_SIZE, 512)
    cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent.to(device), kv_layout="HND")
    indices = torch.rand(num_tokens, pool, generator=generator).topk(topk, dim=1).indices.to(torch.int32)
    q = torch.randn(num_tokens, num_heads, 512, generator=generator).to(torch.bfloat16)
    sink = torch.randn(num_heads, generator=generator)
    return q.to(device), cache, indices.to(device), sink.to(device)


def row_errors(output, out_lse, ref_out, ref_lse):
    """Each row's errors as docs/contract.md section 11 states them: (relative L2 error of each row,
    in absolute terms where the reference row is below 1e-30; |lse - ref| / max(1, |ref|) where the
    reference LSE is finite; rows NaN (unwritten, or written as NaN) where the reference is finite;
    rows whose LSE is -inf where the reference's is not, or not where it is)."""
    out = output.detach().cpu().to(torch.float64).flatten(0, 1)
    lse = out_lse.detach().cpu().to(torch.float64).flatten()
    ref = ref_out.flatten(0, 1)
    ref_lse = ref_lse.flatten()
    finite = torch.isfinite(ref_lse)
    nan_rows = (torch.isnan(out).any(dim=1) & torch.isfinite(ref).all(dim=1)) | (torch.isnan(lse) & ~torch.isnan(ref_lse))
    ref_norm = ref.norm(dim=1)
    tiny = ref_norm < 1e-30
    rel = (out - ref).norm(dim=1) / torch.where(tiny, torch.ones_like(ref_norm), ref_norm)
    lse_err = ((lse - ref_lse).abs() / ref_lse.abs().clamp(min=1.0))[finite & ~nan_rows]
    inf_mismatch = int(((lse == -math.inf) != (ref_lse == -math.inf)).sum())
    return rel[~nan_rows], lse_err, int(nan_rows.sum()), inf_mismatch


def decode_kernel(plan, num_heads, device):
    """The kernel a decode plan runs (its split kernel; with one split it writes the outputs)."""
    if not str(device).startswith("cuda"):
        return f"cpu, {plan['num_splits']} splits"
    props = torch.cuda.get_device_properties(torch.device(device))
    kernel = torch_ops._C.decode_split_kernel_for(props.major, props.shared_memory_per_block_optin, num_heads,
                                                  plan["head_tiles"], plan["num_splits"], plan["chunks_per_block"])
    return f"{kernel}, {plan['num_splits']} splits"


def shape_generator(seed, num_tokens, num_heads, topk, scale):
    """A generator of its own for each shape and scale: a row's inputs do not depend on which other
    rows the command line asks for."""
    return torch.Generator().manual_seed(zlib.crc32(f"{seed},{num_tokens},{num_heads},{topk},{scale!r}".encode()))


def finite_or_none(value):
    return value if math.isfinite(value) else None


def measure(num_tokens, num_heads, topk, scale, args):
    generator = shape_generator(args.seed, num_tokens, num_heads, topk, scale)
    q, cache, indices, sink = draw_problem(num_tokens, num_heads, topk, args.pool, generator, args.device)
    sm_scale = scale / math.sqrt(512)
    output = torch.full((num_tokens, num_heads, 512), float("nan"), dtype=torch.bfloat16, device=args.device)
    out_lse = torch.full((num_tokens, num_heads), float("nan"), dtype=torch.float32, device=args.device)
    if args.op == "decode":
        mid_out, mid_lse = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch(
            num_tokens, num_heads, topk, device=args.device)
        plan = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_decode(q, cache, indices, output, out_lse, sm_scale,
                                                                 attn_sink=sink, mid_out=mid_out, mid_lse=mid_lse)
        kernel = decode_kernel(plan, num_heads, args.device)
    else:
        plan = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(q, cache, indices, output, out_lse, sm_scale,
                                                                  attn_sink=sink)
        kernel = plan.get("kernel")
    ref_out, ref_lse = sparse_mla_prefill_reference(q, cache, indices, sm_scale, attn_sink=sink)
    rel, lse_err, nan_rows, inf_mismatch = row_errors(output, out_lse, ref_out, ref_lse)

    def stat(values, fn):
        return finite_or_none(fn(values).item()) if values.numel() else 0.0

    return dict(op=args.op, T=num_tokens, H=num_heads, topk=topk, scale=scale, kernel=kernel,
                plan={key: value for key, value in plan.items()}, rows=int(rel.numel()), nan_rows=nan_rows,
                lse_inf_mismatch=inf_mismatch, median=stat(rel, torch.median),
                p99=stat(rel, lambda v: v.quantile(0.99)), max=stat(rel, torch.max), lse_max=stat(lse_err, torch.max))


def failures(row, max_error, max_lse_error):
    """What fails a row: NaN rows, a -inf LSE pattern unlike the reference's, a row error above
    max_error or an LSE error above max_lse_error (a non-finite error counts as above)."""
    reasons = []
    if row["nan_rows"]:
        reasons.append(f"{row['nan_rows']} NaN rows")
    if row["lse_inf_mismatch"]:
        reasons.append(f"{row['lse_inf_mismatch']} rows' -inf LSE unlike the reference")
    if row["max"] is None or not row["max"] <= max_error:
        reasons.append(f"row error {row['max']} > {max_error:g}")
    if row["lse_max"] is None or not row["lse_max"] <= max_lse_error:
        reasons.append(f"LSE error {row['lse_max']} > {max_lse_error:g}")
    return reasons


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
    parser.add_argument("--max-error", type=float, default=1e-2, help="fail above this row error (the contract's)")
    parser.add_argument("--max-lse-error", type=float, default=1e-3,
                        help="fail above this |lse - ref| / max(1, |ref|) (the contract's)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.pool < 64 or args.pool % PAGE_SIZE:
        parser.error(f"--pool: a positive multiple of {PAGE_SIZE}, got {args.pool}")
    if min(args.tokens + args.heads + args.topk) < 1:
        parser.error("--tokens, --heads, --topk: positive")
    if max(args.topk) > args.pool:
        parser.error(f"--topk: at most --pool ({args.pool}) distinct rows a token")

    def number(value):
        return "non-finite" if value is None else f"{value:.2e}"

    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"device {device_name}, commit {git_commit()}, op {args.op}, pool {args.pool}, seed {args.seed}")
    print("| T | H | topk | scale | kernel | rows | median | p99 | max | LSE max | NaN rows | -inf LSE unlike ref |")
    print("|" + "---|" * 12)
    rows = []
    override = torch_ops.prefill_kernel_override(args.kernel) if args.kernel else contextlib.nullcontext()
    with override:
        for num_tokens in args.tokens:
            for num_heads in args.heads:
                for topk in args.topk:
                    for scale in args.scales:
                        row = measure(num_tokens, num_heads, topk, scale, args)
                        rows.append(row)
                        print(f"| {num_tokens} | {num_heads} | {topk} | {scale:g} | {row['kernel']} | {row['rows']} | "
                              f"{number(row['median'])} | {number(row['p99'])} | {number(row['max'])} | "
                              f"{number(row['lse_max'])} | {row['nan_rows']} | {row['lse_inf_mismatch']} |", flush=True)
    if args.json:
        words = sys.argv[1:] if argv is None else list(argv)
        meta = dict(op=args.op, device=device_name, commit=git_commit(), torch=torch.__version__, pool=args.pool,
                    seed=args.seed, max_error=args.max_error, max_lse_error=args.max_lse_error,
                    command=" ".join(shlex.quote(w) for w in [os.path.basename(sys.executable), sys.argv[0]] + words),
                    environment={k: v for k, v in sorted(os.environ.items()) if k.startswith("CAKE_")},
                    torch_ops_file=torch_ops.__file__)
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1, allow_nan=False)
    failed = [(r, failures(r, args.max_error, args.max_lse_error)) for r in rows]
    failed = [(r, reasons) for r, reasons in failed if reasons]
    for row, reasons in failed:
        print(f"FAILED T={row['T']} H={row['H']} topk={row['topk']} scale={row['scale']:g}: {'; '.join(reasons)}")
    worst = max((r["max"] for r in rows if r["max"] is not None), default=0.0)
    worst_lse = max((r["lse_max"] for r in rows if r["lse_max"] is not None), default=0.0)
    # The last line sums the run up (ab_trees.sh prints it).
    print(f"{'FAILED' if failed else 'passed'}: {len(rows)} shapes, worst row error {worst:.2e}, worst LSE error "
          f"{worst_lse:.2e}, {len(failed)} shapes failing")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
