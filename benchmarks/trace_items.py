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

`--run --topk 512` (or 1024; `--heads`, `--tokens` likewise) traces longer items: 48 blocks are
6 items of 8 blocks (3 of 16). `--run` prints a `PROBLEM T H topk` line, from which the summary
takes the item's block count (2 where a log has none: logs from before the option). Besides the
item table it then prints where a pair's time goes in steady state (the pairs of every item but
the first, medians over them): each consumer's steps, and each dequant block's waits for its
tile and its conversions, the measure of whether the dequant or the consumers hold the pair up
(with the low half's wait after the block top's bookkeeping, `D_wait_after_book`, and its min /
median / max: near its floor of ~80 cycles the tile was free before the bookkeeping ended; and,
in a log of the removed development build `-DCAKE_HOPPER_FOLLOWER_HIGH`, recorded in
`docs/data/hopper_trace_h200_*follower_high*.log`, `F_own_high`: from the follower's start to its
own block's high half written, a part of `F_scores`);
the softmax steps split by the consumers' points 6 and 7 where a log has them (`L_ref_weights`,
`L_store_pv_issue`, `L_fence_hand_over`; `F_softmax_math`, `F_store_fence`, `F_publish_wait`);
the follower's scores step split by its points 8 to 10 where a log has them (`F_issue_wait`:
kScoresIssued, its block's halves and the QK^T's issue, in two where the log has point 10:
`F_high_wait` to its block's high half seen, `F_high_issue` the rest of the issue;
`F_reference_wait`: the first block's high half and kReferenceReady; `F_retire`);
a table of each pair's blocks against the leader's start of the pair (cycles after it: the first
block's high half written, the second block's top, bookkeeping done, halves free and written (the
high half by each dequant warpgroup's thread 0, and by its last warp where the log has that point),
the follower's block's high half seen, its QK^T issued and kReferenceReady passed (logs with those
points), its QK^T done, the pair's end), which says whether the follower's QK^T waits for its block
and what of that block's conversion runs after the pair began, then the same over the items' first
pairs alone (their second block's tile held the previous item's O: its halves free say when the O
stores left it); and a "dequant load" line over the steady pairs (an item's third pair on, not its last): the dequant's time for a pair's two blocks,
its waits in them, the leader's period and how soon after the dequant wrote a pair's first block
the leader starts it.

`--fused LOG` summarises a trace of the fused 64-head kernel instead (branch builds with
`-DCAKE_HOPPER_FUSED=1 -DCAKE_HOPPER_TRACE`; `--run` traces it as it does the 64-head kernel):
medians over the items after the first of each block's converter steps (its tile back, the NoPE
steps, the RoPE steps, the reference handed on, the weights handed to PV), the period of a
converter's blocks, PV's wait and MMAs a block, the converters' item starts and PV's item ends;
then each converter's items whole: from its first block's top in an item to its first in the
next, and its block periods split into those within an item (`steady_period`) and those from an
item's last block of the converter to its first of the next (`boundary_period`), whose excess over
the steady ones is what an item boundary costs. A trace of the form with the softmax on the PV
warpgroups (its PV rows record point 6) is read with that form's steps: the converters' wait for
the S tile and logits handed over, PV's softmax and MMAs.
"""
import argparse
import statistics
import sys
from pathlib import Path

LEADER, FOLLOWER, DEQUANT = 0, 1, 2
# (name, row, event a, event b): clock[b] - clock[a] of the leader, in the item's first pair's
# row ("first") or its last block's ("epilogue"); "pair" runs from the first pair's start to the
# last pair's end (the item's only pair at topk 128).
LEADER_PARTS = (
    ("pair", "first", 0, 5),                # start .. the last pair done
    ("sums_exchanged", "epilogue", 0, 1),   # epilogue entry .. both consumers' row sums exchanged
    ("q_confirmed", "epilogue", 1, 2),      # .. this item's Q confirmed landed
    ("epilogue_a", "epilogue", 2, 3),       # .. O written (see below)
    ("epilogue_b", "epilogue", 3, 4),       # .. O stored by TMA and the next Q issued (see below)
)
# What the epilogue's two steps hold changed with the kernel: in the recorded log of cf7b196,
# epilogue_a issued the next item's Q copies (cp.async) and epilogue_b stored O from registers; in
# abf6f3a's, epilogue_a wrote O into the Q tile and epilogue_b was the copy thread's TMA stores
# of O, their wait until the stores read the tile, and the next Q's TMA loads; since a287762
# (whole lists), epilogue_a is the rows' scales and LSE and epilogue_b the O stores from
# registers (the next Q is loaded in the item's last pair, and q_confirmed waits for nothing);
# with O through the item's last K tile (since 6d2376b), epilogue_b is O written into the tile,
# the leader's hand-over and (the follower) the TMA stores' issue, and the stores' drain shows in
# the follower's scores step of the next item's first pair.


def parse_launches(text, prefix="TRACE", min_clocks=0):
    """[{role: {row: [clocks]}}] per launch; lines before the first `LAUNCH` count as one launch.
    The timeline's lines start with `prefix` (benchmarks/trace_small.py reads `STRACE` lines); one
    with fewer than `min_clocks` clocks (cut short) is left out."""
    launches, current = [], None
    for line in text.splitlines():
        if line.startswith("LAUNCH") or current is None:
            current = {}
            launches.append(current)
            if line.startswith("LAUNCH"):
                continue
        words = line.split()
        if words and words[0] == prefix and len(words) >= 3 + min_clocks:
            current.setdefault(int(words[1]), {})[int(words[2])] = [int(c) for c in words[3:]]
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
        for name, row, a, b in LEADER_PARTS:
            clocks = epilogue if row == "epilogue" else first
            parts[name] = clocks[b] - clocks[a]
        parts["pair"] = leader[g + blocks_per_item - 2][5] - first[0]
        parts["to_next_pair"] = leader[g + blocks_per_item][0] - epilogue[4]
        parts["period"] = leader[g + blocks_per_item][0] - first[0]
        items.append(parts)
        g += blocks_per_item
    return items


# A pair's steps (name, role, event a, event b): clock[b] - clock[a] in the pair's row. Leader
# events: 0 start, 1 QK^T done, 2 weights handed over, 3 its own PV retired, 4 the follower's
# hand-over seen, 5 pair done; follower: 0 start, 1 QK^T done (and, since it waits for the
# leader's reference while its QK^T runs, that reference loaded), 2 the leader's reference taken
# (the move to it done), 3 its weights stored, 4 its PV of the leader's block retired (hand-over
# done), 5 pair done.
PAIR_STEPS = (
    ("pair", LEADER, 0, 5),
    ("L_scores", LEADER, 0, 1),          # waits for the block's halves, then QK^T
    ("L_softmax", LEADER, 1, 2),         # and the issue of its own PV (before the hand-over)
    ("L_own_pv", LEADER, 2, 3),          # the rest of that PV, to its retire
    ("L_wait_follower", LEADER, 3, 4),   # kWeightsReady + 1
    ("L_other_pv", LEADER, 4, 5),
    ("F_scores", FOLLOWER, 0, 1),        # kScoresIssued, the block's halves, QK^T, kReferenceReady
    ("F_wait_reference", FOLLOWER, 1, 2),  # the move to the leader's reference
    ("F_softmax", FOLLOWER, 2, 3),
    ("F_leader_pv", FOLLOWER, 3, 4),
    ("F_own_pv", FOLLOWER, 4, 5),
)
# The softmax steps split by the consumers' points 6 and 7 of a pair's row (logs from 2026-12-05
# on; older logs have zeros there and the summary leaves these out). Leader: 1 QK^T done, 6 its
# reference moved and its weights formed, 7 its weights stored (stmatrix) and its own PV issued, 2
# fenced and handed over; follower: 2 the leader's reference taken, 6 its softmax done, 7 its
# weights stored and fenced, 3 its reference published and the leader's weights seen.
SOFTMAX_SPLIT = (
    ("L_ref_weights", LEADER, 1, 6),
    ("L_store_pv_issue", LEADER, 6, 7),
    ("L_fence_hand_over", LEADER, 7, 2),
    ("F_softmax_math", FOLLOWER, 2, 6),
    ("F_store_fence", FOLLOWER, 6, 7),
    ("F_publish_wait", FOLLOWER, 7, 3),
)
# The follower's scores step split by its points 8 to 10 (logs of 10 points a row from `d8d664e`
# on, 11 from `c83ea83` on): 0 start, 10 past the barrier of its block's high half, before the
# proxy fence (the low half's QK^T issued before it; logs of 11 points), 8 its whole QK^T issued,
# 9 past kReferenceReady (the first block's high half and the leader's reference), 1 its QK^T
# retired (and the reference loaded). Logs of 10 points have F_issue_wait for the first two steps.
SCORES_SPLIT = (
    ("F_issue_wait", FOLLOWER, 0, 8),
    ("F_high_wait", FOLLOWER, 0, 10),
    ("F_high_issue", FOLLOWER, 10, 8),
    ("F_reference_wait", FOLLOWER, 8, 9),
    ("F_retire", FOLLOWER, 9, 1),
)
SCORES_SPLIT_POINTS = 10
# In logs of the removed CAKE_HOPPER_FOLLOWER_HIGH builds (docs/data; 9 points a row): from the
# follower's start to its own block's high half written (its point 8).
FOLLOWER_OWN_HIGH = "F_own_high"
FOLLOWER_HIGH_POINTS = 9
# A dequant block's steps (role 2, the first half of the rows; events 0 top, 1 low half free, 3
# low half written, 4 high half free, 2 high half written; 5 the next block's row source known and
# 6 the bookkeeping for the next blocks done, which a block does at its top (before 1) or after
# its conversion (after 2); logs from before points 5 and 6 have zeros there).
BLOCK_STEPS = (
    ("D_wait_low", 0, 1),      # from the top: the consumers' release of the tile's low half (two blocks back), and the bookkeeping where it is at the top
    ("D_convert_low", 1, 3),
    ("D_wait_high", 3, 4),
    ("D_convert_high", 4, 2),
)
# The bookkeeping's two parts: from its start (the top, or the high half written) to point 5, and 5 to 6.
BOOK_STEPS = ("D_book_source", "D_book_cursor")
# Where the bookkeeping is at the block's top: the low half's wait after it (point 6 to 1). Its floor
# is the wait's own cost on a barrier already passed, so a median near the floor says the tile was
# free before the bookkeeping ended: the bookkeeping, not the consumers, held the conversion up.
AFTER_BOOK_WAIT = "D_wait_after_book"


def pair_parts(launch, blocks_per_item):
    """Per pair of every item but the first (steady state): the PAIR_STEPS in cycles, and
    `to_next`, from the pair's end to the next pair's start within the item (None for an item's
    last pair)."""
    leader, follower = launch.get(LEADER, {}), launch.get(FOLLOWER, {})
    pairs = []
    for first in range(blocks_per_item, max(leader, default=0) + 1, blocks_per_item):
        for row in range(first, first + blocks_per_item, 2):
            if not any(leader.get(row, [])) or not any(follower.get(row, [])):
                continue
            clocks = {LEADER: leader[row], FOLLOWER: follower[row]}
            parts = {"row": row}
            for name, role, a, b in PAIR_STEPS:
                parts[name] = clocks[role][b] - clocks[role][a]
            # A split's step where the log's rows are long enough (the scores split: logs with its
            # points, whose rows hold SCORES_SPLIT_POINTS or more) and both points were reached.
            for steps, min_points in ((SOFTMAX_SPLIT, 0), (SCORES_SPLIT, SCORES_SPLIT_POINTS)):
                for name, role, a, b in steps:
                    have = (len(clocks[role]) >= max(min_points, a + 1, b + 1)
                            and clocks[role][a] and clocks[role][b])
                    parts[name] = clocks[role][b] - clocks[role][a] if have else None
            # A CAKE_HOPPER_FOLLOWER_HIGH log's follower point 8: its own block's high half
            # written, part of F_scores (other logs have no point 8, or a zero there).
            own_high = follower[row][8] if len(follower[row]) == FOLLOWER_HIGH_POINTS else 0
            parts[FOLLOWER_OWN_HIGH] = own_high - follower[row][0] if own_high else None
            following = leader.get(row + 2, [])
            parts["to_next"] = (following[0] - leader[row][5]
                                if row + 2 < first + blocks_per_item and any(following) else None)
            pairs.append(parts)
    return pairs


def block_parts(launch, blocks_per_item):
    """Per dequant block (warpgroup 2) of every item but the first: the BLOCK_STEPS and BOOK_STEPS
    in cycles, `to_next_top` (from the high half written to the next block's top), `D_waiting`
    (its waits for the consumers to free a half) and `second` (whether the block is the second of
    its pair: odd within its item)."""
    dequant = launch.get(DEQUANT, {})
    blocks = []
    for row in sorted(dequant):
        clocks = dequant[row]
        if row < blocks_per_item or not any(clocks):
            continue
        parts = {"row": row, "second": (row % blocks_per_item) % 2 == 1}
        for name, a, b in BLOCK_STEPS:
            parts[name] = clocks[b] - clocks[a] if clocks[a] and clocks[b] else None
        book_start = clocks[0] if clocks[5] <= clocks[1] else clocks[2]
        parts["D_book_source"] = clocks[5] - book_start if clocks[5] else None
        parts["D_book_cursor"] = clocks[6] - clocks[5] if clocks[5] and clocks[6] else None
        following = dequant.get(row + 1, [])
        parts["to_next_top"] = following[0] - clocks[2] if any(following) else None
        # The block's waiting for the consumers to free a half: the high half's wait, and the low
        # half's after the bookkeeping where it is at the top (else from the top: logs without the
        # bookkeeping's points, or with it after the conversion).
        bookkeeping_at_top = clocks[6] and clocks[1] and clocks[6] <= clocks[1]
        parts[AFTER_BOOK_WAIT] = clocks[1] - clocks[6] if bookkeeping_at_top else None
        low_wait = clocks[1] - (clocks[6] if bookkeeping_at_top else clocks[0])
        parts["D_waiting"] = (low_wait + parts["D_wait_high"]
                              if clocks[1] and parts["D_wait_high"] is not None else None)
        blocks.append(parts)
    return blocks


def dequant_load(launch, blocks_per_item):
    """Whether the dequant holds the pairs up, in steady state: over the pairs of the items after
    the first from an item's third on (the dequant converts an item's first pair during the epilogue
    before, and catches up with the consumers over its second) but its last (whose successor is
    converted during the epilogue), medians of the dequant's time for the pair's two blocks (the first
    block's top to the next pair's first block's top), of its waiting for the consumers in them
    (each high half's wait, and each low half's after the bookkeeping; from the top where the log
    has no bookkeeping points: an upper bound), of the leader's period (its start of the pair to
    its start of the next), and of how long after the dequant wrote the pair's first block (its
    high half) the leader starts the pair (a leader that starts right after waits for it)."""
    leader, dequant = launch.get(LEADER, {}), launch.get(DEQUANT, {})
    blocks = {block["row"]: block for block in block_parts(launch, blocks_per_item)}
    rows = []
    for first in range(blocks_per_item, max(leader, default=0) + 1, blocks_per_item):
        for row in range(first + 4, first + blocks_per_item - 2, 2):
            needed = (blocks.get(row), blocks.get(row + 1), dequant.get(row + 2), leader.get(row), leader.get(row + 2))
            if not all(needed) or not all(any(x) if isinstance(x, list) else True for x in needed):
                continue
            waits = [blocks[r]["D_waiting"] for r in (row, row + 1)]
            rows.append({"dequant": dequant[row + 2][0] - dequant[row][0],
                         "waiting": None if None in waits else sum(waits),
                         "leader": leader[row + 2][0] - leader[row][0],
                         "leader_after_block": leader[row][0] - dequant[row][2]})
    if not rows:
        return None
    load = medians(rows, ["dequant", "waiting", "leader", "leader_after_block"])
    load["pairs"] = len(rows)
    return load


# The pair's second block against the pair, in steady state: each point's clock minus the leader's
# start of the pair (negative: before it). The second block's tile is the one the previous pair
# frees last, so its conversion can start only late; these say whether the follower's QK^T waits
# for it (F_scores_done a little after D2_high_written) and what of it runs after the pair began
# (its top, the bookkeeping at the top, each half's wait for its tile and its conversion).
SECOND_BLOCK_POINTS = (
    ("D1_high_written", DEQUANT, 0, 2),   # the pair's first block ready (the leader's QK^T waits for it)
    ("D2_top", DEQUANT, 1, 0),
    ("D2_book_done", DEQUANT, 1, 6),      # logs with the block top's bookkeeping points only
    ("D2_low_free", DEQUANT, 1, 1),
    ("D2_low_written", DEQUANT, 1, 3),
    ("D2_high_free", DEQUANT, 1, 4),
    ("D2_high_written", DEQUANT, 1, 2),
    ("D2_high_written_wg3", DEQUANT + 1, 1, 2),  # the other dequant warpgroup's rows (the barrier waits for both)
    ("D2_high_last_warp", DEQUANT, 1, 7),         # the last warp of each warpgroup (logs from 2026-12-06 on)
    ("D2_high_last_warp_wg3", DEQUANT + 1, 1, 7),
    ("F_high_seen", FOLLOWER, 0, 10),     # past its block's high half barrier (logs of 11 points a row)
    ("F_issued", FOLLOWER, 0, 8),         # logs with the follower's scores points (10 a row) only
    ("F_reference_seen", FOLLOWER, 0, 9),
    ("F_scores_done", FOLLOWER, 0, 1),    # the follower's QK^T of that block retired
    ("L_pair_done", LEADER, 0, 5),
)


def second_block_timeline(launch, blocks_per_item):
    """Per pair of every item but the first: SECOND_BLOCK_POINTS (name, role, block offset within
    the pair, event), in cycles after the leader's start of the pair, None where the log has no
    such point; `row` is the pair's first block."""
    leader, follower, dequant = launch.get(LEADER, {}), launch.get(FOLLOWER, {}), launch.get(DEQUANT, {})
    roles = {LEADER: leader, FOLLOWER: follower, DEQUANT: dequant, DEQUANT + 1: launch.get(DEQUANT + 1, {})}
    rows = []
    for first in range(blocks_per_item, max(leader, default=0) + 1, blocks_per_item):
        for row in range(first, first + blocks_per_item, 2):
            needed = (leader.get(row), follower.get(row), dequant.get(row), dequant.get(row + 1))
            if not all(clocks and any(clocks) for clocks in needed):
                continue
            start = leader[row][0]
            parts = {"row": row}
            for name, role, offset, event in SECOND_BLOCK_POINTS:
                clocks = roles[role].get(row + offset, [])
                known = len(clocks) > event and (event < 8 or len(clocks) >= SCORES_SPLIT_POINTS)
                parts[name] = clocks[event] - start if known and clocks[event] else None
            rows.append(parts)
    return rows


def medians(rows, names):
    out = {}
    for name in names:
        values = [row[name] for row in rows if row.get(name) is not None]
        out[name] = statistics.median(values) if values else None
    return out


def problem_of(text):
    """(T, H, topk) from a `PROBLEM` line, or None."""
    for line in text.splitlines():
        if line.startswith("PROBLEM"):
            _, tokens, heads, topk = line.split()
            return int(tokens), int(heads), int(topk)
    return None


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


def run_trace(num_tokens=4096, num_heads=128, topk=128):
    def prefill(problem):
        problem.run(head_tiles=4)
    print(f"PROBLEM {num_tokens} {num_heads} {topk}", flush=True)
    run_traced(num_tokens, num_heads, topk, prefill)


def run_decode_trace():
    run_traced(1, 64, 2048, lambda problem: f"PLAN {problem.run_decode()[2]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", nargs="?", help="a trace build's output")
    parser.add_argument("--run", action="store_true", help="launch the traced problem (GPU, trace build)")
    parser.add_argument("--run-decode", action="store_true", help="launch the traced decode (GPU, trace build)")
    parser.add_argument("--tokens", type=int, default=4096, help="--run: T (default 4096)")
    parser.add_argument("--heads", type=int, default=128, help="--run: H, a multiple of 64 (default 128)")
    parser.add_argument("--topk", type=int, default=128, help="--run: candidates, a multiple of 128 (default 128)")
    parser.add_argument("--fused", action="store_true",
                        help="the log is the fused 64-head kernel's (a CAKE_HOPPER_FUSED trace build): its steps")
    args = parser.parse_args()
    if args.run:
        if args.heads % 64 or args.topk % 128 or not 0 < args.topk <= 1024:
            parser.error("--run traces the 64-head kernel: --heads a multiple of 64, --topk a multiple of 128 up to 1024")
        run_trace(args.tokens, args.heads, args.topk)
        return
    if args.run_decode:
        run_decode_trace()
        return
    if not args.log:
        parser.error("give a log, or --run")
    text = Path(args.log).read_text()
    launches = parse_launches(text)
    problem = problem_of(text)
    blocks_per_item = problem[2] // 64 if problem else 2
    if not launches:
        sys.exit(f"no TRACE lines in {args.log}: was the extension built with -DCAKE_HOPPER_TRACE?")
    if args.fused:
        print_fused(launches[-1], blocks_per_item)
        return
    life = life_parts(launches[-1])
    if life:
        print("CTA 0's life in the last launch (cycles from the first role's entry)")
        print("| role | " + " | ".join(LIFE_POINTS) + " |")
        print("|---" * (len(LIFE_POINTS) + 1) + "|")
        for role, points in life.items():
            print(f"| {role} | " + " | ".join("-" if points[name] is None else str(points[name])
                                             for name in LIFE_POINTS) + " |")
    items = item_parts(launches[-1], blocks_per_item)
    print(f"{len(items)} items of the last launch (cycles, CTA 0's leader)")
    print("| first block | " + " | ".join(name for name, *_ in LEADER_PARTS) + " | to_next_pair | period |")
    print("|---" * (len(LEADER_PARTS) + 3) + "|")
    for item in items:
        print(f"| {item['first_block']} | " + " | ".join(str(item[name]) for name, *_ in LEADER_PARTS)
              + f" | {item['to_next_pair']} | {item['period']} |")
    if items:
        item_medians = summary(items)
        print("median (items after the first): " + ", ".join(f"{k} {v:.0f}" for k, v in item_medians.items()))
    if blocks_per_item > 2:  # items of several pairs: where a pair's time goes in steady state
        pairs = pair_parts(launches[-1], blocks_per_item)
        names = [name for name, *_ in PAIR_STEPS] + ["to_next"]
        if any(p[FOLLOWER_OWN_HIGH] is not None for p in pairs):
            names.append(FOLLOWER_OWN_HIGH)
        names += [name for name, *_ in SOFTMAX_SPLIT + SCORES_SPLIT if any(p[name] is not None for p in pairs)]
        print_medians("pairs of the items after the first", pairs, names)
        # An item's first pair starts beside the previous item's end (its O leaving, the dequant's
        # refill of the tiles), the others in the item's stride: the two apart.
        print_medians("first pairs of those items", [p for p in pairs if p["row"] % blocks_per_item == 0], names)
        print_medians("other pairs of those items", [p for p in pairs if p["row"] % blocks_per_item != 0], names)
        blocks = block_parts(launches[-1], blocks_per_item)
        # The bookkeeping's points exist in logs from 2026-12-01 on; older logs leave them out.
        names = [name for name, *_ in BLOCK_STEPS]
        names += [name for name in BOOK_STEPS if any(block[name] is not None for block in blocks)]
        after_book = [AFTER_BOOK_WAIT] if any(block[AFTER_BOOK_WAIT] is not None for block in blocks) else []
        for second, which in ((False, "first"), (True, "second")):
            chosen = [block for block in blocks if block["second"] == second]
            print_medians(f"dequant blocks (warpgroup 2) of the items after the first, the {which} of a pair",
                          chosen, names + after_book + ["to_next_top"])
            waits = [block[AFTER_BOOK_WAIT] for block in chosen if block[AFTER_BOOK_WAIT] is not None]
            if waits:
                print(f"{AFTER_BOOK_WAIT} over those blocks: min {min(waits)}, median {statistics.median(waits):.0f}, "
                      f"max {max(waits)}")
        timeline = second_block_timeline(launches[-1], blocks_per_item)
        names = [name for name, *_ in SECOND_BLOCK_POINTS if any(row[name] is not None for row in timeline)]
        print_medians("pairs of the items after the first: the pair's blocks against the leader's start of the "
                      "pair (cycles after it)", timeline, names)
        # An item's first pair: its second block goes into the tile that held the previous item's O
        # until the stores had read it, so that block's halves free say when the O left the tile.
        print_medians("first pairs of those items: the same (their second block's tile held the previous item's O)",
                      [row for row in timeline if row["row"] % blocks_per_item == 0], names)
        load = dequant_load(launches[-1], blocks_per_item)
        if load:
            print(f"dequant load over {load['pairs']} pairs inside items after the first (medians): the dequant's "
                  f"two blocks {load['dequant']:.0f} cycles top to top, {load['waiting']:.0f} of them waiting for the "
                  f"consumers; the leader's period {load['leader']:.0f}, its start {load['leader_after_block']:.0f} "
                  f"cycles after the dequant wrote the pair's first block")


# The fused 64-head kernel's points (a `-DCAKE_HOPPER_FUSED=1 -DCAKE_HOPPER_TRACE` build; listed in
# csrc/cuda/hopper_fused/fused_layout.h): converters are roles 2 and 3 (converter c takes the
# walk's blocks of parity c), row = the block: 0 top, 1 its tile back from PV, 2 the NoPE k-steps
# issued, 3 every MMA retired, 4 the reference handed on, 5 the block handed to PV; rows 6 / 7 at
# an item's first block: its start (before the wait for its Q) and past it. PV warpgroups are
# roles 0 and 1, row = the block: 0 before its wait for the block, 1 past it, 2 its PV retired;
# row = an item's last block: 3 the item's end, 4 its sums read, 5 O stored. Where the PV warpgroups
# run the softmax (a trace whose PV rows record point 6: their weights written), the converters'
# points 4 and 5 are past the wait for the S tile and the logits handed over, and PV's steps are
# the softmax (1 to 6) and the MMAs (6 to 2).
FUSED_CONVERTER_STEPS = (
    ("tile_wait", 0, 1), ("nope", 1, 2), ("rope", 2, 3), ("reference", 3, 4), ("weights", 4, 5), ("block", 0, 5),
)
FUSED_PV_STEPS = (("block_wait", 0, 1), ("pv", 1, 2))
FUSED_PV_SOFTMAX_CONVERTER_STEPS = (
    ("tile_wait", 0, 1), ("nope", 1, 2), ("rope", 2, 3), ("s_wait", 3, 4), ("logits", 4, 5), ("block", 0, 5),
)
FUSED_PV_SOFTMAX_PV_STEPS = (("block_wait", 0, 1), ("softmax", 1, 6), ("pv", 6, 2))
FUSED_ITEM_STEPS = (("item_start", 6, 7),)
FUSED_END_STEPS = (("sums", 3, 4), ("o_out", 4, 5))


def softmax_on_pv(launch):
    """Whether the trace is of the fused kernel's form with the softmax on the PV warpgroups
    (PV warpgroup 0 records point 6 of a block)."""
    return any(clocks[6] for clocks in launch.get(0, {}).values())


def fused_step_tables(launch):
    """The converter and PV step tables of the trace's form."""
    if softmax_on_pv(launch):
        return FUSED_PV_SOFTMAX_CONVERTER_STEPS, FUSED_PV_SOFTMAX_PV_STEPS
    return FUSED_CONVERTER_STEPS, FUSED_PV_STEPS


def fused_parts(launch, blocks_per_item):
    """The fused kernel's steps in CTA 0, items after the first (the kernel's start): per block
    its converter's steps and `period` (its top to the converter's next block's top), PV warpgroup
    0's steps; per item start each converter's wait for the item's Q; per item end PV warpgroup 0's
    sums and O. A step with a point not recorded (0) is left out."""
    converter_steps, pv_steps = fused_step_tables(launch)

    def steps(clocks, table):
        return {name: clocks[b] - clocks[a] for name, a, b in table if clocks[a] and clocks[b]}
    blocks, starts, ends = [], [], []
    for role in (2, 3):
        rows = launch.get(role, {})
        for row, clocks in sorted(rows.items()):
            if row < blocks_per_item:
                continue
            if row % 2 == role - 2 and clocks[0]:
                block = steps(clocks, converter_steps)
                later = rows.get(row + 2)
                if later and later[0]:
                    block["period"] = later[0] - clocks[0]
                pv = launch.get(0, {}).get(row)
                if pv:
                    block.update(steps(pv, pv_steps))
                blocks.append(block)
            if clocks[6] and clocks[7]:
                starts.append(steps(clocks, FUSED_ITEM_STEPS))
    for row, clocks in sorted(launch.get(0, {}).items()):
        if row >= blocks_per_item and clocks[3]:
            ends.append(steps(clocks, FUSED_END_STEPS))
    return blocks, starts, ends


def fused_item_periods(launch, blocks_per_item):
    """Per converter, over the items after the first: each item's length (its first block's top
    to the converter's first block's top in the next item) and the converter's block periods,
    `steady_period` where both blocks are in one item, `boundary_period` where the next is in the
    next item."""
    items, periods = [], []
    for role in (2, 3):
        tops = {row: clocks[0] for row, clocks in launch.get(role, {}).items()
                if row % 2 == role - 2 and clocks[0]}
        firsts = {}
        for row, top in sorted(tops.items()):
            firsts.setdefault(row // blocks_per_item, top)
        items += [{"item": firsts[i + 1] - firsts[i]} for i in sorted(firsts) if i >= 1 and i + 1 in firsts]
        for row, top in sorted(tops.items()):
            if row >= blocks_per_item and row + 2 in tops:
                same_item = (row + 2) // blocks_per_item == row // blocks_per_item
                periods.append({"steady_period" if same_item else "boundary_period": tops[row + 2] - top})
    return items, periods


def print_fused(launch, blocks_per_item):
    blocks, starts, ends = fused_parts(launch, blocks_per_item)
    if not blocks:
        print("no converter blocks past the first item: a fused build's trace?")
        return
    converter_steps, pv_steps = fused_step_tables(launch)
    if pv_steps is FUSED_PV_SOFTMAX_PV_STEPS:
        print("the softmax on the PV warpgroups (PV records point 6): converters' s_wait / logits, PV's softmax / pv")
    names = [name for name, *_ in converter_steps] + ["period"] + [name for name, *_ in pv_steps]
    print_medians("blocks of the items after the first (converter steps, then PV warpgroup 0's)", blocks, names)
    print_medians("item starts after the first (each converter)", starts, [name for name, *_ in FUSED_ITEM_STEPS])
    print_medians("item ends after the first (PV warpgroup 0)", ends, [name for name, *_ in FUSED_END_STEPS])
    items, periods = fused_item_periods(launch, blocks_per_item)
    print_medians("items after the first (each converter, whole)", items, ["item"])
    print_medians("block periods after the first item (each converter)", periods,
                  ["steady_period", "boundary_period"])


def print_medians(what, rows, names):
    """`N what (cycles, medians)` and a one-row table of the medians of `names` over `rows`."""
    if not rows:
        return
    print(f"{len(rows)} {what} (cycles, medians)")
    print("| " + " | ".join(names) + " |")
    print("|---" * len(names) + "|")
    values = medians(rows, names)
    print("| " + " | ".join("-" if values[n] is None else f"{values[n]:.0f}" for n in names) + " |")


if __name__ == "__main__":
    main()
