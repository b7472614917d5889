"""Where the 64-head Hopper kernel's time goes at a work-item boundary, from its development trace.

With a trace build (`CAKE_NVCC_EXTRA="-DCAKE_HOPPER_TRACE" bash benchmarks/build_extension.sh`)
every launch prints CTA 0's clock64() timeline (`TRACE role row clocks...`, the points are listed
in csrc/cuda/hopper/prefill_hopper_trace.cuh). At topk 128 an item is one pair of blocks, so the
48 traced blocks hold 24 items and the timeline shows each item's parts: the pair's work, the
epilogue (row sums exchanged, Q confirmed, its two memory steps: O out and the next Q in) and the
start of the next item (its list read, its Q landed, the first block converted).

    python3 benchmarks/trace_items.py --run > trace.log     # on the GPU, trace build
    python3 benchmarks/trace_items.py trace.log             # anywhere: the summary

--run launches T = 4096, H = 128, topk 128 twice (the second launch is the warm one the summary
uses) and prints a `LAUNCH k` line before each launch's timeline. --run-decode launches the decode
of T = 1, H = 64, 2048 candidates as planned (16 splits of two chunks, each a CTA of the 64-head
kernel), where the fixed cost of a short launch is most of the time: the summary then shows CTA
0's life (`LIFE role clocks...`: entry, barriers set up, first item's epilogue, exit) per role.
"""
import argparse
import statistics
import sys
from pathlib import Path

LEADER, FOLLOWER, DEQUANT = 0, 1, 2
# (name, row offset from the item's first block, event a, event b): clock[b] - clock[a] of the leader
LEADER_PARTS = (
    ("pair", 0, 0, 5),             # start .. pair done
    ("sums_exchanged", 1, 0, 1),   # epilogue entry .. both consumers' row sums exchanged
    ("q_confirmed", 1, 1, 2),      # .. this item's Q confirmed landed
    ("epilogue_a", 1, 2, 3),       # .. O written (see below)
    ("epilogue_b", 1, 3, 4),       # .. O stored by TMA and the next Q issued (see below)
)
# The epilogue's two memory steps changed with the TMA epilogue: before it (the recorded log of
# cf7b196), epilogue_a was issuing the next item's Q copies (cp.async) and epilogue_b the O
# stores from registers; since, epilogue_a writes O into the Q tile (or, where O does not go by
# TMA, issues the next Q and stores O from registers) and epilogue_b is the copy thread's TMA
# stores of O, their wait until the stores read the tile, and the next Q's TMA loads.


def parse_launches(text):
    """[{role: {row: [clocks]}}] per launch; lines before the first `LAUNCH` count as one launch."""
    launches, current = [], None
    for line in text.splitlines():
        if line.startswith("LAUNCH") or current is None:
            current = {}
            launches.append(current)
            if line.startswith("LAUNCH"):
                continue
        if line.startswith("TRACE"):
            _, role, row, *clocks = line.split()
            current.setdefault(int(role), {})[int(row)] = [int(c) for c in clocks]
        elif line.startswith("LIFE"):
            _, role, *clocks = line.split()
            current.setdefault("life", {})[int(role)] = [int(c) for c in clocks]
    return [launch for launch in launches if launch]


LIFE_POINTS = ("entry", "set_up", "first_epilogue", "exit")


def life_parts(launch):
    """Per role of CTA 0 (0 leader, 1 follower, 2 and 3 dequant): cycles from the earliest entry of
    any role to each of its life points (None where the role did not record the point: the
    dequant has no epilogue)."""
    life = launch.get("life", {})
    entries = [clocks[0] for clocks in life.values() if clocks and clocks[0]]
    if not entries:
        return {}
    origin = min(entries)
    return {role: {name: (clock - origin if clock else None) for name, clock in zip(LIFE_POINTS, clocks)}
            for role, clocks in sorted(life.items())}


