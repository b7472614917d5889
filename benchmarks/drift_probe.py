"""Does the prefill's time drift with the SM clock, with the memory's speed, or with neither?

mode_probe.py found the 64-head prefill's time at T = 4096 moving while a process runs (a
placement's two passes up to 4.6-11.1% apart, within a second or two of timed calls). This probe
times, call after call in one process, up to three things back to back on one stream, each by its
own CUDA events:

- the L2 flush (a 512 MiB memset): the memory's write rate;
- the prefill (bench_prefill.py's inputs for --shape);
- a spin of --spin-cycles SM clock cycles (torch.cuda._sleep; 0, the default: none): its time is
  cycles / clock, so it reads the SM clock the calls around it ran at, call by call. A spin lowers
  the board's average power, and a long one hides the drift it would read (100,000 cycles add
  ~50 us to a call of ~850). A short spin reads lower (100,000 cycles read ~1,850-1,870 MHz where
  1,000,000 read ~1,968 on one H100: its launch gap, or a clock the power cap lowered, not told
  apart): compare its readings with each other.

--idle-ms makes the host sleep after each call, the GPU idle meanwhile. It prints each block of
--block calls' medians and the correlation, call by call, of the prefill's time with the flush's
and the spin's. A prefill slower where the spin is slower follows the clock; slower where the
flush is slower, the memory. The JSON file holds every call's times.

    python3 benchmarks/drift_probe.py [--shape 4096x64x512] [--calls 2000] [--block 100]
        [--spin-cycles 0] [--idle-ms 0] [--json drift.json]

docs/benchmarks.md ("What moves the prefill's time in a run: ...") has what it found.
"""
import argparse
import json
import math
import statistics
import time

import torch

import torch_ops
from bench_prefill import attention_flops, git_commit, idle_ms_arg, prefill_inputs, prepare_run, run_meta, shape_arg


def correlation(xs, ys):
    """Pearson's r of two equal-length sequences, 0 where either is constant (the statistics
    module refuses those)."""
    try:
        return statistics.correlation(xs, ys)
    except statistics.StatisticsError:
        return 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="4096x64x512", help="TxHxTOPK")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--spin-cycles", type=int, default=0,
                        help="the spin's length in SM cycles (e.g. 100000); 0: no spin and no clock reading")
    parser.add_argument("--idle-ms", type=idle_ms_arg, default=0.0,
                        help="the host sleeps this long after each call (the GPU idle meanwhile)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    num_tokens, num_heads, topk = shape_arg(parser, args.shape)
    if args.calls < 1:
        parser.error(f"--calls: expected 1 or more, got {args.calls}")
    if not 0 < args.block <= args.calls:
        parser.error(f"--block: expected 1..--calls ({args.calls}), got {args.block}")
    if args.spin_cycles < 0:
        parser.error(f"--spin-cycles: expected 0 or more, got {args.spin_cycles}")

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

    flops = attention_flops(num_tokens, num_heads, topk)
    print(f"device {device_name}, commit {git_commit()}, bf16 matmul ceiling {ceiling / 1e12:.0f} TFLOP/s, "
          f"shape {args.shape}, {args.calls} calls, spin {args.spin_cycles} cycles, idle {args.idle_ms} ms")
    print("| calls | prefill us | of matmul | SM clock MHz (spin) | flush us |")
    print("|---|---|---|---|---|")
    rows = []
    for first in range(0, args.calls - args.block + 1, args.block):
        block = slice(first, first + args.block)
        block_median = statistics.median(prefill_us[block])
        row = dict(first_call=first, calls=args.block, prefill_us=block_median,
                   of_matmul=flops / (block_median * 1e-6) / ceiling, flush_us=statistics.median(flush_us[block]))
        if args.spin_cycles:
            row["spin_clock_mhz"] = statistics.median(args.spin_cycles / us for us in spin_us[block])
        rows.append(row)
        clock = f"{row['spin_clock_mhz']:.0f}" if args.spin_cycles else "-"
        print(f"| {first}-{first + args.block - 1} | {block_median:.1f} | {row['of_matmul']:.3f} | {clock} | "
              f"{row['flush_us']:.1f} |")
    ordered = sorted(prefill_us)
    median = statistics.median(prefill_us)
    summary = dict(prefill_us_median=median, of_matmul=flops / (median * 1e-6) / ceiling,
                   prefill_us_p5=ordered[len(ordered) * 5 // 100], prefill_us_p95=ordered[len(ordered) * 95 // 100],
                   r_prefill_flush=correlation(prefill_us, flush_us))
    text = (f"\nprefill p5-p95 {summary['prefill_us_p5']:.1f}-{summary['prefill_us_p95']:.1f} us (median "
            f"{median:.1f}); r(prefill, flush) {summary['r_prefill_flush']:+.2f}")
    if args.spin_cycles:
        clocks = [args.spin_cycles / us for us in spin_us]
        summary.update(spin_clock_mhz_min=min(clocks), spin_clock_mhz_max=max(clocks),
                       r_prefill_spin=correlation(prefill_us, spin_us))
        text += (f"; spin clock {summary['spin_clock_mhz_min']:.0f}-{summary['spin_clock_mhz_max']:.0f} MHz, "
                 f"r(prefill, spin) {summary['r_prefill_spin']:+.2f}")
    print(text)
    if args.json:
        # run_meta times the matmul again now: a clock lower at the end shows there too.
        meta = run_meta(device_name, ceiling, flush, args, shape=args.shape, calls=args.calls, block=args.block,
                        spin_cycles=args.spin_cycles)
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, rows=rows, summary=summary, prefill_us=prefill_us, spin_us=spin_us,
                           flush_us=flush_us), f)


if __name__ == "__main__":
    main()
