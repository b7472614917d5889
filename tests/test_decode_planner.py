"""The decode planner (docs/contract.md section 12, docs/planner.md): one C++ implementation
(csrc/ops/decode_plan.h) asked by the op and, through torch_ops._C, by Python. Head tiles, the
split rule and its bounds, the scratch that covers every plan, the decode/prefill choice."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_ops
from helpers import HOPPER_SMEM
from torch_ops import _C
from torch_ops.decode_planner import decode_plan_for_call, decode_token_limit

head_tiles = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_decode_head_tiles
num_chunks = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_num_chunks
plan_splits = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_splits
plan_decode = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode
scratch_bytes = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_scratch_bytes
allocate = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch
select = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_select_kernel


def test_head_tile_choices():
    """1, 2 and 4 where they divide ceil(H / 16) tiles; H % 16 == 8 leaves the last tile half full."""
    assert head_tiles(8) == (1,) and head_tiles(16) == (1,) and head_tiles(48) == (1,) and head_tiles(40) == (1,)
    assert head_tiles(24) == (1, 2) and head_tiles(32) == (1, 2) and head_tiles(96) == (1, 2)
    assert head_tiles(56) == (1, 2, 4) and head_tiles(64) == (1, 2, 4) and head_tiles(128) == (1, 2, 4)
    for bad in (0, 4, 12, 20, 136, -8):
        assert head_tiles(bad) == ()


def test_head_tiles_capped_by_the_device():
    """A device whose shared memory runs at most N head tiles (1 on GPUs with about 100 KB per
    block, as for the prefill) gets the largest choice up to N; a larger explicit one is rejected
    naming head_tiles. The CPU runs all of them."""
    assert _C.device_max_head_tiles("cpu") == 4

    def plan(num_heads=64, **kwargs):
        return _C.plan_decode(1, num_heads, 2048, 0, 132, 16, **kwargs)

    assert plan()["head_tiles"] == 4 and plan(max_head_tiles=4)["head_tiles"] == 4
    assert plan(max_head_tiles=3)["head_tiles"] == 2 and plan(max_head_tiles=1)["head_tiles"] == 1
    assert plan(num_heads=24, max_head_tiles=1)["head_tiles"] == 1 and plan(num_heads=24)["head_tiles"] == 2
    assert plan(head_tiles=2, max_head_tiles=2)["head_tiles"] == 2
    with pytest.raises(ValueError, match=r"head_tiles: 4 needs more shared memory per block than this device has "
                                         r"\(it runs at most 2\)"):
        plan(head_tiles=4, max_head_tiles=2)
    with pytest.raises(ValueError, match="max_head_tiles: expected >= 1"):
        plan(max_head_tiles=0)
    assert plan_decode(num_tokens=1, num_heads=64, topk=2048, device="cpu")["head_tiles"] == 4


def test_num_chunks():
    assert num_chunks(1) == 1 and num_chunks(64) == 1 and num_chunks(65) == 2 and num_chunks(1024) == 16
    assert num_chunks(1000, 20) == 17 and num_chunks(960, 64) == 16 and num_chunks(16384) == 256
    with pytest.raises(ValueError, match="topk: expected >= 1"):
        num_chunks(0)
    with pytest.raises(ValueError, match="extra_topk: expected >= 0"):
        num_chunks(64, -1)


def split_cost(items, chunks, num_sms, splits):
    """The planner's cost of a split count (csrc/ops/decode_plan.h, decode_split_cost), in chunk
    times: its waves of work items, each a split's chunks plus 3 for the item's fixed cost, and 1
    for the merge when it splits."""
    waves = -(-items * splits // num_sms)
    return waves * (-(-chunks // splits) + 3) + (1 if splits > 1 else 0)


def test_split_counts():
    # One token, one head block, 8 chunks: one chunk a split, all in one wave.
    assert plan_splits(num_tokens=1, num_heads=8, topk=512, num_sms=132) == (8, 1)
    # 32 chunks, 4 head blocks (H = 64, one tile each): 16 splits (max_splits) of 2 chunks, one wave.
    assert plan_splits(num_tokens=1, num_heads=64, topk=2048, num_sms=132) == (16, 2)
    # 10 tokens x 2 blocks = 20 items, 32 chunks: 6 splits make 120 work items of at most 6 chunks in
    # one wave; 7 (5 chunks each) would spill 8 items into a second wave.
    assert plan_splits(num_tokens=10, num_heads=128, topk=2048, num_sms=132, head_tiles=4) == (6, 6)
    # 128 items, 16 chunks: unsplit they are one wave of 16 chunks; 2 splits would be two waves of 8
    # and a merge.
    assert plan_splits(num_tokens=128, num_heads=64, topk=1024, num_sms=132, head_tiles=4) == (1, 16)
    # A wave of items already: the fewest splits, one unless the chunks need more.
    assert plan_splits(num_tokens=200, num_heads=16, topk=512, num_sms=132) == (1, 8)
    assert plan_splits(num_tokens=200, num_heads=16, topk=2048, extra_topk=64, num_sms=132) == (2, 17)
    # 32 chunks a split at most: a wave of 32-chunk items runs unsplit (no partials, no merge).
    assert plan_splits(num_tokens=132, num_heads=128, topk=2048, num_sms=132, head_tiles=4) == (1, 32)
    # max_splits caps it; no token: the fewest.
    assert plan_splits(num_tokens=1, num_heads=8, topk=1024, num_sms=132, max_splits=4) == (4, 4)
    assert plan_splits(num_tokens=0, num_heads=8, topk=1024, extra_topk=1024, num_sms=132) == (1, 32)
    assert plan_splits(num_tokens=0, num_heads=8, topk=2048, extra_topk=64, num_sms=132) == (2, 17)


def test_explicit_splits_and_the_balanced_partition():
    """Split s of n holds chunks [s * C // n, (s + 1) * C // n): chunks_per_block is the largest
    share, ceil(C / n)."""
    assert plan_decode(num_tokens=3, num_heads=16, topk=640, num_sms=4, num_splits=3) == \
        {"head_tiles": 1, "num_splits": 3, "chunks_per_block": 4}
    assert plan_decode(num_tokens=3, num_heads=16, topk=640, num_sms=4, num_splits=10) == \
        {"head_tiles": 1, "num_splits": 10, "chunks_per_block": 1}
    assert plan_decode(num_tokens=1, num_heads=16, topk=64 * 32, num_sms=4, num_splits=1)["chunks_per_block"] == 32
    for bad, chunks in ((0, 10), (11, 10), (1, 33), (17, 40)):
        with pytest.raises(ValueError, match="num_splits: expected"):
            plan_decode(num_tokens=1, num_heads=16, topk=64 * chunks, num_sms=4, num_splits=bad)
    with pytest.raises(ValueError, match="num_splits: expected .* max_splits = 4"):
        plan_decode(num_tokens=1, num_heads=16, topk=640, num_sms=4, num_splits=5, max_splits=4)


def test_fewest_chunks_a_split():
    """min_chunks_per_split m caps the planned splits at C // m (each holds m chunks at least),
    never below the fewest the chunks need, and at one split when the lists hold fewer than m."""
    gpu = dict(num_heads=64, head_tiles=4, num_sms=132)
    # T = 8, one 64-head block a token, 16 chunks: m = 1 allows 16 one-chunk splits, one wave.
    assert plan_splits(num_tokens=8, topk=1024, **gpu) == (16, 1)
    assert plan_splits(num_tokens=8, topk=1024, min_chunks_per_split=2, **gpu) == (8, 2)
    # m = 3: at most 5 splits; 4 and 5 both hold 4 chunks in one wave, and the smaller wins.
    assert plan_splits(num_tokens=8, topk=1024, min_chunks_per_split=3, **gpu) == (4, 4)
    # 32 chunks: the 16 splits of max_splits hold two each already.
    assert plan_splits(num_tokens=1, topk=2048, min_chunks_per_split=2, **gpu) == (16, 2)
    # Fewer chunks than m: one split; 3 chunks, m = 2: one split of 3 (not 1 + 2).
    assert plan_splits(num_tokens=1, topk=64, min_chunks_per_split=2, **gpu) == (1, 1)
    assert plan_splits(num_tokens=1, topk=192, min_chunks_per_split=2, **gpu) == (1, 3)
    # Never fewer splits than the chunks need (32 a split at most), whatever m.
    assert plan_splits(num_tokens=1, topk=4096, min_chunks_per_split=64, **gpu) == (2, 32)
    # Enough work items: m changes nothing.
    assert plan_splits(num_tokens=200, topk=1024, min_chunks_per_split=2, **gpu) == (1, 16)
    for bad in (0, -1):
        with pytest.raises(ValueError, match="min_chunks_per_split: expected >= 1"):
            plan_splits(num_tokens=8, topk=1024, min_chunks_per_split=bad, **gpu)
    # The planner's own m on a target: 2 where the splits run the Hopper kernels (the Hopper family
    # in general: the 64-head kernel at 4 head tiles, the small-heads kernel's split form
    # otherwise), 1 on the portable kernel and the CPU.
    def on(kernel, num_heads=64, **kwargs):
        plan = _C.plan_decode_on_device(8, num_heads, 1024, 0, 132, 16, kernel=kernel, **kwargs)
        return plan["num_splits"], plan["chunks_per_block"]

    assert on("hopper", head_tiles=4) == (8, 2) and on("hopper", head_tiles=2) == (8, 2)
    assert on("hopper", num_heads=8) == (8, 2)
    # An explicit count below two chunks a split is still accepted (the portable body runs it).
    assert on("hopper", num_splits=16) == (16, 1)
    assert on("portable") == (16, 1) and on("cpu") == (16, 1)
    # The CPU's decode takes one-chunk splits: its plan is m = 1's.
    assert plan_decode(num_tokens=8, num_heads=64, topk=1024, num_sms=132, device="cpu") == \
        {"head_tiles": 4, "num_splits": 16, "chunks_per_block": 1}


CHUNK_WEIGHT = {64: 142, 16: 100}  # cuda::hopper_chunk_weight: a chunk's time by the heads an item runs


@settings(max_examples=200, deadline=None)
@given(num_tokens=st.integers(0, 300), num_heads=st.sampled_from([8, 16, 32, 48, 64, 96, 128]),
       topk=st.integers(1, 4096), extra_topk=st.sampled_from([0, 64, 512]), num_sms=st.integers(1, 264),
       max_splits=st.sampled_from([1, 2, 16, 32]))
def test_few_ctas_narrow_the_64_head_blocks(num_tokens, num_heads, topk, extra_topk, num_sms, max_splits):
    """On the Hopper family, with no head tile asked for, where T x the 64-head blocks are less
    than a wave of the SMs, the planner takes head tile 1 (16-head units on the small-heads
    kernel's split form) where that plan splits into two chunks or more a split and costs less in
    the split rule's model weighted by the heads a work item runs (142 for 64, 100 for 16); ties
    keep the 64-head blocks. Elsewhere, and with an explicit head tile, the largest tile stays."""
    if -(-topk // 64) + -(-extra_topk // 64) > 16 * max_splits:
        return

    def on(kernel, **kwargs):
        return _C.plan_decode_on_device(num_tokens, num_heads, topk, extra_topk, num_sms, max_splits, kernel=kernel,
                                        **kwargs)

    chunks = -(-topk // 64) + -(-extra_topk // 64)
    largest = 4 if num_heads % 64 == 0 else max(t for t in head_tiles(num_heads))
    expected = wide = on("hopper", head_tiles=largest)
    if largest == 4 and num_tokens > 0 and num_tokens * (num_heads // 64) < num_sms:
        best = CHUNK_WEIGHT[64] * split_cost(num_tokens * (num_heads // 64), chunks, num_sms, wide["num_splits"])
        narrow = on("hopper", head_tiles=1)
        if narrow["num_splits"] > 1 and narrow["chunks_per_block"] >= 2 and CHUNK_WEIGHT[16] * split_cost(
                num_tokens * (num_heads // 16), chunks, num_sms, narrow["num_splits"]) < best:
            expected = narrow
    assert on("hopper") == expected
    for kernel in ("portable", "cpu"):
        assert on(kernel) == on(kernel, head_tiles=largest)


def test_few_ctas_narrow_the_64_head_blocks_at_the_measured_rows():
    """The rows the rule was measured at on the H200 (132 SMs, docs/planner.md)."""
    def plan(num_tokens, num_heads, topk):
        p = _C.plan_decode_on_device(num_tokens, num_heads, topk, 0, 132, 16, kernel="hopper")
        return p["head_tiles"], p["num_splits"]

    # 16-head units where the 64-head blocks leave most SMs idle.
    assert plan(1, 64, 2048) == (1, 16) and plan(1, 128, 2048) == (1, 16) and plan(2, 64, 1024) == (1, 8)
    assert plan(4, 64, 1024) == (1, 8) and plan(8, 64, 1024) == (1, 4) and plan(4, 128, 1024) == (1, 4)
    assert plan(128, 128, 2048)[0] == 4 and plan(8, 16, 1024)[0] == 1 and plan(0, 64, 2048)[0] == 4
    # Not where the narrow plans would be one split or one-chunk splits (not measured against 64-head
    # blocks; one-chunk splits run the portable body): lists of up to 3 chunks, or one split asked for.
    assert plan(1, 64, 128)[0] == 4 and plan(1, 64, 192)[0] == 4 and plan(1, 64, 256)[0] == 1
    assert _C.plan_decode_on_device(1, 64, 2048, 0, 132, 16, num_splits=1, kernel="hopper")["head_tiles"] == 4
    assert _C.plan_decode_on_device(1, 64, 1024, 0, 132, 1, kernel="hopper")["head_tiles"] == 4


def test_max_unsplit_chunks():
    """max_unsplit_chunks: the planner gives one split of more than that many chunks nowhere (two
    instead, max_splits allowing). The op's is 32 on every device: every kernel family runs one
    split of up to 32 chunks itself (the small-heads calls on the prefill's launches or the split
    form with one split), and one split was the faster at 17..32 chunks on the H200
    (docs/planner.md). An explicit num_splits=1 stays accepted up to 32 chunks."""
    small = dict(num_heads=16, num_sms=132)
    # 32 chunks, a wave of items (200 tokens): one split of 32, or two of 16.
    assert plan_splits(num_tokens=200, topk=2048, **small) == (1, 32)
    assert plan_splits(num_tokens=200, topk=2048, max_unsplit_chunks=16, **small) == (2, 16)
    # Below a wave (100 tokens): one split would cost 35, two 39; at 16, two.
    assert plan_splits(num_tokens=100, topk=2048, **small) == (1, 32)
    assert plan_splits(num_tokens=100, topk=2048, max_unsplit_chunks=16, **small) == (2, 16)
    assert plan_splits(num_tokens=0, topk=2048, max_unsplit_chunks=16, **small) == (2, 16)
    # 16 chunks or fewer: one split either way; max_splits = 1 (16 chunks at most) too.
    assert plan_splits(num_tokens=200, topk=1024, max_unsplit_chunks=16, **small) == (1, 16)
    assert plan_splits(num_tokens=200, topk=1024, max_splits=1, max_unsplit_chunks=8, **small) == (1, 16)
    for bad in (0, -1):
        with pytest.raises(ValueError, match="max_unsplit_chunks: expected >= 1"):
            plan_splits(num_tokens=8, topk=1024, max_unsplit_chunks=bad, **small)

    def on(kernel, num_heads, **kwargs):
        plan = _C.plan_decode_on_device(200, num_heads, 2048, 0, 132, 16, kernel=kernel, **kwargs)
        return plan["num_splits"], plan["chunks_per_block"]

    # One split of 32 chunks on every family: the 64-head kernel (H = 64, 128 at 4 head tiles), the
    # small-heads calls (head tile 2 of H = 64, 1 of H = 128, and H = 8, 16, 48, 96), the portable
    # kernel and the CPU.
    for heads, head_tiles in ((64, None), (128, None), (64, 2), (128, 1), (8, None), (16, None), (48, None),
                              (96, None)):
        assert on("hopper", heads, head_tiles=head_tiles) == (1, 32), (heads, head_tiles)
    assert on("hopper", 16, num_splits=2) == (2, 16)
    assert on("portable", 16) == (1, 32) and on("cpu", 16) == (1, 32) and on("portable", 64, head_tiles=2) == (1, 32)


def test_one_split_in_two_grids():
    """H = 80 and 96 on the Hopper family: one split runs the prefill's two launches one after the
    other (the 64-head kernel over heads 0..63, then the small-heads kernel over the rest), a work
    item a token each, so below a wave of tokens the planner costs it as those two grids, a 64-head
    item's chunk at 1.42x a 16-head unit's and a 32-head unit's at 1.27x (in units of the splits'
    work items: 242% of a grid of T 16-head units at H = 80, 211% of T 32-head units at H = 96), and
    weighs it against the splits (T x head blocks x splits items in one grid). From a wave of
    tokens on, one split. Everywhere else one split keeps the head blocks' cost."""
    def plan(num_tokens, num_heads, topk, kernel="hopper", **kwargs):
        p = _C.plan_decode_on_device(num_tokens, num_heads, topk, 0, 132, 16, kernel=kernel, **kwargs)
        return p["head_tiles"], p["num_splits"], p["chunks_per_block"]

    # Rows timed on the H200 (docs/planner.md), us by split count: T = 30, H = 80, 2048 candidates
    # 142 / 96 / 91 at 1 / 2 / 4; T = 45 144 / 127 / 124; T = 60 144 / 156 / 175; T = 40, H = 96
    # 155 / 83 / 96; T = 60, H = 96 157 / 120 / 142; T = 70, H = 96, 1024 candidates 91 / 96 / 113.
    assert plan(30, 80, 2048) == (1, 4, 8) and plan(45, 80, 2048) == (1, 2, 16) and plan(60, 80, 2048) == (1, 1, 32)
    assert plan(40, 96, 2048) == (2, 2, 16) and plan(60, 96, 2048) == (2, 2, 16) and plan(70, 96, 1024) == (2, 1, 16)
    for num_heads, blocks, percent in ((80, 5, 242), (96, 3, 211)):
        for topk in (512, 1024, 1088, 2048):
            chunks = num_chunks(topk)
            most = min(16, chunks // 2)
            for num_tokens in range(0, 140):
                tiles, splits, per_block = plan(num_tokens, num_heads, topk)
                assert tiles == {80: 1, 96: 2}[num_heads] and per_block == -(-chunks // splits)
                if num_tokens == 0 or num_tokens >= 132:
                    assert splits == 1, (num_heads, topk, num_tokens)
                    continue
                costs = {n: 100 * split_cost(num_tokens * blocks, chunks, 132, n) for n in range(2, most + 1)}
                costs[1] = percent * split_cost(num_tokens, chunks, 132, 1)
                least = min(costs.values())
                assert splits == min(n for n, cost in costs.items() if cost == least), (num_heads, topk, num_tokens)
    # The crossovers at 32 chunks: T = 53 at H = 80, 74 at H = 96.
    assert plan(52, 80, 2048)[1] > 1 and plan(53, 80, 2048)[1] == 1
    assert plan(73, 96, 2048)[1] > 1 and plan(74, 96, 2048)[1] == 1
    # An explicit head tile of 1 at H = 96: the split form's units of 16 heads, six a token, against
    # which one split costs 269%.
    for num_tokens in (40, 60, 73, 74):
        costs = {n: 100 * split_cost(num_tokens * 6, 32, 132, n) for n in range(2, 17)}
        costs[1] = 269 * split_cost(num_tokens, 32, 132, 1)
        least = min(costs.values())
        assert plan(num_tokens, 96, 2048, head_tiles=1)[1] == min(n for n, c in costs.items() if c == least)
    # One grid where one split runs one launch: H = 48 and 112 (the 64-head kernel over padded
    # blocks; T x head blocks is the model's count still), the portable kernel and the CPU.
    for num_heads in (48, 112):
        assert plan(20, num_heads, 2048)[1:] == plan_splits(num_tokens=20, num_heads=num_heads, topk=2048,
                                                            num_sms=132, min_chunks_per_split=2)
    for kernel in ("portable", "cpu"):
        assert plan(30, 80, 2048, kernel=kernel)[1:] == plan_splits(num_tokens=30, num_heads=80, topk=2048,
                                                                    num_sms=132) == (1, 32)


def test_small_heads_splits_count_the_units():
    """On the Hopper family the small-heads kernel's split form runs units of 32 heads where 32
    divides H and the head tile is 2 or more, else 16: the split rule counts T x those units (H = 120 at
    its head tile 4: eight a token, not two 64-head blocks; H = 24 at head tile 2: two, not one);
    elsewhere (the portable kernel, the CPU) T x head blocks."""
    def on(num_tokens, num_heads, topk, kernel="hopper", **kwargs):
        p = _C.plan_decode_on_device(num_tokens, num_heads, topk, 0, 132, 16, kernel=kernel, **kwargs)
        return p["head_tiles"], p["num_splits"]

    for num_heads, units in ((8, 1), (24, 2), (40, 3), (56, 4), (88, 6), (120, 8), (32, 1), (64, 2), (128, 4)):
        tiles = {64: 2, 128: 2}.get(num_heads)  # H = 64, 128: the small-heads kernel at head tile 2
        for num_tokens in (1, 4, 8, 16, 32, 64):
            for topk in (1024, 2048):
                got = on(num_tokens, num_heads, topk, head_tiles=tiles)
                expected = plan_splits(num_tokens=num_tokens * units, num_heads=16, topk=topk, num_sms=132,
                                       min_chunks_per_split=2)[0]
                assert got[1] == expected, (num_heads, num_tokens, topk)
        largest = max(head_tiles(num_heads))
        assert on(8, num_heads, 1024, kernel="portable")[1] == plan_splits(
            num_tokens=8, num_heads=num_heads, topk=1024, num_sms=132, head_tiles=largest)[0]
    # The measured rows (docs/planner.md): T = 8, H = 120, 1024 candidates two splits (eight before).
    assert on(8, 120, 1024) == (4, 2) and on(16, 56, 1024) == (4, 2) and on(32, 24, 1024) == (2, 2)


def test_split_rule_in_128_bits():
    """Counts past 64 bits in the model (T x items a token, costs in hundredths) give the plan that
    exact arithmetic gives."""
    # T = 2^61 tokens at H = 80 on 2^62 SMs: one grid of T items unsplit is half a wave; the splits'
    # 5 T items a count pass 2^63. One split costs 242% of 35, two 100 x (2 waves x 19 + 1).
    plan = _C.plan_decode_on_device(2**61, 80, 2048, 0, 2**62, 16, kernel="hopper")
    assert (plan["num_splits"], plan["chunks_per_block"]) == (1, 32)
    # 2^56 chunks in 2^51 .. 2^53 splits, T = 100, H = 80 (500 units a count) on 2^62 SMs: every
    # count is one wave, so the most splits (8 chunks each) cost the least.
    chunks = 2**56
    plan = _C.plan_decode_on_device(100, 80, 64 * chunks, 0, 2**62, 2**53, kernel="hopper")
    costs = {n: split_cost(100 * 5, chunks, 2**62, n) for n in (2**51, 2**52, 2**53)}
    assert costs == {2**51: 36, 2**52: 20, 2**53: 12}
    assert (plan["num_splits"], plan["chunks_per_block"]) == (2**53, 8)


@settings(max_examples=200, deadline=None)
@given(num_tokens=st.integers(0, 300), num_heads=st.sampled_from(range(8, 129, 8)), topk=st.integers(1, 4096),
       extra_topk=st.integers(0, 1024), num_sms=st.integers(1, 200), max_splits=st.integers(1, 80),
       min_chunks=st.integers(1, 4), max_unsplit=st.sampled_from([16, 32]), data=st.data())
def test_split_rule(num_tokens, num_heads, topk, extra_topk, num_sms, max_splits, min_chunks, max_unsplit, data):
    """Within [f, max(f, min(max_splits, C // m, 1 at least))], f = ceil(C / 32) (2 instead of one
    split over more than max_unsplit_chunks, max_splits allowing): f when the tokens' head blocks
    fill the SMs unsplit (or there is no token), else the count of least split_cost, the smallest
    of equal ones."""
    chunks = num_chunks(topk, extra_topk)
    tiles = data.draw(st.sampled_from(head_tiles(num_heads)))
    args = dict(num_heads=num_heads, topk=topk, extra_topk=extra_topk, num_sms=num_sms, max_splits=max_splits,
                head_tiles=tiles, min_chunks_per_split=min_chunks, max_unsplit_chunks=max_unsplit)
    if chunks > 16 * max_splits:
        with pytest.raises(ValueError, match=r"topk/extra_topk: expected .* <= 16 \* max_splits"):
            plan_splits(num_tokens=num_tokens, **args)
        return
    splits, per_block = plan_splits(num_tokens=num_tokens, **args)
    fewest = -(-chunks // 32)
    if fewest == 1 and chunks > max_unsplit:
        fewest = min(2, max_splits)
    assert splits > 1 or chunks <= max_unsplit or max_splits == 1
    most = max(fewest, min(max_splits, max(1, chunks // min_chunks)))
    assert fewest <= splits <= most and per_block == -(-chunks // splits) <= 32
    if splits > 1:
        assert chunks // splits >= min_chunks or splits == fewest, "a planned split holds fewer than m chunks"
    items = num_tokens * (-(-num_heads // 16) // tiles)
    if num_tokens == 0 or items >= num_sms:
        assert splits == fewest
    else:
        costs = {n: split_cost(items, chunks, num_sms, n) for n in range(fewest, most + 1)}
        assert costs[splits] == min(costs.values()), "a cheaper split count was passed over"
        assert all(costs[n] > costs[splits] for n in range(fewest, splits)), "a smaller count costs as little"


def least_cost_splits(items, chunks, num_sms, fewest, most):
    """The smallest split count of least split_cost in [fewest, most], by trying every one."""
    costs = [(split_cost(items, chunks, num_sms, n), n) for n in range(fewest, most + 1)]
    return min(costs)[1]


def test_split_search_is_exhaustive():
    """The planner tries 32 counts (ceil(C / q), q = 1 .. 32) rather than every one: the same
    answer as trying every count, over a grid of requests below a wave, and at sizes where a count
    search would take long or a product of counts overflow 64 bits."""
    for num_sms in (1, 2, 5, 24, 132, 307):
        for items in sorted({1, 2, 3, 7, 19, 64, 100, num_sms - 1} - {0}):
            if items >= num_sms:
                continue
            for chunks in (1, 2, 3, 5, 16, 17, 31, 32, 33, 64, 100, 256):
                for max_splits in (1, 4, 16, 64, 300):
                    if chunks > 16 * max_splits:
                        continue
                    for min_chunks, max_unsplit in ((1, 32), (2, 32), (1, 16), (2, 16)):
                        fewest = -(-chunks // 32)
                        if fewest == 1 and chunks > max_unsplit:
                            fewest = min(2, max_splits)
                        most = max(fewest, min(max_splits, max(1, chunks // min_chunks)))
                        expected = least_cost_splits(items, chunks, num_sms, fewest, most)
                        # items = T x 1 head block (H = 16, one tile)
                        got = plan_splits(num_tokens=items, num_heads=16, topk=64 * chunks, num_sms=num_sms,
                                          max_splits=max_splits, min_chunks_per_split=min_chunks,
                                          max_unsplit_chunks=max_unsplit)
                        assert got == (expected, -(-chunks // expected)), (num_sms, items, chunks, max_splits,
                                                                           max_unsplit)
    # 200,000 chunks on 200,000 SMs: every count is one wave, the most splits hold the fewest chunks.
    assert plan_splits(num_tokens=1, num_heads=8, topk=64 * 200000, num_sms=200000, max_splits=200000) == (200000, 1)
    # num_sms near 2^62: items * splits in 64 bits would overflow; one wave whatever the count.
    assert plan_splits(num_tokens=1, num_heads=8, topk=2048, num_sms=2**62) == (16, 2)
    assert plan_splits(num_tokens=2**40, num_heads=128, topk=2048, num_sms=2**62, head_tiles=1) == (16, 2)


@pytest.fixture
def many_threads():
    """24 intra-op threads (the CPU planner's SMs) for one test, so that plans change with T."""
    before = torch.get_num_threads()
    torch.set_num_threads(24)
    yield 24
    torch.set_num_threads(before)


@pytest.mark.parametrize("num_heads,topk,extra_topk,max_splits", [(8, 512, 0, 16), (64, 2048, 128, 16), (24, 100, 0, 2),
                                                                   (128, 16384, 0, 16), (16, 1024, 1024, 4)])
def test_steps_reproduce_the_plan_at_every_token_count(num_heads, topk, extra_topk, max_splits, many_threads):
    """The API reads its plan off the planner's steps (so that it traces with a symbolic token
    count); at every T they give what the planner gives."""
    num_sms = _C.device_num_sms("cpu")
    assert num_sms == many_threads
    for num_tokens in list(range(0, 3 * num_sms + 3)) + [1000, 10**6]:
        expected = plan_decode(num_tokens=num_tokens, num_heads=num_heads, topk=topk, extra_topk=extra_topk,
                               device="cpu", max_splits=max_splits)
        got = decode_plan_for_call(torch.device("cpu"), num_tokens, num_heads, topk, extra_topk, max_splits, None, None)
        assert got == expected, num_tokens
    assert decode_plan_for_call(torch.device("cpu"), 1, 12, 64, 0, 16, None, None) is None  # the op names q


def test_splits_on_a_gpu_sized_sm_count():
    """One 64-head block per token (4 tiles), 32 chunks, 132 SMs: between 1 (32 chunks) and 16
    (max_splits); one wave while two splits fit in it, never a second wave that a smaller count's
    longer splits would cost less than, and unsplit once the tokens fill a wave."""
    def plan(num_tokens):
        return plan_splits(num_tokens=num_tokens, num_heads=64, topk=2048, num_sms=132, head_tiles=4)

    for num_tokens in range(1, 9):
        assert plan(num_tokens) == (16, 2)  # at most 128 work items: one wave of 2 chunks
    assert plan(9) == (11, 3) and plan(44) == (3, 11)  # 99 and 132 work items: one wave each
    # 66 tokens: 2 splits fill the wave; 67: 134 work items would make a second wave of 16 chunks,
    # 3 splits (201 items, two waves of 11) cost less.
    assert plan(66) == (2, 16) and plan(67) == (3, 11)
    # 100 tokens: one wave unsplit (35) beats two waves of 2 splits (39) or three of 4 (45).
    assert plan(100) == (1, 32) and plan(132) == (1, 32)
    for num_tokens in range(1, 140):
        splits, per_split = plan(num_tokens)
        assert 1 <= splits <= 16 and per_split == -(-32 // splits)
        if num_tokens <= 66:
            assert num_tokens * splits <= 132, "a second wave where one would do"
        if num_tokens >= 132:
            assert splits == 1
        else:
            assert all(split_cost(num_tokens, 32, 132, splits) <= split_cost(num_tokens, 32, 132, n)
                       for n in range(1, 17))


@pytest.mark.parametrize("num_tokens,num_heads,topk,extra_topk", [(1, 8, 64, 0), (5, 24, 1500, 600), (0, 128, 100, 0),
                                                                   (3, 64, 16384, 0)])
@pytest.mark.parametrize("max_splits", [None, 3])
def test_scratch_covers_every_plan(num_tokens, num_heads, topk, extra_topk, max_splits):
    chunks = num_chunks(topk, extra_topk)
    if max_splits is not None and chunks > 16 * max_splits:
        with pytest.raises(ValueError, match="max_splits"):
            scratch_bytes(num_tokens, num_heads, topk, extra_topk, max_splits=max_splits)
        return
    mid_out, mid_lse = allocate(num_tokens, num_heads, topk, extra_topk, max_splits=max_splits)
    splits = chunks if max_splits is None else min(chunks, max_splits)
    assert mid_out.shape == (splits, num_tokens, num_heads, 512) and mid_out.dtype == torch.float32
    assert mid_lse.shape == (splits, num_tokens, num_heads) and mid_lse.dtype == torch.float32
    assert mid_out.is_contiguous() and mid_lse.is_contiguous()
    nbytes = scratch_bytes(num_tokens, num_heads, topk, extra_topk, max_splits=max_splits)
    assert nbytes == mid_out.numel() * 4 + mid_lse.numel() * 4 == splits * num_tokens * num_heads * 513 * 4
    # Every plan of the shape fits: any num_sms, any head tile, any max_splits allowed (or the given one).
    for num_sms in (1, 7, 132, 10**6):
        for tiles in head_tiles(num_heads):
            for limit in ([max_splits] if max_splits is not None else [16, 64, 10**6]):
                if chunks <= 16 * limit:
                    assert plan_splits(num_tokens=num_tokens, num_heads=num_heads, topk=topk, extra_topk=extra_topk,
                                       num_sms=num_sms, max_splits=limit, head_tiles=tiles)[0] <= splits


def test_select_kernel():
    """The crossover: the decode when the prefill cannot run the shape, or when its largest launch
    (T * H / 16 work items) is below 200% of the SM count (H a multiple of 64, any list width), 300%
    (H = 80 and 96, whose prefill runs two grids) or 50% (other head counts)."""
    assert (_C.DECODE_CROSSOVER_ITEMS_PERCENT_WIDE, _C.DECODE_CROSSOVER_ITEMS_PERCENT_TWO_GRIDS,
            _C.DECODE_CROSSOVER_ITEMS_PERCENT_NARROW) == (200, 300, 50)
    assert not hasattr(_C, "DECODE_CROSSOVER_ITEMS_PERCENT_WIDE_LONG")
    assert select(num_tokens=10**6, num_heads=8, topk=64, num_sms=132) == "decode"       # H not a multiple of 16
    assert select(num_tokens=10**6, num_heads=16, topk=1025, num_sms=132) == "decode"    # 17 chunks
    assert select(num_tokens=10**6, num_heads=16, topk=1000, extra_topk=20, num_sms=132) == "decode"
    assert select(num_tokens=10**6, num_heads=16, topk=1024, num_sms=132) == "prefill"
    for topk in (64, 512, 960, 1024):  # the same threshold at every list width
        assert select(num_tokens=65, num_heads=64, topk=topk, num_sms=132) == "decode"   # 260 items < 264
        assert select(num_tokens=66, num_heads=64, topk=topk, num_sms=132) == "prefill"  # 264 items
        assert select(num_tokens=32, num_heads=128, topk=topk, num_sms=132) == "decode"  # 256 items
        assert select(num_tokens=33, num_heads=128, topk=topk, num_sms=132) == "prefill"
    assert select(num_tokens=32, num_heads=128, topk=512, extra_topk=512, num_sms=132) == "decode"  # 8 + 8 chunks
    assert select(num_tokens=65, num_heads=16, topk=1024, num_sms=132) == "decode"       # narrow: 65 items < 66
    assert select(num_tokens=66, num_heads=16, topk=1024, num_sms=132) == "prefill"
    assert select(num_tokens=65, num_heads=16, topk=512, num_sms=132) == "decode"
    assert select(num_tokens=66, num_heads=16, topk=512, num_sms=132) == "prefill"
    assert select(num_tokens=32, num_heads=32, topk=512, num_sms=132) == "decode"        # 64 items < 66
    assert select(num_tokens=33, num_heads=32, topk=512, num_sms=132) == "prefill"
    for heads, last_decode in ((80, 79), (96, 65)):  # two grids: T * H / 16 < 396
        assert select(num_tokens=last_decode, num_heads=heads, topk=1024, num_sms=132) == "decode"
        assert select(num_tokens=last_decode + 1, num_heads=heads, topk=1024, num_sms=132) == "prefill"
    for heads, last_decode in ((48, 21), (112, 9)):  # one grid of 64-head items (the last padded): < 66 items
        assert select(num_tokens=last_decode, num_heads=heads, topk=1024, num_sms=132) == "decode"
        assert select(num_tokens=last_decode + 1, num_heads=heads, topk=1024, num_sms=132) == "prefill"
    assert select(num_tokens=0, num_heads=64, topk=512, num_sms=132) == "decode"
    for bad, match in ((dict(num_heads=12), "num_heads"), (dict(topk=0), "topk"), (dict(num_sms=0), "num_sms"),
                       (dict(topk=16385), "topk/extra_topk"), (dict(num_tokens=-1), "num_tokens")):
        args = dict(num_tokens=1, num_heads=16, topk=64, num_sms=4)
        args.update(bad)
        with pytest.raises(ValueError, match=match):
            select(**args)


@pytest.mark.parametrize("num_heads,topk,extra_topk", [(16, 64, 0), (64, 512, 128), (128, 1024, 0), (8, 64, 0),
                                                       (32, 2048, 0), (80, 1024, 0), (96, 512, 0)])
def test_token_limit_is_the_select_rule(num_heads, topk, extra_topk, many_threads):
    num_sms = _C.device_num_sms("cpu")
    limit = decode_token_limit("cpu", None, num_heads, topk, extra_topk)
    for num_tokens in range(0, 3 * num_sms + 3):
        expected = select(num_tokens=num_tokens, num_heads=num_heads, topk=topk, extra_topk=extra_topk, num_sms=num_sms)
        assert ("decode" if limit < 0 or num_tokens < limit else "prefill") == expected
    assert decode_token_limit("cpu", None, 12, topk, extra_topk) is None


def test_planner_errors():
    base = dict(num_tokens=1, num_heads=16, topk=64, num_sms=4)
    cases = [
        (dict(num_heads=4), "num_heads: expected 8, 16, ..., 128"),
        (dict(num_heads=136), "num_heads: expected 8, 16, ..., 128"),
        (dict(num_tokens=-1), "num_tokens: expected >= 0"),
        (dict(topk=0), "topk: expected >= 1"),
        (dict(extra_topk=-2), "extra_topk: expected >= 0"),
        (dict(num_sms=0), "num_sms: expected >= 1"),
        (dict(max_splits=0), "max_splits: expected >= 1"),
        (dict(topk=1025, max_splits=1), r"topk/extra_topk: expected .* <= 16 \* max_splits = 16, got 17"),
        (dict(head_tiles=2), r"head_tiles: expected one of \[1\] for H = 16"),
        (dict(num_heads=24, head_tiles=4), r"head_tiles: expected one of \[1, 2\] for H = 24"),
    ]
    for overrides, match in cases:
        with pytest.raises(ValueError, match=match):
            plan_splits(**dict(base, **overrides))
    with pytest.raises(ValueError, match="device: expected"):
        plan_decode(num_tokens=1, num_heads=16, topk=64, device="tpu")
    with pytest.raises(ValueError, match="num_heads"):
        scratch_bytes(1, 12, 64)


def test_decode_split_work_rule():
    """The work half of the rule, in every build: a plan that splits needs its largest split to hold
    HOPPER_DECODE_MIN_CHUNKS_PER_SPLIT chunks for the Hopper kernel; one split always qualifies."""
    fewest = _C.HOPPER_DECODE_MIN_CHUNKS_PER_SPLIT
    assert not _C.decode_splits_fit_hopper(16, fewest - 1) and not _C.decode_splits_fit_hopper(2, 1)
    assert _C.decode_splits_fit_hopper(2, fewest) and _C.decode_splits_fit_hopper(4, 8)
    assert _C.decode_splits_fit_hopper(1, 1) and _C.decode_splits_fit_hopper(1, 16)


def test_split_kernel_needs_two_chunks_a_split():
    """On Hopper a decode that splits runs the 64-head Hopper kernel only when its largest split
    holds at least HOPPER_DECODE_MIN_CHUNKS_PER_SPLIT chunks (one-chunk splits are faster on the
    portable body); one split takes the prefill's kernel; where the 64-head kernel does not serve
    the call, the small-heads kernel's split form under the same rule. Needs an sm_90a build (the
    choice is the build's)."""
    fewest = _C.HOPPER_DECODE_MIN_CHUNKS_PER_SPLIT
    assert fewest == 2
    if _C.prefill_kernel_for(9, HOPPER_SMEM, 64, 4) != "hopper":
        pytest.skip("this build has no sm_90a code: every choice is the portable kernel")
    choose = _C.decode_split_kernel_for
    for heads in (64, 128):
        assert choose(9, HOPPER_SMEM, heads, 4, 16, fewest - 1) == "portable"
        for num_splits, chunks in ((2, fewest), (4, 8), (2, 16)):
            assert choose(9, HOPPER_SMEM, heads, 4, num_splits, chunks) == "hopper"
        # One split is the prefill's choice, however few its chunks.
        assert choose(9, HOPPER_SMEM, heads, 4, 1, 1) == "hopper"
    assert choose(9, HOPPER_SMEM, 64, 2, 2, 16) == "hopper_small"  # head tile 2: not the 64-head kernel's
    assert choose(9, HOPPER_SMEM, 64, 2, 16, fewest - 1) == "portable"
    assert choose(8, 166912, 64, 4, 2, 16) == "portable"


def test_split_kernel_under_the_hopper_override():
    """The override "hopper" runs one-chunk splits on the Hopper kernels too (to time them): the
    64-head kernel where it serves the call, the small-heads kernel's split form elsewhere;
    "portable" keeps every split on the portable body. Needs an sm_90a build."""
    if _C.prefill_kernel_for(9, HOPPER_SMEM, 64, 4) != "hopper":
        pytest.skip("this build has no sm_90a code: every choice is the portable kernel")
    choose = _C.decode_split_kernel_for
    with torch_ops.prefill_kernel_override(kernel="hopper"):
        assert choose(9, HOPPER_SMEM, 64, 4, 16, 1) == "hopper"
        assert choose(9, HOPPER_SMEM, 128, 4, 32, 1) == "hopper"
        assert choose(9, HOPPER_SMEM, 64, 2, 16, 1) == "hopper_small"  # head tile 2: not the 64-head kernel's
        assert choose(9, HOPPER_SMEM, 48, 4, 16, 1) == "hopper_small"  # 48 heads: the small-heads calls
    with torch_ops.prefill_kernel_override(kernel="portable"):
        assert choose(9, HOPPER_SMEM, 64, 4, 2, 16) == "portable"
    with torch_ops.prefill_kernel_override():  # no override: the device's own choice
        assert choose(9, HOPPER_SMEM, 64, 4, 16, 1) == "portable"
