"""Decode planning: a thin layer over the C++ planner (``csrc/ops/decode_plan.h``).

The split rule, the head-tile choice, the scratch sizes and the decode/prefill crossover live in
C++; the decode op uses them when ``head_tiles`` / ``num_splits`` are None and these functions ask
them through ``torch_ops._C``. Nothing here re-implements them. docs/contract.md section 12 says
what a plan is; docs/planner.md says which of the rules are still provisional.
"""
import functools
from typing import Dict, Optional, Tuple, Union

import torch

from . import _C
from . import kernel_override as _kernel_override
from .no_backward import int_args
from .planner import DeviceLike, _device_name, planned_for_q, resolved_device

DEFAULT_MAX_SPLITS = _C.DEFAULT_MAX_SPLITS
MAX_CHUNKS_PER_SPLIT = _C.MAX_CHUNKS_PER_SPLIT


@torch.compiler.assume_constant_result
def cake_sparse_mla_sm120_dsv4_nvfp4_decode_head_tiles(num_heads: int) -> Tuple[int, ...]:
    """Head-tile choices of the decode (sixteen-head tiles per head block) for ``num_heads``.

    Of 1, 2 and 4, those that divide the token's ``ceil(num_heads / 16)`` tiles; ``()`` for a head
    count the decode rejects (anything but 8, 16, ..., 128). With ``num_heads % 16 == 8`` the last
    tile holds 8 heads.
    """
    (num_heads,) = int_args("cake_sparse_mla_sm120_dsv4_nvfp4_decode_head_tiles", required=("num_heads",),
                            num_heads=num_heads)
    return tuple(_C.decode_head_tile_choices(num_heads))


def cake_sparse_mla_sm120_dsv4_nvfp4_num_chunks(topk: int, extra_topk: int = 0) -> int:
    """Chunks of 64 candidates in a token's lists: ``ceil(topk / 64) + ceil(extra_topk / 64)``.

    Args:
        topk: width of the main candidate list (>= 1).
        extra_topk: width of the extra candidate list (>= 0; 0: none).

    No plan has more splits than this (each split holds at least one chunk), so scratch with
    this many splits covers every plan of the shape.
    """
    topk, extra_topk = int_args("cake_sparse_mla_sm120_dsv4_nvfp4_num_chunks", required=("topk", "extra_topk"),
                                topk=topk, extra_topk=extra_topk)
    return _C.decode_num_chunks(topk, extra_topk)


