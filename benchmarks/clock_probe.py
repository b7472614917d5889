"""The SM clock and board power while a workload runs back to back, sampled by nvidia-smi.

The Hopper kernels' performance goals (docs/benchmarks.md, "Goals and where the kernels stand")
are fractions of a bf16 matmul timed in the same call; this says whether the two run at the same
clock. Each workload runs for --seconds (after a warm-up second) while nvidia-smi
samples the SM clock, power and clock-event reasons every --interval-ms; the launches are timed
with CUDA events in groups of --group calls. Two forms per workload: back to back, and with an
L2 flush (a 256 MB memset; bench_prefill.py's is 512 MB) before each call, outside its timed span.
Each row's of_matmul is its TFLOP/s over the matmul's in the same form.

    python3 benchmarks/clock_probe.py --shapes 4096x64x512 4096x128x1024 --json clocks.json
"""
import argparse
import collections
import json
import math
import statistics
import subprocess
import time

import torch

import torch_ops
from bench_prefill import git_commit

QUERY = "clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active"
# Older drivers name the last field clocks_throttle_reasons.active.
QUERY_OLD = QUERY.replace("clocks_event_reasons", "clocks_throttle_reasons")


def clock_query():
    for query in (QUERY, QUERY_OLD):
        probe = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True)
        if probe.returncode == 0 and "Field" not in probe.stdout:
            return query
    raise SystemExit(f"nvidia-smi does not answer the clock query:\n{probe.stdout}{probe.stderr}")


def sample_clocks(query, duration_s, interval_ms):
    """Starts nvidia-smi sampling for duration_s; returns the process (read with parse_samples)."""
    return subprocess.Popen(
        ["timeout", str(duration_s), "nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits",
         f"--loop-ms={interval_ms}", "-i", str(torch.cuda.current_device())],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def parse_samples(text):
    """nvidia-smi's CSV lines (the fields of the clock query, no header, no units) as dicts; lines
    that are not such a sample (a driver message) are skipped."""
    rows = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5:
            continue
        try:
            rows.append({"sm_mhz": float(parts[0]), "mem_mhz": float(parts[1]), "power_w": float(parts[2]),
                         "temp_c": float(parts[3]), "reasons": parts[4]})
        except ValueError:
            continue
    return rows


def run_for(fn, seconds, group, flush):
    """Calls fn back to back for `seconds`; returns the median time of a call (CUDA events, groups
    of `group` calls; with flush, the memset is outside the timed span of each call)."""
    times = []
    end_at = time.monotonic() + seconds
    while time.monotonic() < end_at:
        if flush is None:
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(group):
                fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) * 1e-3 / group)
        else:
            events = []
            for _ in range(group):
                flush.zero_()
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                stop.record()
                events.append((start, stop))
            events[-1][1].synchronize()
            times.extend(a.elapsed_time(b) * 1e-3 for a, b in events)
    return statistics.median(times), len(times)


def summarise(samples, settle):
    """Medians over the samples after the first `settle` fraction (the warm-up inside the window)."""
    kept = samples[int(len(samples) * settle):] or samples
    return {
        "samples": len(kept),
        "sm_mhz_median": statistics.median(s["sm_mhz"] for s in kept),
        "sm_mhz_min": min(s["sm_mhz"] for s in kept),
        "sm_mhz_max": max(s["sm_mhz"] for s in kept),
        "power_w_median": statistics.median(s["power_w"] for s in kept),
        "temp_c_max": max(s["temp_c"] for s in kept),
        "event_reasons": dict(collections.Counter(s["reasons"] for s in kept)),
    }


def add_of_matmul(rows, matmul_prefix="matmul"):
    """Sets each row's of_matmul: its TFLOP/s over the TFLOP/s of the matmul row of the same form."""
    matmul = {r["form"]: r["tflops"] for r in rows if r["workload"].startswith(matmul_prefix)}
    for row in rows:
        row["of_matmul"] = row["tflops"] / matmul[row["form"]]


def prefill_workload(tokens, heads, topk, pool=65536):
    latent = torch.randn(pool // 64, 64, 512, device="cuda").to(torch.bfloat16)
    cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent)
    q = torch.randn(tokens, heads, 512, device="cuda").to(torch.bfloat16)
    indices = torch.rand(tokens, pool, device="cuda").topk(topk, dim=1).indices.to(torch.int32)
    sink = torch.randn(heads, device="cuda")
    output = torch.empty(tokens, heads, 512, device="cuda", dtype=torch.bfloat16)
    out_lse = torch.empty(tokens, heads, device="cuda")

    def fn():
        torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(q, cache, indices, output, out_lse, 1 / math.sqrt(512),
                                                           attn_sink=sink)
    flops = 4.0 * tokens * heads * topk * 512
    return fn, flops


def matmul_workload(n=8192):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    return (lambda: torch.matmul(a, b)), 2.0 * n**3


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["4096x64x512", "4096x128x1024"],
                        help="prefill shapes TxHxTOPK (the bf16 matmul always runs first)")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--interval-ms", type=int, default=20)
    parser.add_argument("--group", type=int, default=10)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    workloads = [("matmul 8192^3 bf16", *matmul_workload())]
    for shape in args.shapes:
        t, h, k = (int(x) for x in shape.split("x"))
        workloads.append((f"prefill {t}x{h}x{k}", *prefill_workload(t, h, k)))
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    query = clock_query()
    rows = []
    for name, fn, flops in workloads:
        for form, fl in (("back to back", None), ("L2 flushed before each call", flush)):
            run_for(fn, 1.0, args.group, fl)  # warm-up: clocks and power settle
            proc = sample_clocks(query, args.seconds, args.interval_ms)
            seconds, calls = run_for(fn, args.seconds - 0.3, args.group, fl)
            raw = proc.communicate()[0]
            samples = parse_samples(raw)
            if not samples:
                raise SystemExit(f"nvidia-smi gave no samples:\n{raw}")
            summary = summarise(samples, 0.1)
            row = {"workload": name, "form": form, "call_us": seconds * 1e6, "calls": calls,
                   "tflops": flops / seconds / 1e12, **summary}
            row["cycles_per_call_at_median_clock"] = seconds * summary["sm_mhz_median"] * 1e6
            rows.append(row)
            print(f"| {name} | {form} | {row['call_us']:.1f} us | {row['tflops']:.0f} TFLOP/s | "
                  f"SM {summary['sm_mhz_median']:.0f} MHz ({summary['sm_mhz_min']:.0f}-{summary['sm_mhz_max']:.0f}) | "
                  f"{summary['power_w_median']:.0f} W | reasons {summary['event_reasons']} |", flush=True)
    add_of_matmul(rows)
    if args.json:
        meta = {"commit": git_commit(), "device": torch.cuda.get_device_name(), "torch": torch.__version__, "query": query,
                "seconds": args.seconds, "interval_ms": args.interval_ms, "group": args.group}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
