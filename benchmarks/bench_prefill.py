"""Time cake::sparse_mla_prefill on the GPU against its ceilings and the plain-PyTorch
composition, all in one run.

    python benchmarks/bench_prefill.py [--tokens 128 1024 4096] [--heads 16 64 128] \
        [--topk 128 512 1024] [--kernel portable|hopper|hopper_small] [--variant 3,2] [--json results.json] \
        [--plot results.png]
    python benchmarks/bench_prefill.py --from-json results.json --plot results.png   # re-plot

Method: CUDA events around each launch, warm-up first, median of --repeats launches, the L2
flushed (a 512 MB memset) before every timed launch. Inputs: a pool of 65536 tokens in pages of
64 (HND), unique random indices per token (all valid), a sink on, random bf16 q. FLOPs are
4 * T * H * topk * 512; gathered bytes T * topk * 384. The bf16 matmul ceiling (8192^3
torch.matmul) is measured in the same run. The baseline composition gathers the rows,
dequantizes them with PyTorch ops, and runs matmul, softmax (with the sink), matmul; it is
timed eager, and compiled (torch.compile) for the shapes in --compile-shapes. --kernel and
--variant set the kernel override (torch_ops.prefill_kernel_override) for the run; without them
the environment's (CAKE_PREFILL_KERNEL, CAKE_PREFILL_VARIANT) applies.
"""
import argparse
import contextlib
import json
import os
import math
import shlex
import statistics
import subprocess
import sys
import time

import torch

import torch_ops

POOL_TOKENS = 65536
PAGE_SIZE = 64


def idle_ms_arg(text):
    """The argparse type of the scripts' --idle-ms: a finite float of 0 or more."""
    value = float(text)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a finite value of 0 or more, got {value}")
    return value


def parse_shape(text, option="--shape", form="TxHxTOPK"):
    """"TxHxTOPK" -> (T, H, topk), ValueError naming `option` otherwise (three positive integers
    joined by x; `form` is how the message spells them)."""
    try:
        num_tokens, num_heads, topk = (int(x) for x in text.split("x"))
    except ValueError:
        raise ValueError(f"{option}: expected {form} (e.g. 4096x64x512), got {text!r}") from None
    if min(num_tokens, num_heads, topk) < 1:
        raise ValueError(f"{option}: every part must be positive, got {text!r}")
    return num_tokens, num_heads, topk


def shape_arg(parser, text, option="--shape", form="TxHxTOPK"):
    """`option` as (T, H, topk), or the parser's error naming it."""
    try:
        return parse_shape(text, option, form)
    except ValueError as error:
        parser.error(str(error))


def attention_flops(num_tokens, num_heads, topk):
    """The FLOPs every benchmark counts for a call: QK^T and PV, 2 * 512 each per (token, head,
    candidate)."""
    return 4 * num_tokens * num_heads * topk * 512


def timed_median(fn, repeats, warmup, flush, spread=None, idle_s=0.0):
    """The median in seconds of `repeats` launches of fn, each timed by CUDA events after an L2
    flush (outside the events), after `warmup` untimed ones; `spread`, a dict, gets the fastest,
    the 90th percentile and the slowest in us (what a disturbed run shows in). `idle_s`: the host
    sleeps that long after each timed launch, the GPU idle meanwhile, which lowers the board's
    average power (back to back, an H100 ran prefill calls 1-2% slower after about a second, its
    averaged power reading then at the cap)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
        if idle_s:
            time.sleep(idle_s)
    if spread is not None:
        ordered = sorted(times)
        spread.update(us_min=ordered[0] * 1e6, us_p90=ordered[min(len(ordered) - 1, (9 * len(ordered)) // 10)] * 1e6,
                      us_max=ordered[-1] * 1e6)
    return statistics.median(times)


def matmul_ceiling(flush):
    """FLOP/s of a bf16 8192^3 matmul, the median of 20 timed launches (L2 flushed before each)."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    seconds = timed_median(lambda: torch.matmul(a, b), 20, 3, flush)
    return 2 * 8192**3 / seconds


