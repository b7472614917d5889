"""Time cake::sparse_mla_decode on the GPU, and cake::sparse_mla_prefill on the same shapes where it
runs them, against the bf16 matmul measured in the same run.

    python benchmarks/bench_decode.py [--rows 128x128x2048 1x64x2048 ...] [--json results.json]
    python benchmarks/bench_decode.py --grid [--json grid.json]   # both ops and the choice
    python benchmarks/bench_decode.py --grid --splits 1 2 4 8 16   # the decode at forced split counts too

Method and inputs as in bench_prefill.py (its helpers): CUDA events around each call, warm-up
first, median of --repeats calls, the L2 flushed (a 512 MB memset) before every timed call; a
pool of 65536 tokens in pages of 64 (HND), unique random indices per token (all valid), a sink
on, random bf16 q. A row is (T, H, candidates). FLOPs are 4 * T * H * candidates * 512; each
time is also given as a fraction of the bf16 matmul (8192^3 torch.matmul) of the same run. The
decode runs its planner's plan (head tiles, splits; --max-splits) with scratch from
allocate_decode_scratch; the prefill its planner's head tiles, and only where it accepts the shape
(H a multiple of 16, at most 1024 candidates). Where both run, their outputs are compared.
--grid times T in {1, 2, ..., 128} x H in {16, 64, 128} x candidates in {512, 1024} with both ops
and prints which one select_kernel picks and which was faster; the last line (and
meta.selection_misses) counts the shapes where the pick took more than 10% longer than the faster. --kernels adds, per row, the device
time of each kernel the decode launches (torch.profiler's CUDA activity; median over min(--repeats,
20) further calls, each after an L2 flush), so the split kernel and the merge can be told apart;
the sum is below the event time, which also holds the launch gaps. --splits N ... times the decode
of every shape once more at each of these split counts that the shape accepts (from ceil(chunks /
32) to min(chunks, --max-splits); a row each, marked "forced"), the data for the planner's split
rule (docs/planner.md). --head-tiles N ... times every shape once more at each of these head tiles
that the decode allows at its H (decode_head_tiles: those of 1, 2, 4 that divide its 16-head
tiles) other than the planner's, at the split count the op plans for them and at each --splits
count (rows marked "forced"): which kernel and head unit suits the small rows. --graph adds, per
row, the decode captured once in a CUDA graph and timed as replays (same flush, warm-up and
median), as a serving loop that captures its decode step runs it: no Python or launch overhead
between the kernels beyond what the graph keeps. Each row's JSON also holds host_us, the median
host path of one call (wrapper, planner, launches; the GPU idle before it), and the table flags a
row whose host path exceeds half its event time. The header line (and
meta.launch_floor_us) gives the same method's time for one and for two back-to-back kernels that
do nothing: the floor under a decode step's two launches, for reading the small rows.
"""
import argparse
import collections
import json
import math
import statistics
import time

import torch

import torch_ops
from bench_prefill import attention_flops, git_commit, prefill_inputs, prepare_run, run_meta, shape_arg, timed_median

DEFAULT_ROWS = ["128x128x2048", "64x128x2048", "128x64x1024", "1x64x2048", "8x64x1024", "4x128x1024", "8x16x1024",
                "64x8x4096"]
GRID_TOKENS = [1, 2, 4, 8, 16, 32, 64, 128]
GRID_HEADS = [16, 64, 128]
GRID_CANDIDATES = [512, 1024]


