"""Do a process's two timing modes follow where its tensors sit, or when it runs?

The 64-head prefill's rounds at T = 4096 fall in two modes about 2.5% apart (docs/benchmarks.md,
"One tree under two labels"): a process, and every row it times, tends to stay in one. This probe
times one shape in one process on several placements of the same inputs: each placement is a
fresh copy of the cache pool, q, the indices, the sink and the outputs, allocated behind a spacer
of its own size so that its tensors land at other addresses (and on other physical pages). Every
placement is timed twice, the second pass in the reverse order, so that a drift in time and a
dependence on the placement read differently:

- times that follow the placement: each placement's two passes agree, and the placements differ;
- times that follow the time: the passes differ as a whole (or by when a placement ran), and a
  placement's two passes do not agree better than two placements do.

    python3 benchmarks/mode_probe.py [--shape 4096x64x512] [--placements 8] [--repeats 10] [--json modes.json]

Method and inputs as bench_prefill.py (its prepare_run and timed_median: the L2 flushed before
every timed launch, the bf16 matmul in the same run); the values of every placement are the same,
only their addresses change. Memory: about placements x (q + output) bytes (T = 4096, H = 64:
512 MiB a placement).
"""
import argparse
import json
import math
import statistics

import torch

import torch_ops
from bench_prefill import POOL_TOKENS, prepare_run, run_meta, timed_median

MIB = 1 << 20


def parse_shape(text):
    """"TxHxTOPK" -> (T, H, topk), ValueError naming --shape otherwise."""
    try:
        num_tokens, num_heads, topk = (int(x) for x in text.split("x"))
    except ValueError:
        raise ValueError(f"--shape: expected TxHxTOPK (e.g. 4096x64x512), got {text!r}") from None
    if min(num_tokens, num_heads, topk) < 1:
        raise ValueError(f"--shape: every part must be positive, got {text!r}")
    return num_tokens, num_heads, topk


def spacer_bytes(placement):
    """The spacer allocated before placement k's tensors: k whole 2 MiB pages and k odd 64 KiB
    steps, so that the placements' addresses differ modulo 2 MiB as well as by whole pages."""
    return placement * (2 * MIB + 3 * 64 * 1024)


def summarise(first, second):
    """What two passes' medians (us, by placement) say. `between`: the spread of the placements'
    means over their median; `within`: the median over placements of |first - second| over their
    mean; `pass_shift`: the second pass's median over the first's, less 1. The verdict names the
    placement only where the placements differ by more than twice what a placement's own passes do
    and by at least 1%; the time where the passes moved as a whole by at least 1%; else neither."""
    if len(first) != len(second) or len(first) < 2:
        raise ValueError("summarise: expected two passes over the same two or more placements")
    means = [(a + b) / 2 for a, b in zip(first, second)]
    between = (max(means) - min(means)) / statistics.median(means)
    within = statistics.median(abs(a - b) / m for a, b, m in zip(first, second, means))
    pass_shift = statistics.median(second) / statistics.median(first) - 1
    if between >= 0.01 and between > 2 * within:
        verdict = "placement"
    elif abs(pass_shift) >= 0.01:
        verdict = "time"
    else:
        verdict = "neither"
    return dict(between=between, within=within, pass_shift=pass_shift, verdict=verdict)


def place(source, spacer):
    """Fresh copies of `source`'s tensors, allocated after a spacer of `spacer` bytes (kept with
    them, so that the allocator does not hand its room to the copies)."""
    placed = {"spacer": torch.empty(max(spacer, 1), dtype=torch.uint8, device="cuda")}
    for name, tensor in source.items():
        placed[name] = tensor.clone()
    return placed


def addresses(placed):
    """Each tensor's address and its offset inside a 2 MiB page."""
    return {name: dict(address=hex(t.data_ptr()), in_2mib=t.data_ptr() % (2 * MIB))
            for name, t in placed.items() if name != "spacer"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="4096x64x512", help="TxHxTOPK")
    parser.add_argument("--placements", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    try:
        num_tokens, num_heads, topk = parse_shape(args.shape)
    except ValueError as error:
        parser.error(str(error))
    if args.placements < 2:
        parser.error(f"--placements: expected 2 or more, got {args.placements}")

    flush, ceiling, device_name, _, cache = prepare_run()
    sm_scale = 1 / math.sqrt(512)
    source = dict(
        cache=cache,
        q=torch.randn(num_tokens, num_heads, 512, device="cuda").to(torch.bfloat16),
        indices=torch.rand(num_tokens, POOL_TOKENS, device="cuda").topk(topk, dim=1).indices.to(torch.int32),
        sink=torch.randn(num_heads, device="cuda"),
        output=torch.empty(num_tokens, num_heads, 512, device="cuda", dtype=torch.bfloat16),
        out_lse=torch.empty(num_tokens, num_heads, device="cuda"),
    )
    placements = [place(source, spacer_bytes(k)) for k in range(args.placements)]
    del source
    flops = 4 * num_tokens * num_heads * topk * 512

    def time_placement(p):
        def run():
            torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(p["q"], p["cache"], p["indices"], p["output"],
                                                               p["out_lse"], sm_scale, attn_sink=p["sink"])

        return timed_median(run, args.repeats, args.warmup, flush) * 1e6

    order = list(range(args.placements))
    first = {k: time_placement(placements[k]) for k in order}
    second = {k: time_placement(placements[k]) for k in reversed(order)}
    rows = []
    print(f"device {device_name}, bf16 matmul {ceiling / 1e12:.0f} TFLOP/s, shape {args.shape}")
    print("| placement | spacer MiB | cache in 2 MiB | q in 2 MiB | pass 1 us | pass 2 us | pass 2 / 1 |")
    print("|---|---|---|---|---|---|---|")
    for k in order:
        where = addresses(placements[k])
        row = dict(placement=k, spacer_bytes=spacer_bytes(k), addresses=where, pass1_us=first[k], pass2_us=second[k],
                   of_matmul_pass1=flops / (first[k] * 1e-6) / ceiling)
        rows.append(row)
        print(f"| {k} | {spacer_bytes(k) / MIB:.2f} | {where['cache']['in_2mib']} | {where['q']['in_2mib']} | "
              f"{first[k]:.1f} | {second[k]:.1f} | {second[k] / first[k]:.3f} |", flush=True)
    summary = summarise([first[k] for k in order], [second[k] for k in order])
    reading = {"placement": "the times follow the placement", "time": "the times follow the time",
               "neither": "neither reading holds"}[summary["verdict"]]
    print(f"\nbetween placements {summary['between']:.2%}, within a placement {summary['within']:.2%}, "
          f"pass 2 over pass 1 {summary['pass_shift']:+.2%}: {reading}")
    if args.json:
        meta = run_meta(device_name, ceiling, flush, args, shape=args.shape)
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, rows=rows, summary=summary), f, indent=1)


if __name__ == "__main__":
    main()