def run_meta(device_name, ceiling, flush, args, **extra):
    """A run's provenance for its JSON file: the command and the CAKE_* environment as run, the
    commit (git_commit), where torch_ops was imported from, the repeats, and the matmul measured
    at the start (the ceiling every row's of_matmul is against) and again now, at the end, so a
    clock change during the run shows."""
    return dict(device=device_name, commit=git_commit(), matmul_tflops=ceiling / 1e12,
                matmul_tflops_end=matmul_ceiling(flush) / 1e12, torch=torch.__version__,
                command=" ".join(shlex.quote(word) for word in [os.path.basename(sys.executable)] + sys.argv),
                environment={key: value for key, value in sorted(os.environ.items()) if key.startswith("CAKE_")},
                torch_ops_file=torch_ops.__file__, repeats=getattr(args, "repeats", None), warmup=args.warmup,
                idle_ms=getattr(args, "idle_ms", 0.0),
                kernel_override=torch_ops.get_prefill_kernel_override(), **extra)


def e2m1_decode(codes):
    c = codes.to(torch.int32)
    exponent = (c >> 1) & 3
    mantissa = (c & 1).to(torch.float32)
    magnitude = torch.where(exponent == 0, 0.5 * mantissa, (1.0 + 0.5 * mantissa) * torch.exp2((exponent - 1).float()))
    return torch.where((c & 8) != 0, -magnitude, magnitude)