def cake_sparse_mla_sm120_dsv4_nvfp4_plan_splits(
    *,
    num_tokens: int,
    num_heads: int,
    topk: int,
    extra_topk: int = 0,
    num_sms: int,
    max_splits: int = DEFAULT_MAX_SPLITS,
    head_tiles: int = 1,
    min_chunks_per_split: int = 1,
    max_unsplit_chunks: int = MAX_CHUNKS_PER_SPLIT,
) -> Tuple[int, int]:
    """``(num_splits, chunks_per_block)``: how many CTAs share each (token, head block)'s
    candidates, and the most chunks of 64 one of them holds.

    A count between ``fewest = ceil(chunks / 32)`` (a split holds at most 32 chunks; 2 instead of
    1 when ``chunks > max_unsplit_chunks`` and ``max_splits`` allows two) and
    ``most = max(fewest, min(max_splits, max(1, chunks // min_chunks_per_split)))`` (a split holds
    at least ``min_chunks_per_split`` chunks where the lists have that many and 32 a split allow
    it). With no token, or when ``items = num_tokens * head blocks`` reaches ``num_sms`` unsplit,
    ``fewest``; otherwise the ``n`` of least cost
    ``ceil(items * n / num_sms) * (ceil(chunks / n) + 3) + (1 if n > 1 else 0)``: whole waves of
    work items, each its split's chunks plus a work item's fixed cost (about three chunks), and
    the merge when it splits; the smallest ``n`` of equal costs. Split ``s`` of ``n`` holds chunks
    ``[s * chunks // n, (s + 1) * chunks // n)``.

    Args:
        num_tokens: T, the query tokens (>= 0).
        num_heads: H, one of 8, 16, ..., 128.
        topk: width of the main candidate list (>= 1).
        extra_topk: width of the extra candidate list (0: none).
        num_sms: the multiprocessor count to fill (>= 1).
        max_splits: the most splits per (token, head block) (>= 1); the lists may hold at most
            ``16 * max_splits`` chunks.
        head_tiles: sixteen-head tiles per head block, one of
            ``cake_sparse_mla_sm120_dsv4_nvfp4_decode_head_tiles(num_heads)``.
        min_chunks_per_split: the fewest chunks a split should hold (>= 1). The op uses 2 where the
            splits run the Hopper kernels (a Hopper GPU, unless the kernel override keeps it on the
            portable kernel), which leave one-chunk splits to the slower portable body; 1 on the CPU
            and the portable kernel. ``cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode`` applies the
            device's.
        max_unsplit_chunks: the most chunks a planned single split holds (>= 1; above it, two
            splits where ``max_splits`` allows). The op uses 32 on every device (every kernel runs
            a single split of up to 32 chunks itself); a lower value is a knob for callers who want
            splits sooner. An explicit ``num_splits=1`` is accepted up to 32 chunks everywhere.

    Bad arguments raise ValueError naming the argument.
    """
    # head_tiles None is taken as before (the C++ planner's default)
    names = ("num_tokens", "num_heads", "topk", "extra_topk", "num_sms", "max_splits", "min_chunks_per_split",
             "max_unsplit_chunks")
    (num_tokens, num_heads, topk, extra_topk, num_sms, max_splits, head_tiles, min_chunks_per_split,
     max_unsplit_chunks) = int_args("cake_sparse_mla_sm120_dsv4_nvfp4_plan_splits", required=names,
                                    num_tokens=num_tokens, num_heads=num_heads, topk=topk, extra_topk=extra_topk,
                                    num_sms=num_sms, max_splits=max_splits, head_tiles=head_tiles,
                                    min_chunks_per_split=min_chunks_per_split, max_unsplit_chunks=max_unsplit_chunks)
    plan = _C.plan_decode(num_tokens, num_heads, topk, extra_topk, num_sms, max_splits, head_tiles,
                          min_chunks_per_split=min_chunks_per_split, max_unsplit_chunks=max_unsplit_chunks)
    return plan["num_splits"], plan["chunks_per_block"]


def cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode(
    *,
    num_tokens: int,
    num_heads: int,
    topk: int,
    extra_topk: int = 0,
    num_sms: Optional[int] = None,
    device: DeviceLike = None,
    max_splits: int = DEFAULT_MAX_SPLITS,
    head_tiles: Optional[int] = None,
    num_splits: Optional[int] = None,
) -> Dict[str, int]:
    """The plan the decode runs for this shape: the dict the decode API returns,
    ``{"head_tiles": ht, "num_splits": n, "chunks_per_block": c}``.

    Args:
        num_tokens: T (>= 0).
        num_heads: H, one of 8, 16, ..., 128.
        topk: width of the main candidate list (>= 1).
        extra_topk: width of the extra candidate list (0: none).
        num_sms: the multiprocessor count to fill; None: the device's (the intra-op thread count
            on the CPU).
        device: where the call runs (a torch.device or a string); None: the current CUDA device
            when there is one, else the CPU. Its shared memory caps the head tile (1 on GPUs with
            about 100 KB per block, as for the prefill), and whether its splits run the Hopper
            kernels (under the kernel override in force) sets ``min_chunks_per_split``.
        max_splits: the most splits per (token, head block).
        head_tiles: an explicit head tile to describe (checked as the op checks it); None: the
            planner's: the largest choice the device runs, or, for H = 64 and 128 on a device whose
            64-head blocks run the 64-head Hopper kernel, 1 (16-head units on the small-heads
            kernel's split form) where T x the 64-head blocks are less than the SM count and the
            plan of 1 splits with two chunks a split or more and costs less in the planner's model
            (docs/contract.md section 12).
        num_splits: an explicit split count to describe (checked as the op checks it); None: the
            planner's (``cake_sparse_mla_sm120_dsv4_nvfp4_plan_splits`` with the device's
            ``min_chunks_per_split``: 2 where its splits run the Hopper kernels, else 1; and
            ``max_unsplit_chunks`` 32; where the splits run the small-heads Hopper kernel, its
            units counted as work items, and at H = 80 and 96 one split costed as the two grids
            it runs: docs/contract.md section 12).

    Bad arguments raise ValueError naming the argument.
    """
    num_tokens, num_heads, topk, extra_topk, num_sms, max_splits, head_tiles, num_splits = int_args(
        "cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode",
        required=("num_tokens", "num_heads", "topk", "extra_topk", "max_splits"), num_tokens=num_tokens,
        num_heads=num_heads, topk=topk, extra_topk=extra_topk, num_sms=num_sms, max_splits=max_splits,
        head_tiles=head_tiles, num_splits=num_splits)
    return _C.plan_decode_on_device(num_tokens, num_heads, topk, extra_topk, num_sms, max_splits, head_tiles,
                                    num_splits, device=_device_name(device))


def cake_sparse_mla_sm120_dsv4_nvfp4_scratch_bytes(num_tokens: int, num_heads: int, topk: int, extra_topk: int = 0,
                                                   *, max_splits: Optional[int] = None) -> int:
    """Bytes of decode scratch (``mid_out`` and ``mid_lse``, fp32) that cover every plan of a shape.

    ``S * T * H * (512 + 1) * 4`` with ``S = num_chunks(topk, extra_topk)`` splits, or
    ``min(S, max_splits)`` when ``max_splits`` is given (every plan made with that ``max_splits``).

    Args:
        num_tokens: T (>= 0).
        num_heads: H, one of 8, 16, ..., 128.
        topk: width of the main candidate list (>= 1).
        extra_topk: width of the extra candidate list (0: none).
        max_splits: the ``max_splits`` the calls use; None: any.
    """
    num_tokens, num_heads, topk, extra_topk, max_splits = int_args(
        "cake_sparse_mla_sm120_dsv4_nvfp4_scratch_bytes", required=("num_tokens", "num_heads", "topk", "extra_topk"),
        num_tokens=num_tokens, num_heads=num_heads, topk=topk, extra_topk=extra_topk, max_splits=max_splits)
    return _C.decode_scratch_bytes(num_tokens, num_heads, topk, extra_topk, max_splits)


def cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch(
    num_tokens: int,
    num_heads: int,
    topk: int,
    extra_topk: int = 0,
    *,
    max_splits: Optional[int] = None,
    device: DeviceLike = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """New decode scratch ``(mid_out, mid_lse)`` covering every plan of a shape.

    ``mid_out`` is float32 ``[S, T, H, 512]`` and ``mid_lse`` float32 ``[S, T, H]``, with ``S`` the
    splits of ``cake_sparse_mla_sm120_dsv4_nvfp4_scratch_bytes`` (its byte count in all). The
    contents need no initialisation: every split a call uses is written before it is read.

    Args:
        num_tokens: T (>= 0).
        num_heads: H, one of 8, 16, ..., 128.
        topk: width of the main candidate list (>= 1).
        extra_topk: width of the extra candidate list (0: none).
        max_splits: the ``max_splits`` the calls use (allocates ``min(chunks, max_splits)``
            splits); None: every plan, ``num_chunks(topk, extra_topk)`` splits.
        device: where to allocate; None: torch's default device.
    """
    num_tokens, num_heads, topk, extra_topk, max_splits = int_args(
        "cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch",
        required=("num_tokens", "num_heads", "topk", "extra_topk"), num_tokens=num_tokens, num_heads=num_heads,
        topk=topk, extra_topk=extra_topk, max_splits=max_splits)
    _C.decode_scratch_bytes(num_tokens, num_heads, topk, extra_topk, max_splits)  # checks the arguments
    if device is not None:
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as error:  # torch names neither the function nor the argument
            raise ValueError(f"cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch: device: expected None, a "
                             f"torch.device or a device string, got {device!r} ({error})") from None
    splits = _C.decode_scratch_splits(topk, extra_topk, max_splits)
    mid_out = torch.empty(splits, num_tokens, num_heads, _C.HEAD_DIM, dtype=torch.float32, device=device)
    mid_lse = torch.empty(splits, num_tokens, num_heads, dtype=torch.float32, device=device)
    return mid_out, mid_lse


def cake_sparse_mla_sm120_dsv4_nvfp4_select_kernel(*, num_tokens: int, num_heads: int, topk: int, extra_topk: int = 0,
                                                   num_sms: int) -> str:
    """``"decode"`` or ``"prefill"``: which op serves this shape on ``num_sms`` multiprocessors.

    The decode when the prefill cannot run the shape (``num_heads`` not a multiple of 16, more
    than 16 chunks of 64 candidates) or when the prefill's largest launch, ``T * H / 16`` work
    items, is below a percentage of the SM count: 200% for ``H`` a multiple of 64, 300% for ``H`` =
    80 and 96, 50% for other head counts. Else the prefill. The percentages come from an H200 grid of both ops
    (docs/planner.md).

    Args:
        num_tokens: T (>= 0).
        num_heads: H, one of 8, 16, ..., 128.
        topk: width of the main candidate list (>= 1).
        extra_topk: width of the extra candidate list (0: none); at most ``16 * 16`` chunks in all
            (the decode's default ``max_splits``).
        num_sms: the multiprocessor count (>= 1).

    Bad arguments raise ValueError naming the argument.
    """
    num_tokens, num_heads, topk, extra_topk, num_sms = int_args(
        "cake_sparse_mla_sm120_dsv4_nvfp4_select_kernel",
        required=("num_tokens", "num_heads", "topk", "extra_topk", "num_sms"), num_tokens=num_tokens,
        num_heads=num_heads, topk=topk, extra_topk=extra_topk, num_sms=num_sms)
    return _C.select_attention_op(num_tokens, num_heads, topk, extra_topk, num_sms)


# The largest width that rounds up to whole chunks within int64 (a wider one, which only an
# expanded tensor can have, goes to the planner as it is, which rejects it by its chunk count).
_LARGEST_ROUNDED_WIDTH = (1 << 63) - 64


def chunk_width(width):
    """A list width rounded up to whole chunks of 64: all a plan depends on (an int, or under
    torch.compile a symbolic one, so that a graph is specialised to the chunk count)."""
    return width if width > _LARGEST_ROUNDED_WIDTH else (width + 63) // 64 * 64


@torch.compiler.assume_constant_result
def _decode_plan_steps(device_type: str, device_index: Optional[int], num_heads: int, topk: int, extra_topk: int,
                       max_splits: int, head_tiles: Optional[int], num_splits: Optional[int],
                       override_key: int) -> Optional[tuple]:
    """The C++ planner's decode plan on a device for every token count, or None when the op
    rejects these ints (a constant while tracing; ``override_key`` ties it to the kernel
    override in force, which decides whether the splits run the Hopper kernels)."""
    # The plan depends on the lists' widths only through their chunks of 64: a width rounded up to
    # its chunks shares the cache entry (a serving loop whose widths grow by a token a step asks
    # the C++ planner once a chunk, not once a step); widths the op rejects go as they are.
    topk, extra_topk = (chunk_width(width) if isinstance(width, int) and width >= 1 else width
                        for width in (topk, extra_topk))
    return _cached_decode_plan_steps(resolved_device(device_type, device_index), num_heads, topk, extra_topk,
                                     max_splits, head_tiles, num_splits, override_key)


# Computed once per device and shape (see planner._cached_plan_steps); typed, so that a float
# argument reaches the C++ planner (which rejects it) rather than an int's entry.
@functools.lru_cache(maxsize=4096, typed=True)
def _cached_decode_plan_steps(device: Tuple[str, int], num_heads: int, topk: int, extra_topk: int, max_splits: int,
                              head_tiles: Optional[int], num_splits: Optional[int],
                              override_key: int) -> Optional[tuple]:
    steps = _C.decode_plan_steps(num_heads, topk, extra_topk, max_splits, head_tiles, num_splits, device=device[0])
    return None if steps is None else tuple(tuple(step) for step in steps)


def decode_plan_for_call(device: torch.device, num_tokens, num_heads: int, topk: int, extra_topk: int,
                         max_splits: int, head_tiles: Optional[int],
                         num_splits: Optional[int]) -> Optional[Dict[str, int]]:
    """The plan of a decode call on ``device``, or None when the op rejects these ints. For a
    symbolic token count (``torch.compile`` with dynamic shapes) the plan's values are symbolic
    too, built without a guard: the planner's steps change the plan up to
    ~20 times over T = 0 .. SMs at up to 2048 candidates (up to ~60 with 16384), and a guard per
    step would recompile the graph at each."""
    # The override's key is read here, in traced code, so torch.compile guards on it.
    steps = planned_for_q(device, _decode_plan_steps, device.type, device.index, num_heads, topk, extra_topk,
                          max_splits, head_tiles, num_splits, _kernel_override._key)
    if steps is None:
        return None
    # Eager: the last step T has reached (what the sum below gives an int T). Not while tracing,
    # where a symbolic T passes for an int and the comparisons would become guards.
    if not torch.compiler.is_compiling() and isinstance(num_tokens, int):
        plan = steps[0][1:]
        for min_tokens, *step in steps[1:]:
            if num_tokens < min_tokens:
                break
            plan = step
        head_tiles, num_splits, chunks_per_block = plan
        return {"head_tiles": head_tiles, "num_splits": num_splits, "chunks_per_block": chunks_per_block}
    # The first step's values plus each later step's change times 0 or 1 (T has reached it): plain
    # ints for an int T, symbolic values and no guard for a symbolic one.
    plan = previous = list(steps[0][1:])
    for min_tokens, *step in steps[1:]:
        # 1 once T reaches the step. The builtins, not torch.sym_min/sym_max: torch.compile traces
        # them on a symbolic T as sym_min/sym_max (no guard) and folds them on an int T (a static
        # or specialised T, where some torch versions cannot trace torch.sym_max of two ints).
        reached = min(max(num_tokens - min_tokens + 1, 0), 1)
        plan = [value + (new - old) * reached for value, new, old in zip(plan, step, previous)]
        previous = step
    head_tiles, num_splits, chunks_per_block = plan
    return {"head_tiles": head_tiles, "num_splits": num_splits, "chunks_per_block": chunks_per_block}


@torch.compiler.assume_constant_result
def decode_token_limit(device_type: str, device_index: Optional[int], num_heads: int, topk: int,
                       extra_topk: int) -> Optional[int]:
    """From which token count ``select_kernel`` picks the prefill on a device (-1: never; None:
    neither op serves the shape). A constant while tracing."""
    return _cached_decode_token_limit(resolved_device(device_type, device_index), num_heads, topk, extra_topk)


@functools.lru_cache(maxsize=4096, typed=True)
def _cached_decode_token_limit(device: Tuple[str, int], num_heads: int, topk: int, extra_topk: int) -> Optional[int]:
    return _C.decode_token_limit(num_heads, topk, extra_topk, device=device[0])
