"""Splits the 64-head Hopper kernel's time into a cost per work item and a cost per 64-candidate
block, from recorded bench_prefill.py runs (docs/hopper_kernel.md, "What would close the gap").

The kernel's persistent grid runs T * H / 64 items over the SMs, each item ceil(topk / 64) blocks;
for each (T, H) the rows' time per item and SM is fitted by least squares to
`item_us + block_us * blocks` over the topk values of the run. Rows of other kernels, dual-cache
rows, (T, H) with fewer than two topk values and (T, H) with fewer than two items an SM (the
grid is then not full and the time is one CTA's latency) are left out.

    python3 benchmarks/item_cost.py docs/data/bench_h200_86f428e.json [--sms 132]
"""
import argparse
import json
import math

BLOCK_ROWS = 64
HEADS_PER_ITEM = 64


def fit_item_cost(rows, num_sms):
    """{(T, H): (item_us, block_us, [(topk, us per item, item share of the time), ...])}."""
    groups = {}
    for row in rows:
        if row.get("kernel") != "hopper" or row.get("dual") or row["H"] % HEADS_PER_ITEM:
            continue
        items_per_sm = row["T"] * row["H"] / HEADS_PER_ITEM / num_sms
        if items_per_sm < 2:
            continue
        groups.setdefault((row["T"], row["H"]), []).append(
            (row["topk"], math.ceil(row["topk"] / BLOCK_ROWS), row["us"] / items_per_sm))
    fits = {}
    for key, points in sorted(groups.items()):
        if len({blocks for _, blocks, _ in points}) < 2:
            continue
        n = len(points)
        mean_x = sum(blocks for _, blocks, _ in points) / n
        mean_y = sum(per_item for _, _, per_item in points) / n
        sxx = sum((blocks - mean_x) ** 2 for _, blocks, _ in points)
        sxy = sum((blocks - mean_x) * (per_item - mean_y) for _, blocks, per_item in points)
        block_us = sxy / sxx
        item_us = mean_y - block_us * mean_x
        shares = [(topk, per_item, item_us / per_item) for topk, _, per_item in sorted(points)]
        fits[key] = (item_us, block_us, shares)
    return fits


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="+", help="bench_prefill.py --json files")
    parser.add_argument("--sms", type=int, default=132, help="the GPU's multiprocessors (H200: 132)")
    args = parser.parse_args()
    rows = [row for path in args.json for row in json.load(open(path))["rows"]]
    print("| T | H | us an item | us a block | topk: us an item (item share) |")
    print("|---|---|---|---|---|")
    for (num_tokens, num_heads), (item_us, block_us, shares) in fit_item_cost(rows, args.sms).items():
        detail = ", ".join(f"{topk}: {per_item:.1f} ({share:.0%})" for topk, per_item, share in shares)
        print(f"| {num_tokens} | {num_heads} | {item_us:.2f} | {block_us:.2f} | {detail} |")


if __name__ == "__main__":
    main()
