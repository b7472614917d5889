"""Do a process's two timing modes follow where its tensors sit, or when it runs?

The 64-head prefill's rounds at T = 4096 fall in two modes about 2.5% apart (docs/benchmarks.md,
"The leader's QK^T in groups of two, made the default and set back ..."), and a round (one
process) tends to stay in one; a same-tree A/B ("The short form of the 16-head split units
(merged), one tree under two labels, ...", item 2) showed the modes are not a build's, but not
whether they follow the process's allocations or the moment it runs. This probe times one shape in
one process on several placements of the same inputs: each placement is a fresh copy of the cache
pool, q, the indices, the sink, the outputs and the L2-flush buffer, each tensor carved from a
buffer of its own at an offset inside a 2 MiB page that differs from placement to placement, so
that its tensors sit on other physical pages and at other page offsets. Every placement is timed
twice, the second pass in the reverse order. Readings (`summarise`):

- "placement": the placements differ (by 1% or more) and each placement's two passes agree to
  within half of that: where the tensors sit sets the mode;
- "time": some placement's two passes differ by 1% or more, or the second pass moved as a whole:
  the mode changed while the process ran;
- "both", or "neither": every placement in one mode in both passes. A process then stays in the
  mode it started in whatever it allocates, or the machine stayed in one over the probe's second
  or two; runs in several processes (device_suite.sh's mode-probe step runs MODE_PROCESSES of
  them) show whether the processes land in different modes.

    python3 benchmarks/mode_probe.py [--shape 4096x64x512] [--placements 8] [--repeats 10] [--idle-ms 0]
        [--json modes.json]

--idle-ms makes the host sleep after each timed call, the GPU idle meanwhile, which lowers the
board's average power. Back to back, an H100 ran prefill calls 1-2% slower after about a second,
its averaged power reading then at the cap (drift_probe.py). This probe's passes are shorter than
that, and on an H100 they moved with idle time too (docs/benchmarks.md, "What moves the prefill's
time in a run: ...").

Method and inputs as bench_prefill.py (its prepare_run and timed_median: the L2 flushed before
every timed launch, the bf16 matmul in the same run); the values of every placement are the same,
only where they sit changes. Memory: about placements x (q + output + 512 MiB of flush buffer)
(T = 4096, H = 64: ~1 GiB a placement).
"""
import argparse
import json
import math
import statistics

import torch

import torch_ops
from bench_prefill import (attention_flops, git_commit, idle_ms_arg, prefill_inputs, prepare_run, run_meta, shape_arg,
                           timed_median)

MIB = 1 << 20
PAGE = 2 * MIB  # the GPU's large page: an allocation's placement inside one is set here


def page_offset(placement):
    """Where placement k's tensors start inside a 2 MiB page: k steps of 192 KiB (a multiple of
    the 16 bytes the op needs), so no two of the first ten placements share an offset."""
    return (placement * 192 * 1024) % PAGE


def summarise(first, second):
    """What two passes' medians (us, by placement) say. `between`: the spread of the placements'
    means over their median; `within`: the largest difference between a placement's two passes
    over its mean; `pass_shift`: the second pass's median over the first's, less 1. "placement"
    where the placements differ by 1% or more and by more than twice `within`; "time" where some
    placement's passes differ by 1% or more or the passes moved as a whole by 1% or more; "both"
    where both hold, "neither" where none does."""
    if len(first) != len(second) or len(first) < 2:
        raise ValueError("summarise: expected two passes over the same two or more placements")
    means = [(a + b) / 2 for a, b in zip(first, second)]
    between = (max(means) - min(means)) / statistics.median(means)
    within = max(abs(a - b) / m for a, b, m in zip(first, second, means))
    pass_shift = statistics.median(second) / statistics.median(first) - 1
    by_placement = between >= 0.01 and between > 2 * within
    by_time = within >= 0.01 or abs(pass_shift) >= 0.01
    verdict = {(True, True): "both", (True, False): "placement", (False, True): "time",
               (False, False): "neither"}[(by_placement, by_time)]
    return dict(between=between, within=within, pass_shift=pass_shift, verdict=verdict)


def carve(tensor, offset):
    """A copy of `tensor` in a buffer of its own, starting `offset` bytes into a 2 MiB page (the
    returned view keeps the buffer)."""
    nbytes = tensor.numel() * tensor.element_size()
    buffer = torch.empty(nbytes + PAGE, dtype=torch.uint8, device="cuda")  # the start lies in its first page
    start = (offset - buffer.data_ptr()) % PAGE
    placed = buffer[start:start + nbytes].view(tensor.dtype).view(tensor.shape)
    return placed.copy_(tensor)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="4096x64x512", help="TxHxTOPK")
    parser.add_argument("--placements", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--idle-ms", type=idle_ms_arg, default=0.0, help="the host's sleep after each timed call")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    num_tokens, num_heads, topk = shape_arg(parser, args.shape)
    if args.placements < 2:
        parser.error(f"--placements: expected 2 or more, got {args.placements}")

    flush, ceiling, device_name, latent, cache = prepare_run()
    del latent
    sm_scale = 1 / math.sqrt(512)
    source = dict(cache=cache, **prefill_inputs(num_tokens, num_heads, topk), flush=flush)
    placements = [{name: carve(t, page_offset(k)) for name, t in source.items()} for k in range(args.placements)]
    del source, cache, flush
    torch.cuda.empty_cache()
    flops = attention_flops(num_tokens, num_heads, topk)

    def time_placement(p):
        def run():
            torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(p["q"], p["cache"], p["indices"], p["output"],
                                                               p["out_lse"], sm_scale, attn_sink=p["sink"])

        return timed_median(run, args.repeats, args.warmup, p["flush"], idle_s=args.idle_ms * 1e-3) * 1e6

    order = list(range(args.placements))
    first = {k: time_placement(placements[k]) for k in order}
    second = {k: time_placement(placements[k]) for k in reversed(order)}
    print(f"device {device_name}, commit {git_commit()}, bf16 matmul ceiling {ceiling / 1e12:.0f} TFLOP/s, "
          f"shape {args.shape}")
    print("| placement | offset in 2 MiB | run (pass 1, pass 2) | pass 1 us | pass 2 us | pass 2 / 1 |")
    print("|---|---|---|---|---|---|")
    rows = []
    for k in order:
        runs = (k, 2 * args.placements - 1 - k)
        row = dict(placement=k, page_offset=page_offset(k), runs=runs, pass1_us=first[k], pass2_us=second[k],
                   of_matmul=flops / (first[k] * 1e-6) / ceiling,  # pass 1's
                   of_matmul_pass2=flops / (second[k] * 1e-6) / ceiling,
                   addresses={name: hex(t.data_ptr()) for name, t in placements[k].items()})
        rows.append(row)
        print(f"| {k} | {page_offset(k)} | {runs[0]}, {runs[1]} | {first[k]:.1f} | {second[k]:.1f} | "
              f"{second[k] / first[k]:.3f} |", flush=True)
    summary = summarise([first[k] for k in order], [second[k] for k in order])
    print(f"\nbetween placements {summary['between']:.2%}, largest difference of a placement's passes "
          f"{summary['within']:.2%}, pass 2 over pass 1 {summary['pass_shift']:+.2%}: {summary['verdict']}")
    if args.json:
        # run_meta times the matmul again at the end; the flush buffers are the placements' now.
        meta = run_meta(device_name, ceiling, placements[0]["flush"], args, shape=args.shape)
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, rows=rows, summary=summary), f, indent=1)


if __name__ == "__main__":
    main()