def kernel_times(fn, repeats, flush):
    """Median device time (us) of each kernel `fn` launches, over `repeats` calls after an L2
    flush each (the flush runs before the profiled window), by torch.profiler's CUDA activity."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(repeats):
        flush.zero_()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        totals = collections.defaultdict(float)
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                totals[event.name] += event.device_time_total
        per_call.append(totals)
    names = sorted({name for totals in per_call for name in totals})
    return {name: statistics.median(totals.get(name, 0.0) for totals in per_call) for name in names}


def host_time(fn, repeats):
    """Median time (us) of a call's host path alone: the Python wrapper, the planner and the
    launches, the GPU idle before each call (after one call that is not counted). A row whose host
    path is near its event time is timing the host, not the kernels (the flush before each timed
    call gives the host a head start of the flush's own time only)."""
    fn()
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def capture_graph(fn):
    """`fn` captured in a CUDA graph, after one warm-up call on a side stream (as torch.cuda.graph
    asks); its replay relaunches the captured kernels with their launch attributes."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def short_kernel_name(name):
    """The function name of a kernel's demangled signature, without namespaces and arguments."""
    name = name.replace("(anonymous namespace)::", "")
    return name.split("(")[0].split("<")[0].split("::")[-1].split(" ")[-1]


def split_range(candidates, max_splits):
    """The split counts the decode accepts for a list of `candidates`: ceil(chunks /
    MAX_CHUNKS_PER_SPLIT) .. min(chunks, max_splits), chunks of 64 candidates; none past the lists'
    capacity of LIST_CHUNKS_PER_SPLIT x max_splits chunks (the C++ planner's constants)."""
    chunks = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_num_chunks(candidates)
    if chunks > torch_ops._C.LIST_CHUNKS_PER_SPLIT * max_splits:
        return range(0)
    per_split = torch_ops._C.MAX_CHUNKS_PER_SPLIT
    return range((chunks + per_split - 1) // per_split, min(chunks, max_splits) + 1)


def decode_inputs(num_tokens, num_heads, candidates, max_splits):
    """A row's inputs on the GPU: random bf16 q, unique random slots of the pool per token, a sink,
    the output and LSE, and scratch for every plan up to max_splits."""
    q, indices, sink, output, out_lse = prefill_inputs(num_tokens, num_heads, candidates).values()
    mid_out, mid_lse = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch(
        num_tokens, num_heads, candidates, max_splits=max_splits, device="cuda")
    return q, indices, sink, output, out_lse, mid_out, mid_lse


def time_row(num_tokens, num_heads, candidates, cache, flush, ceiling, args, num_splits=None, head_tiles=None):
    """Times the decode (at the planner's plan, or at `num_splits` / `head_tiles` where given) and,
    where it runs the shape and the plan is the planner's, the prefill; returns the row's dict."""
    sm_scale = 1 / math.sqrt(512)
    q, indices, sink, output, out_lse, mid_out, mid_lse = decode_inputs(num_tokens, num_heads, candidates,
                                                                        args.max_splits)
    flops = attention_flops(num_tokens, num_heads, candidates)
    decode_plan = {}

    def decode():
        decode_plan.update(torch_ops.sparse_mla_decode(q, cache, indices, output, out_lse, sm_scale, attn_sink=sink,
                                                       mid_out=mid_out, mid_lse=mid_lse, max_splits=args.max_splits,
                                                       num_splits=num_splits, head_tiles=head_tiles))

    spread = {}
    seconds = timed_median(decode, args.repeats, args.warmup, flush, spread)
    row = dict(T=num_tokens, H=num_heads, candidates=candidates, head_tiles=decode_plan["head_tiles"],
               num_splits=decode_plan["num_splits"], us=seconds * 1e6, **spread, tflops=flops / seconds / 1e12,
               of_matmul=flops / seconds / ceiling, gathered_gbs=num_tokens * candidates * 384 / seconds / 1e9,
               select=torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_select_kernel(
                   num_tokens=num_tokens, num_heads=num_heads, topk=candidates,
                   num_sms=torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count))
    row["host_us"] = host_time(decode, args.repeats)
    if num_splits is not None or head_tiles is not None:
        row["forced"] = True
    if args.kernels:
        row["kernels_us"] = {short_kernel_name(name): us
                             for name, us in kernel_times(decode, min(args.repeats, 20), flush).items()}
    if args.graph:
        row["graph_us"] = timed_median(capture_graph(decode).replay, args.repeats, args.warmup, flush) * 1e6
    if num_splits is None and head_tiles is None and torch_ops._C.prefill_serves(num_heads, candidates, 0):
        decode_out = output.clone()
        prefill_plan = {}

        def prefill():
            prefill_plan.update(torch_ops.sparse_mla_prefill(q, cache, indices, output, out_lse, sm_scale,
                                                             attn_sink=sink))

        prefill_seconds = timed_median(prefill, args.repeats, args.warmup, flush)
        rel = ((decode_out.float() - output.float()).norm() / output.float().norm()).item()
        assert rel < 1e-2, f"decode and prefill disagree: relative difference {rel}"
        row.update(prefill_us=prefill_seconds * 1e6, prefill_tflops=flops / prefill_seconds / 1e12,
                   prefill_of_matmul=flops / prefill_seconds / ceiling, prefill_kernel=prefill_plan["kernel"],
                   prefill_head_tiles=prefill_plan["head_tiles"], faster="decode" if seconds < prefill_seconds
                   else "prefill")
    del mid_out, mid_lse
    torch.cuda.empty_cache()
    return row


def print_row(row):
    fmt = lambda key, f: (f % row[key]) if key in row else "-"  # noqa: E731
    prefill = f"ht={row['prefill_head_tiles']} {row['prefill_kernel']}" if "prefill_kernel" in row else "-"
    plan = f"ht={row['head_tiles']} s={row['num_splits']}" + (" forced" if row.get("forced") else "")
    print(f"| {row['T']} | {row['H']} | {row['candidates']} | {plan} | "
          f"{row['us']:.1f} | {row['tflops']:.1f} | {row['of_matmul']:.3f} | {row['gathered_gbs']:.0f} | {prefill} | "
          f"{fmt('prefill_us', '%.1f')} | {fmt('prefill_of_matmul', '%.3f')} | {row['select']} | "
          f"{row.get('faster', '-')} |", flush=True)
    if "graph_us" in row:
        print(f"|   | CUDA graph replay: {row['graph_us']:.1f} us |", flush=True)
    if row.get("host_us", 0) > 0.5 * row["us"]:
        print(f"|   | host path {row['host_us']:.1f} us a call: the event time may hold host time |", flush=True)
    if "kernels_us" in row:
        print("|   | kernels: " + ", ".join(f"{name} {us:.1f} us" for name, us in row["kernels_us"].items()) + " |",
              flush=True)


def both_ops_rows(rows):
    """The planned rows (not forced split counts) where both ops ran."""
    return [row for row in rows if not row.get("forced") and row.get("prefill_us") is not None]


def selection_misses(rows, tolerance=0.10):
    """The rows of both_ops_rows where select_kernel's pick took more than (1 + tolerance) times
    the faster op's time, as (row, pick's time / faster time)."""
    misses = []
    for row in both_ops_rows(rows):
        picked = row["us"] if row["select"] == "decode" else row["prefill_us"]
        ratio = picked / min(row["us"], row["prefill_us"])
        if ratio > 1 + tolerance:
            misses.append((row, ratio))
    return misses


def launch_floor(flush, repeats, warmup):
    """The time the same method gives one and two back-to-back kernels that do nothing (a 1-element
    add): what a decode step of two launches cannot go below on this device and driver."""
    x = torch.zeros(1, device="cuda")
    one = timed_median(lambda: x.add_(1), repeats, warmup, flush)
    two = timed_median(lambda: (x.add_(1), x.add_(1)), repeats, warmup, flush)
    return one * 1e6, two * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", nargs="+", default=DEFAULT_ROWS, metavar="TxHxCANDIDATES",
                        help=f"the shapes to time (default: {' '.join(DEFAULT_ROWS)})")
    parser.add_argument("--grid", action="store_true", help="T x H x candidates grid, both ops and the choice")
    parser.add_argument("--max-splits", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--json", default=None)
    parser.add_argument("--kernels", action="store_true",
                        help="also each kernel's device time per row (torch.profiler)")
    parser.add_argument("--graph", action="store_true",
                        help="also each row's decode as a CUDA graph replay (as a serving loop runs it)")
    parser.add_argument("--splits", type=int, nargs="+", default=None, metavar="N",
                        help="also time the decode of each shape at these split counts (where accepted)")
    parser.add_argument("--head-tiles", type=int, nargs="+", default=None, metavar="N",
                        help="also time the decode of each shape at these head tiles (where H allows them)")
    args = parser.parse_args()

    shapes = ([(t, h, c) for h in GRID_HEADS for c in GRID_CANDIDATES for t in GRID_TOKENS] if args.grid
              else [shape_arg(parser, text, "--rows", "TxHxCANDIDATES") for text in args.rows])
    flush, ceiling, device_name, _, cache = prepare_run()

    floor_one, floor_two = launch_floor(flush, args.repeats, args.warmup)
    print(f"device {device_name}, commit {git_commit()}, bf16 matmul ceiling {ceiling / 1e12:.0f} TFLOP/s, "
          f"empty kernels timed the same way: one {floor_one:.1f} us, two back to back {floor_two:.1f} us")
    print("| T | H | candidates | decode plan | decode us | TFLOP/s | x matmul | gathered GB/s | prefill plan | "
          "prefill us | prefill x matmul | select_kernel | faster |")
    print("|" + "---|" * 13)
    rows = []
    for num_tokens, num_heads, candidates in shapes:
        row = time_row(num_tokens, num_heads, candidates, cache, flush, ceiling, args)
        print_row(row)
        rows.append(row)
        # Then the forced plans: the planner's head tiles at each other split count, and each other
        # head tile count the decode allows at the op's split count for it and at each other one.
        allowed = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_decode_head_tiles(num_heads)
        other_tiles = [t for t in sorted(set(args.head_tiles or [])) if t in allowed and t != row["head_tiles"]]
        for tiles in [None] + other_tiles:
            planned_splits = row["num_splits"] if tiles is None else None  # known once timed
            for forced in ([] if tiles is None else [None]) + sorted(set(args.splits or [])):
                if forced is not None and (forced not in split_range(candidates, args.max_splits)
                                           or forced == planned_splits):
                    continue
                try:
                    forced_row = time_row(num_tokens, num_heads, candidates, cache, flush, ceiling, args, forced, tiles)
                except ValueError as error:  # a plan the op refuses for this shape: say so, go on
                    splits = "planned" if forced is None else forced
                    print(f"| {num_tokens} | {num_heads} | {candidates} | ht={tiles} s={splits} refused: {error} |")
                    continue
                if forced is None:
                    planned_splits = forced_row["num_splits"]
                print_row(forced_row)
                rows.append(forced_row)
    misses = selection_misses(rows)
    print(f"select_kernel: {len(misses)} of {len(both_ops_rows(rows))} shapes where both ops ran pick an op more than 10% slower "
          "than the faster" + "".join(f"; {r['T']}x{r['H']}x{r['candidates']} {r['select']} {ratio:.2f}x"
                                      for r, ratio in misses))
    meta = run_meta(device_name, ceiling, flush, args, launch_floor_us=dict(one_kernel=floor_one, two_kernels=floor_two),
                    selection_misses=[dict(T=r["T"], H=r["H"], candidates=r["candidates"], ratio=ratio)
                                      for r, ratio in misses],
                    grid=args.grid, max_splits=args.max_splits, splits=args.splits, head_tiles=args.head_tiles,
                    graph=args.graph)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
