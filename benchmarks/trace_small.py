"""Where the small-heads Hopper kernel's time goes chunk by chunk, from its development trace.

With a trace build (`CAKE_NVCC_EXTRA="-DCAKE_SMALL_TRACE" bash benchmarks/device_suite.sh build`)
every launch of the small-heads kernel prints CTA 0's clock64() timeline (`STRACE role chunk
clocks...`; the points are listed in csrc/cuda/hopper_small/prefill_small_trace.cuh).

    python3 benchmarks/trace_small.py --run --heads 16 --topk 512 > trace.log   # GPU, trace build
    python3 benchmarks/trace_small.py trace.log                                 # anywhere: the summary

--run launches the prefill of T = 4096 (`--tokens`), H = 16 (`--heads`; 16 or 32, or any head count
the small-heads kernel runs) and topk 512 (`--topk`) twice, each after a `LAUNCH k` line, and
prints a `PROBLEM T H topk` line first; run it in the trace build's tree (`cd <tree> &&
PYTHONPATH=. python3 benchmarks/trace_small.py --run ...`). The summary reads the last launch and
leaves out the chunks of CTA 0's first unit (the kernel's start): the medians of each warpgroup's
steps a chunk (the attend warpgroup's `A_*`, each converter's `C0_*` / `C1_*`), of each role's
period (from one chunk's first point to the next chunk's), and of the hand-overs between them:
`k_full_seen` (the attend past k_full after the later converter's arrival), `k_empty_seen` (a
converter past its wait for the tile, after the attend's PV of the chunk two before retired) and
`s_empty_seen` (a converter past its wait for the S buffer, after the attend's softmax of the chunk
before). Each role's chunks that a unit boundary touches are summarised apart (`boundary`): the
attend's last chunk of a unit (its period holds the unit's epilogue), the converters' first two
(the first loads the unit's Q, the second waits for the attend's first softmax after the
epilogue); the converters' hand-overs count as theirs.

--run-decode launches the decode of --tokens x --heads x --topk candidates as planned instead (its
splits run this kernel where the plan splits into two chunks or more and the heads are not a
multiple of 64). The summary then also prints CTA 0's life (`LIFE` lines: each role's entry,
set-up, first epilogue and exit) and its first chunks' points from the same origin: a decode
split's CTA has no chunk after its first unit.
"""
import argparse
import sys
from pathlib import Path

import trace_items
from trace_items import medians, problem_of

ATTEND, CONVERTER0, CONVERTER1 = 0, 1, 2
ATTEND_STEPS = (("A_wait_k_full", 0, 1), ("A_softmax", 1, 2), ("A_barrier", 2, 3), ("A_pv_issue", 3, 4),
                ("A_pv", 4, 5), ("A_table", 5, 6))
CONVERTER_STEPS = (("rows", 0, 1), ("wait_k_empty", 1, 2), ("convert", 2, 3), ("wait_s_empty", 3, 4),
                   ("store_s", 4, 5))
# Inside a converter's conversion (points 6 and 7, in trace builds since 66c623c; absent before):
# its first half of the NoPE group slots (converter 1's RoPE k-steps first at 16 heads a unit),
# the second half, and the rest (the last wgmmas retired; at 32 heads a unit also converter 1's
# RoPE k-steps and their next loads).
CONVERT_PARTS = (("convert_first", 2, 6), ("convert_second", 6, 7), ("convert_tail", 7, 3))
HANDOVERS = ("k_full_seen", "k_empty_seen", "s_empty_seen")
TRACE_EVENTS = 8  # points a role and chunk (kTraceEvents)
# The points each role records (the last of its steps' points, plus one).
ATTEND_POINTS = 1 + max(b for _, _, b in ATTEND_STEPS)
CONVERTER_POINTS = 1 + max(b for _, _, b in CONVERTER_STEPS)


def parse_launches(text):
    """[{role: {chunk: [clocks]}}] per launch (trace_items.parse_launches of the `STRACE` lines)."""
    return trace_items.parse_launches(text, prefix="STRACE", min_clocks=TRACE_EVENTS)


def chunk_parts(launch, chunks_per_unit):
    """Per chunk of CTA 0 after its first unit (every role recorded): the steps, each role's
    `*_period` (to its next chunk's first point) and the hand-overs, in cycles, and whether a unit
    boundary touches the chunk for the attend (`A_boundary`: a unit's last chunk) and for the
    converters (`C_boundary`: a unit's first two)."""
    attend = launch.get(ATTEND, {})
    converters = [launch.get(CONVERTER0, {}), launch.get(CONVERTER1, {})]
    rows = []
    for chunk in sorted(attend):
        if chunk < chunks_per_unit or not all(chunk in c for c in converters):
            continue
        clocks = {"A": attend[chunk], "C0": converters[0][chunk], "C1": converters[1][chunk]}
        if not all(clocks["A"][:ATTEND_POINTS]) or not all(all(clocks[r][:CONVERTER_POINTS]) for r in ("C0", "C1")):
            continue
        part = {"chunk": chunk, "A_boundary": chunk % chunks_per_unit == chunks_per_unit - 1,
                "C_boundary": chunk % chunks_per_unit in (0, 1)}
        for name, a, b in ATTEND_STEPS:
            part[name] = clocks["A"][b] - clocks["A"][a]
        for role in ("C0", "C1"):
            for name, a, b in CONVERTER_STEPS:
                part[f"{role}_{name}"] = clocks[role][b] - clocks[role][a]
            if clocks[role][6] and clocks[role][7]:
                for name, a, b in CONVERT_PARTS:
                    part[f"{role}_{name}"] = clocks[role][b] - clocks[role][a]
        for role, table in (("A", attend), ("C0", converters[0]), ("C1", converters[1])):
            later = table.get(chunk + 1)
            if later and later[0]:
                part[f"{role}_period"] = later[0] - clocks[role][0]
        part["k_full_seen"] = clocks["A"][1] - max(clocks["C0"][5], clocks["C1"][5])
        before = attend.get(chunk - 2)
        if before and before[5]:
            part["k_empty_seen"] = min(clocks["C0"][2], clocks["C1"][2]) - before[5]
        previous = attend.get(chunk - 1)
        if previous and previous[2]:
            part["s_empty_seen"] = min(clocks["C0"][4], clocks["C1"][4]) - previous[2]
        rows.append(part)
    return rows


