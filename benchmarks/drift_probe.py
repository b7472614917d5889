"""Does the prefill's time drift with the SM clock, with the memory's speed, or with neither?

mode_probe.py found the 64-head prefill's time at T = 4096 moving while a process runs (the same
placement 1-11% slower when timed again a second later). This probe times, call after call in one
process, up to three things back to back on one stream, each by its own CUDA events:

- the L2 flush (a 512 MiB memset): the memory's write rate;
- the prefill (bench_prefill.py's inputs for --shape);
- a spin of --spin-cycles SM clock cycles (torch.cuda._sleep; 0: none): its time is cycles /
  clock, so it reads the SM clock the calls around it ran at, call by call. A short spin reads low
  by its launch gap (100,000 cycles read ~1,850-1,870 MHz where 1,000,000 read ~1,968 on one H100):
  compare its readings with each other, not with the clock's nominal value.

--idle-ms makes the host sleep after each call, the GPU idle meanwhile; the spin and the idle time
both lower the board's average power. It prints each block of --block calls' medians and the
correlation, call by call, of the prefill's time with the flush's and the spin's. A prefill slower
where the spin is slower follows the clock; slower where the flush is slower, the memory.

    python3 benchmarks/drift_probe.py [--shape 4096x64x512] [--calls 2000] [--block 100]
        [--spin-cycles 1000000] [--idle-ms 0] [--json drift.json]

docs/benchmarks.md ("What moves a prefill's time within a process and between processes ...")
has what it found.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch

import torch_ops
from bench_prefill import git_commit, prefill_inputs, prepare_run
from mode_probe import parse_shape

SPIN_CYCLES = 1_000_000  # ~0.5 ms at 2 GHz: long against the events' resolution


def correlation(xs, ys):
    """Pearson's r of two equal-length sequences (0 where either is constant)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else 0.0


def blocks(values, size):
    """The medians of consecutive blocks of `size` values (a shorter last block dropped)."""
    return [statistics.median(values[i:i + size]) for i in range(0, len(values) - size + 1, size)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="4096x64x512", help="TxHxTOPK")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--spin-cycles", type=int, default=SPIN_CYCLES,
                        help="the spin's length; 0: no spin (the calls as timed_median runs them, no clock read)")
    parser.add_argument("--idle-ms", type=float, default=0.0,
                        help="the host sleeps this long after each call (the GPU idle meanwhile)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    try:
        num_tokens, num_heads, topk = parse_shape(args.shape)
    except ValueError as error:
        parser.error(str(error))
    if not 0 < args.block <= args.calls:
        parser.error(f"--block: expected 1..--calls ({args.calls}), got {args.block}")

    flush, ceiling, device_name, _, cache = prepare_run()
    q, indices, sink, output, out_lse = prefill_inputs(num_tokens, num_heads, topk).values()
    sm_scale = 1 / math.sqrt(512)

    def prefill():
        torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(q, cache, indices, output, out_lse, sm_scale,
                                                           attn_sink=sink)

    def spin():
        if args.spin_cycles:
            torch.cuda._sleep(args.spin_cycles)

    for _ in range(args.warmup):
        flush.zero_()
        prefill()
        spin()
    flush_us, prefill_us, spin_us = [], [], []
    for _ in range(args.calls):
        events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        events[0].record()
        flush.zero_()
        events[1].record()
        prefill()
        events[2].record()
        spin()
        events[3].record()
        events[3].synchronize()  # as timed_median: one call at a time
        if args.idle_ms:
            time.sleep(args.idle_ms * 1e-3)
        flush_us.append(events[0].elapsed_time(events[1]) * 1e3)
        prefill_us.append(events[1].elapsed_time(events[2]) * 1e3)
        spin_us.append(events[2].elapsed_time(events[3]) * 1e3)

    flops = 4 * num_tokens * num_heads * topk * 512
    clock_mhz = [args.spin_cycles / us for us in spin_us] if args.spin_cycles else None
    flush_gbs = [flush.numel() / (us * 1e3) for us in flush_us]
    print(f"device {device_name}, commit {git_commit()}, bf16 matmul ceiling {ceiling / 1e12:.0f} TFLOP/s, "
          f"shape {args.shape}, {args.calls} calls, spin {args.spin_cycles} cycles, idle {args.idle_ms} ms")
    print("| calls | prefill us | of matmul | SM clock MHz (spin) | flush GB/s |")
    print("|---|---|---|---|---|")
    rows = []
    block_clocks = blocks(clock_mhz, args.block) if clock_mhz else [None] * (args.calls // args.block)
    for k, (p, c, f) in enumerate(zip(blocks(prefill_us, args.block), block_clocks, blocks(flush_gbs, args.block))):
        rows.append(dict(first_call=k * args.block, calls=args.block, prefill_us=p,
                         of_matmul=flops / (p * 1e-6) / ceiling, clock_mhz=c, flush_gbs=f))
        clock = f"{c:.0f}" if c else "-"
        print(f"| {k * args.block}-{(k + 1) * args.block - 1} | {p:.1f} | {rows[-1]['of_matmul']:.3f} | {clock} | "
              f"{f:.0f} |")
    median = statistics.median(prefill_us)
    summary = dict(prefill_us_median=median, of_matmul=flops / (median * 1e-6) / ceiling,
                   prefill_us_min=min(prefill_us), prefill_us_max=max(prefill_us),
                   r_prefill_flush=correlation(prefill_us, flush_us))
    text = (f"\nprefill {summary['prefill_us_min']:.1f}-{summary['prefill_us_max']:.1f} us (median {median:.1f}); "
            f"r(prefill, flush) {summary['r_prefill_flush']:+.2f}")
    if clock_mhz:
        summary.update(clock_mhz_min=min(clock_mhz), clock_mhz_max=max(clock_mhz),
                       r_prefill_spin=correlation(prefill_us, spin_us))
        text += (f"; spin clock {summary['clock_mhz_min']:.0f}-{summary['clock_mhz_max']:.0f} MHz, "
                 f"r(prefill, spin) {summary['r_prefill_spin']:+.2f}")
    print(text)
    if args.json:
        meta = dict(device=device_name, commit=git_commit(), matmul_tflops=ceiling / 1e12, torch=torch.__version__,
                    shape=args.shape, calls=args.calls, spin_cycles=args.spin_cycles, idle_ms=args.idle_ms,
                    flush_bytes=flush.numel(), command="python3 benchmarks/drift_probe.py " + " ".join(sys.argv[1:]))
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, rows=rows, summary=summary, prefill_us=prefill_us, spin_us=spin_us,
                           flush_us=flush_us), f)

if __name__ == "__main__":
    main()