def composition(q, cache, indices, sink, sm_scale):
    """Plain PyTorch: gather the rows, dequantize, QK^T, softmax with sink, PV."""
    num_tokens, topk = indices.shape
    pages = cache.view(cache.shape[0], -1)
    page_of, row_of = (indices // PAGE_SIZE).long(), (indices % PAGE_SIZE).long()
    data = pages[:, : PAGE_SIZE * 352].view(-1, PAGE_SIZE, 352)[page_of, row_of]       # [T, K, 352]
    scales = pages[:, PAGE_SIZE * 352:].view(-1, PAGE_SIZE, 32)[page_of, row_of, :28]  # [T, K, 28]
    nope_bytes = data[..., :224]
    codes = torch.stack([nope_bytes & 0xF, nope_bytes >> 4], dim=-1).view(num_tokens, topk, 448)
    scale = scales.contiguous().view(torch.float8_e4m3fn).float().repeat_interleave(16, dim=-1)
    nope = (e2m1_decode(codes) * scale).to(torch.bfloat16)
    rope = data[..., 224:].contiguous().view(torch.bfloat16)
    keys = torch.cat([nope, rope], dim=-1)                                                # [T, K, 512]
    logits = torch.bmm(q, keys.transpose(1, 2)).float() * sm_scale                        # [T, H, K]
    lse = torch.logaddexp(torch.logsumexp(logits, dim=-1), sink[None, :])
    probs = torch.exp(logits - lse[..., None]).to(torch.bfloat16)
    return torch.bmm(probs, keys), lse * (1 / math.log(2))


def plot(rows, meta, path):
    """TFLOP/s vs T, one line per (H, topk), with the bf16 matmul ceiling of the same run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heads = sorted({r["H"] for r in rows})
    fig, axes = plt.subplots(1, len(heads), figsize=(5 * len(heads), 4), sharey=True, squeeze=False)
    for ax, num_heads in zip(axes[0], heads):
        for topk in sorted({r["topk"] for r in rows if r["H"] == num_heads}):
            points = sorted((r["T"], r["tflops"]) for r in rows if r["H"] == num_heads and r["topk"] == topk)
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"topk {topk}")
        ax.axhline(meta["matmul_tflops"], color="gray", linestyle="--", label="bf16 matmul 8192^3")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens T")
        ax.set_title(f"H = {num_heads}")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("TFLOP/s (4*T*H*topk*512 / time)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"cake sparse-MLA NVFP4 prefill, {meta['device']}, commit {meta['commit']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def dual_cache_comparison(heads_list, cache64, latent, flush, repeats, warmup, sm_scale, num_tokens=4096,
                          idle_s=0.0):
    """Main list: topk 128 in a page-256 cache; extra list: 512 in the page-64 cache. Against one
    call with 640 candidates in the page-64 cache. Same pool, unique indices, sink on."""
    cache256 = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent.view(-1, 256, 512), kv_layout="HND")
    print("\n| T | H | dual (128 @ page 256 + 512 @ page 64) us | single 640 @ page 64 us | dual / single |")
    print("|---|---|---|---|---|")
    rows = []
    for num_heads in heads_list:
        q, picks, sink, output, out_lse = prefill_inputs(num_tokens, num_heads, 640).values()
        main, extra = picks[:, :128].contiguous(), picks[:, 128:].contiguous()
        dual = timed_median(lambda: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(
            q, cache256, main, output, out_lse, sm_scale, attn_sink=sink, extra_kv_cache=cache64,
            extra_indices=extra), repeats, warmup, flush, idle_s=idle_s)
        single = timed_median(lambda: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(
            q, cache64, picks, output, out_lse, sm_scale, attn_sink=sink), repeats, warmup, flush,
            idle_s=idle_s)
        rows.append(dict(T=num_tokens, H=num_heads, dual_us=dual * 1e6, single_us=single * 1e6))
        print(f"| {num_tokens} | {num_heads} | {dual * 1e6:.1f} | {single * 1e6:.1f} | {dual / single:.3f} |", flush=True)
    return rows


def git_commit():
    """CAKE_COMMIT when set (the A/B script sets each tree's label), else the checkout's short
    commit, with "-dirty" when tracked files differ from it, or "unknown" outside a git checkout."""
    if os.environ.get("CAKE_COMMIT"):
        return os.environ["CAKE_COMMIT"]
    try:
        commit = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True,
                                         stderr=subprocess.DEVNULL).strip()
        dirty = subprocess.check_output(["git", "status", "--porcelain", "--untracked-files=no"], text=True,
                                        stderr=subprocess.DEVNULL).strip()
        return commit + ("-dirty" if dirty else "")
    except Exception:
        return "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, nargs="+", default=[128, 1024, 4096])
    parser.add_argument("--heads", type=int, nargs="+", default=[16, 64, 128])
    parser.add_argument("--topk", type=int, nargs="+", default=[128, 512, 1024])
    parser.add_argument("--head-tiles", type=int, default=None, help="force a head tile (default: the planner)")
    parser.add_argument("--kernel", choices=["hopper", "portable", "hopper_small"], default=None,
                        help="kernel override: 'portable' keeps Hopper GPUs on the portable kernel; 'hopper' "
                             "requires the Hopper kernels (the 64-head one and the small-heads one, as by default "
                             "on Hopper); 'hopper_small' means the same as 'hopper'")
    parser.add_argument("--variant", type=lambda text: tuple(int(x) for x in text.split(",")), default=None,
                        metavar="STAGES,K_TILES",
                        help="kernel override: run the portable instance with this pipeline")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--idle-ms", type=idle_ms_arg, default=0.0,
                        help="the host's sleep after each timed call of the op (lowers the board's average power: "
                             "back to back, an H100 runs the prefill 1-2%% slower after about a second)")
    parser.add_argument("--baseline", choices=["none", "eager", "all"], default="all")
    parser.add_argument("--compile-shapes", default="4096x128x1024,4096x64x512",
                        help="TxHxtopk list for the torch.compile baseline")
    parser.add_argument("--dual", type=int, nargs="*", default=None, metavar="H",
                        help="also compare a dual-cache call (main topk 128 in a page-256 cache + extra 512 in a "
                             "page-64 cache) with a single-cache call of 640 candidates at T = 4096, for these H")
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", default=None, help="write a PNG of TFLOP/s vs T per H (needs matplotlib)")
    parser.add_argument("--from-json", default=None, help="only plot a recorded --json file (no GPU needed)")
    args = parser.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            recorded = json.load(f)
        plot(recorded["rows"], recorded["meta"], args.plot or args.from_json.replace(".json", ".png"))
        return

    overridden = args.kernel is not None or args.variant is not None
    with torch_ops.prefill_kernel_override(args.kernel, args.variant) if overridden else contextlib.nullcontext():
        run_benchmark(args)


def prepare_run():
    """What every GPU benchmark run starts from: a fixed seed, the 512 MB L2-flush buffer, the bf16
    matmul ceiling measured now, the device's name, and the pool (POOL_TOKENS random rows in HND
    pages of PAGE_SIZE) as bf16 latents and as the NVFP4 cache."""
    torch.manual_seed(0)
    flush = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    ceiling = matmul_ceiling(flush)
    device_name = torch.cuda.get_device_name()
    latent = torch.randn(POOL_TOKENS // PAGE_SIZE, PAGE_SIZE, 512, device="cuda").to(torch.bfloat16)
    cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent, kv_layout="HND")
    return flush, ceiling, device_name, latent, cache


def random_indices(num_tokens, topk, pool=POOL_TOKENS):
    """[num_tokens, topk] int32: each token's topk distinct rows of the pool's first `pool`, drawn
    at random (all valid)."""
    return torch.rand(num_tokens, pool, device="cuda").topk(topk, dim=1).indices.to(torch.int32)


def prefill_inputs(num_tokens, num_heads, topk):
    """One prefill shape's random q, indices (into the whole pool) and sink, and its outputs
    (unwritten), drawn in this order: the order of the per-script code it replaced, so that each
    script's seeded runs draw the inputs they drew before."""
    q = torch.randn(num_tokens, num_heads, 512, device="cuda").to(torch.bfloat16)
    return dict(q=q, indices=random_indices(num_tokens, topk), sink=torch.randn(num_heads, device="cuda"),
                output=torch.empty(num_tokens, num_heads, 512, device="cuda", dtype=torch.bfloat16),
                out_lse=torch.empty(num_tokens, num_heads, device="cuda"))


def run_benchmark(args):
    flush, ceiling, device_name, latent, cache = prepare_run()
    compile_shapes = {tuple(int(x) for x in s.split("x")) for s in args.compile_shapes.split(",") if s}
    compiled_composition = torch.compile(composition, dynamic=True) if args.baseline == "all" else None
    sm_scale = 1 / math.sqrt(512)

    rows = []
    print(f"device {device_name}, commit {git_commit()}, bf16 matmul ceiling {ceiling / 1e12:.0f} TFLOP/s")
    header = "| T | H | topk | plan | time us | TFLOP/s | x matmul | gathered GB/s | eager us | x eager | compiled us | x compiled |"
    print(header)
    print("|" + "---|" * 12)
    for num_tokens in args.tokens:
        for num_heads in args.heads:
            for topk in args.topk:
                q, indices, sink, output, out_lse = prefill_inputs(num_tokens, num_heads, topk).values()
                plan = {}

                def run():
                    plan.update(torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(
                        q, cache, indices, output, out_lse, sm_scale, attn_sink=sink, head_tiles=args.head_tiles))

                spread = {}
                seconds = timed_median(run, args.repeats, args.warmup, flush, spread, idle_s=args.idle_ms * 1e-3)
                flops = attention_flops(num_tokens, num_heads, topk)
                row = dict(T=num_tokens, H=num_heads, topk=topk, head_tiles=plan["head_tiles"],
                           kernel=plan["kernel"], us=seconds * 1e6,
                           tflops=flops / seconds / 1e12, of_matmul=flops / seconds / ceiling,
                           gathered_gbs=num_tokens * topk * 384 / seconds / 1e9, **spread)
                if args.baseline != "none":
                    eager = timed_median(lambda: composition(q, cache, indices, sink, sm_scale), 5, 1, flush)
                    ref_out, ref_lse = composition(q, cache, indices, sink, sm_scale)
                    rel = ((output.float() - ref_out.float()).norm() / ref_out.float().norm()).item()
                    assert rel < 1e-2, f"kernel disagrees with the composition: {rel}"
                    row.update(eager_us=eager * 1e6, x_eager=eager / seconds)
                    del ref_out, ref_lse
                if compiled_composition is not None and (num_tokens, num_heads, topk) in compile_shapes:
                    compiled = timed_median(lambda: compiled_composition(q, cache, indices, sink, sm_scale), 5, 2, flush)
                    row.update(compiled_us=compiled * 1e6, x_compiled=compiled / seconds)
                rows.append(row)
                fmt = lambda key, f: (f % row[key]) if key in row else "-"  # noqa: E731
                line = (f"| {num_tokens} | {num_heads} | {topk} | ht={row['head_tiles']} {row['kernel']} | {row['us']:.1f} | "
                        f"{row['tflops']:.1f} | {row['of_matmul']:.3f} | {row['gathered_gbs']:.0f} | "
                        f"{fmt('eager_us', '%.0f')} | {fmt('x_eager', '%.1f')} | {fmt('compiled_us', '%.0f')} | "
                        f"{fmt('x_compiled', '%.1f')} |")
                print(line, flush=True)
                torch.cuda.empty_cache()
    dual_rows = []
    if args.dual:
        dual_rows = dual_cache_comparison(args.dual, cache, latent, flush, args.repeats, args.warmup, sm_scale,
                                          idle_s=args.idle_ms * 1e-3)
    meta = run_meta(device_name, ceiling, flush, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, rows=rows, dual=dual_rows), f, indent=1)
    if args.plot:
        plot(rows, meta, args.plot)


if __name__ == "__main__":
    main()