def step_names():
    names = [name for name, *_ in ATTEND_STEPS] + ["A_period"]
    for role in ("C0", "C1"):
        names += [f"{role}_{name}" for name, *_ in CONVERTER_STEPS + CONVERT_PARTS] + [f"{role}_period"]
    return names + list(HANDOVERS)


def summary(rows):
    """Medians over each role's chunks away from a unit boundary (`steady`) and over those a
    boundary touches (`boundary`; chunk_parts)."""
    out = {"steady": {}, "boundary": {}}
    for name in step_names():
        flag = "A_boundary" if name.startswith("A_") else "C_boundary"
        for kind, wanted in (("steady", False), ("boundary", True)):
            out[kind].update(medians([r for r in rows if r[flag] == wanted], [name]))
    return out


def format_table(title, values):
    names = [name for name in values if values[name] is not None]
    return [title, "| " + " | ".join(names) + " |", "|" + "---|" * len(names),
            "| " + " | ".join(f"{values[name]:.0f}" for name in names) + " |"]


def run_trace(num_tokens, num_heads, topk):
    print(f"PROBLEM {num_tokens} {num_heads} {topk}", flush=True)
    trace_items.run_traced(num_tokens, num_heads, topk, lambda problem: f"PLAN {problem.run()[2]}")


def run_decode_trace(num_tokens, num_heads, candidates):
    """The decode as planned (its splits run this kernel's split form where the plan splits into
    two chunks or more and the 64-head kernel does not serve the heads)."""
    print(f"PROBLEM {num_tokens} {num_heads} {candidates}", flush=True)
    trace_items.run_traced(num_tokens, num_heads, candidates, lambda problem: f"PLAN {problem.run_decode()[2]}")


def first_chunks(launch, chunks=4):
    """CTA 0's points of its first `chunks` chunks, per role, in cycles from the first role's entry
    (the life points' origin; None where not recorded): where a short launch spends its time."""
    life = launch.get("life", {})
    entries = [clocks[0] for clocks in life.values() if clocks and clocks[0]]
    if not entries:
        return {}
    origin = min(entries)
    out = {}
    for role in (ATTEND, CONVERTER0, CONVERTER1):
        for chunk, clocks in sorted(launch.get(role, {}).items()):
            if chunk < chunks and any(clocks):
                out[(role, chunk)] = [clock - origin if clock else None for clock in clocks]
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", nargs="?", help="a trace build's output")
    parser.add_argument("--run", action="store_true", help="launch the traced problem (GPU, trace build)")
    parser.add_argument("--tokens", type=int, default=4096, help="--run: T (default 4096)")
    parser.add_argument("--heads", type=int, default=16, help="--run: H (default 16)")
    parser.add_argument("--topk", type=int, default=512, help="--run: candidates, a multiple of 64 (default 512)")
    parser.add_argument("--run-decode", action="store_true",
                        help="launch the traced decode of --tokens x --heads x --topk candidates, as planned (GPU, trace build)")
    args = parser.parse_args(argv)
    if args.run:
        run_trace(args.tokens, args.heads, args.topk)
        return 0
    if args.run_decode:
        run_decode_trace(args.tokens, args.heads, args.topk)
        return 0
    if not args.log:
        parser.error("a log to summarise, or --run")
    text = Path(args.log).read_text()
    launches = parse_launches(text)
    if not launches:
        print(f"trace_small.py: no STRACE lines in {args.log}", file=sys.stderr)
        return 2
    problem = problem_of(text)
    life = trace_items.life_parts(launches[-1])
    if life:
        names = ("entry", "set_up", "first_epilogue", "exit")
        print("CTA 0's life in the last launch (cycles from the first role's entry; role 0 attend, 1 and 2 converters)")
        print("| role | " + " | ".join(names) + " |")
        print("|---" * (len(names) + 1) + "|")
        for role, points in life.items():
            print(f"| {role} | " + " | ".join("-" if points[name] is None else str(points[name]) for name in names) + " |")
        print("CTA 0's first chunks (points as in csrc/cuda/hopper_small/prefill_small_trace.cuh, same origin)")
        for (role, chunk), points in first_chunks(launches[-1]).items():
            print(f"role {role} chunk {chunk}: " + " ".join("-" if p is None else str(p) for p in points))
    chunks_per_unit = max(1, -(-problem[2] // 64)) if problem else 8  # a list's chunks: rounded up
    rows = chunk_parts(launches[-1], chunks_per_unit)
    if not rows:
        print(f"trace_small.py: no chunk after CTA 0's first unit with every point in {args.log}", file=sys.stderr)
        return 2
    medians_by_kind = summary(rows)
    print(f"{len(rows)} chunks of CTA 0 after its first unit ({chunks_per_unit} chunks a unit), medians in cycles")
    for kind, values in medians_by_kind.items():
        if any(value is not None for value in values.values()):
            print("\n".join(format_table(f"{kind} chunks", values)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