def item_parts(launch, blocks_per_item=2):
    """Per item (first block g, each item of `blocks_per_item` blocks): the leader's parts in
    cycles, and `to_next_pair`, from O stored to the next item's pair start (the next item's list,
    its Q, its first block)."""
    leader = launch[LEADER]
    items = []
    g = 0
    while g + blocks_per_item in leader and any(leader[g + blocks_per_item]):
        first, epilogue = leader[g], leader[g + blocks_per_item - 1]
        parts = {"first_block": g}
        for name, offset, a, b in LEADER_PARTS:
            clocks = leader[g + offset] if offset else first
            parts[name] = clocks[b] - clocks[a]
        parts["to_next_pair"] = leader[g + blocks_per_item][0] - epilogue[4]
        parts["period"] = leader[g + blocks_per_item][0] - first[0]
        items.append(parts)
        g += blocks_per_item
    return items


def summary(items, skip_first=True):
    """Median of each part over the items (the first left out: the kernel's start)."""
    chosen = items[1:] if skip_first and len(items) > 1 else items
    names = [name for name, *_ in LEADER_PARTS] + ["to_next_pair", "period"]
    return {name: statistics.median(item[name] for item in chosen) for name in names}


def run_traced(num_tokens, num_heads, topk, launch):
    """Two launches of `launch(problem)` (the second is the warm one) on a problem of all-valid
    candidates, each after a `LAUNCH k` line; `launch` returns what to print after it, or None."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import torch
    from helpers import CacheSpec, make_problem
    problem = make_problem(num_tokens=num_tokens, num_heads=num_heads, topk=topk, main=CacheSpec(1024, 64),
                           device="cuda", seed=3, invalid_fraction=0.0)
    for k in range(2):
        print(f"LAUNCH {k}", flush=True)
        shown = launch(problem)
        torch.cuda.synchronize()
        if shown is not None:
            print(shown, flush=True)


def run_trace():
    def prefill(problem):
        problem.run(head_tiles=4)
    run_traced(4096, 128, 128, prefill)


def run_decode_trace():
    run_traced(1, 64, 2048, lambda problem: f"PLAN {problem.run_decode()[2]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", nargs="?", help="a trace build's output")
    parser.add_argument("--run", action="store_true", help="launch the traced problem (GPU, trace build)")
    parser.add_argument("--run-decode", action="store_true", help="launch the traced decode (GPU, trace build)")
    args = parser.parse_args()
    if args.run:
        run_trace()
        return
    if args.run_decode:
        run_decode_trace()
        return
    if not args.log:
        parser.error("give a log, or --run")
    launches = parse_launches(Path(args.log).read_text())
    if not launches:
        sys.exit(f"no TRACE lines in {args.log}: was the extension built with -DCAKE_HOPPER_TRACE?")
    life = life_parts(launches[-1])
    if life:
        print("CTA 0's life in the last launch (cycles from the first role's entry)")
        print("| role | " + " | ".join(LIFE_POINTS) + " |")
        print("|---" * (len(LIFE_POINTS) + 1) + "|")
        for role, points in life.items():
            print(f"| {role} | " + " | ".join("-" if points[name] is None else str(points[name])
                                             for name in LIFE_POINTS) + " |")
    items = item_parts(launches[-1])
    print(f"{len(items)} items of the last launch (cycles, CTA 0's leader)")
    print("| first block | " + " | ".join(name for name, *_ in LEADER_PARTS) + " | to_next_pair | period |")
    print("|---" * (len(LEADER_PARTS) + 3) + "|")
    for item in items:
        print(f"| {item['first_block']} | " + " | ".join(str(item[name]) for name, *_ in LEADER_PARTS)
              + f" | {item['to_next_pair']} | {item['period']} |")
    if items:
        medians = summary(items)
        print("median (items after the first): " + ", ".join(f"{k} {v:.0f}" for k, v in medians.items()))


if __name__ == "__main__":
    main()
