"""Head-tile planning for the prefill: a thin layer over the C++ planner.

The rule, its tables, the kernel choice and the grid size live in one place,
``csrc/ops/prefill_plan.h``; the op uses it when ``head_tiles`` is None and this module asks it
through ``torch_ops._C``. Nothing here re-implements it.
"""
import functools
from typing import Dict, Optional, Tuple, Union

import torch

from . import _C
from . import kernel_override as _kernel_override
from .no_backward import int_args, str_arg

DeviceLike = Union[None, str, torch.device]


def _device_name(device: DeviceLike) -> Optional[str]:
    if device is None or isinstance(device, str):
        return device
    if isinstance(device, torch.device):
        return str(device)
    raise ValueError(f"device: expected None, a torch.device or a string, got {device!r}")


@torch.compiler.assume_constant_result
def _prefill_head_tiles(num_heads: int) -> Tuple[int, ...]:
    """The choices for an int ``num_heads`` (the wrappers' hot path: no argument check)."""
    return tuple(_C.prefill_head_tile_choices(num_heads))


@torch.compiler.assume_constant_result
def cake_sparse_mla_sm120_dsv4_nvfp4_prefill_head_tiles(num_heads: int) -> Tuple[int, ...]:
    """Head-tile choices (sixteen-head tiles per work item) for ``num_heads``.

    ``(1,)`` plus 2 when ``num_heads % 32 == 0`` plus 4 when ``num_heads % 64 == 0``; ``()`` for a
    head count without a prefill instance (anything but 16, 32, ..., 128).
    """
    (num_heads,) = int_args("cake_sparse_mla_sm120_dsv4_nvfp4_prefill_head_tiles", required=("num_heads",),
                            num_heads=num_heads)
    return _prefill_head_tiles(num_heads)


def cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill_details(
    *,
    num_tokens: int,
    num_heads: int,
    topk: int,
    extra_topk: int = 0,
    num_sms: Optional[int] = None,
    device: DeviceLike = None,
    kernel: Optional[str] = None,
    head_tiles: Optional[int] = None,
) -> Dict[str, Union[int, str]]:
    """The plan the prefill runs for this shape: the dict the prefill API returns.

    ``{"head_tiles": ht, "num_ctas": T * H / (16 * ht) work items, "grid_size": CTAs launched
    (num_ctas, or min(num_ctas, SMs) for the Hopper kernel's persistent grid), "kernel": "hopper"
    | "hopper_small" | "portable" | "cpu"}``. On Hopper the 64-head kernel ("hopper") serves
    H % 64 == 0 at head_tiles 4 and the small-heads kernel ("hopper_small") every other call: its
    persistent grid is min(T * H / G, SMs) with G = 32 or 16, the largest dividing H; with
    H = 48 and 112 the 64-head kernel runs every head in blocks of 64, the last padded (grid
    min(T * ceil(H / 64), SMs)); with H = 80 and 96 heads 0..63 run on the 64-head kernel and the
    small-heads kernel takes the rest, two grids of min(T, SMs) CTAs each (docs/contract.md, the
    plan's keys).

    Args:
        num_tokens: T, the query tokens of the call (>= 0).
        num_heads: H, one of 16, 32, ..., 128.
        topk: width of the main candidate list (>= 1).
        extra_topk: width of the extra candidate list (0: none). ``topk`` and ``extra_topk`` are
            checked as the op checks the list widths (at most 16 chunks of 64); they do not change
            the plan.
        device: where the call runs (a torch.device or a string such as ``"cuda:1"``); None: the
            current CUDA device when there is one, else the CPU. The device gives the kernel
            family (whose table applies; the kernel override included), the SM count (intra-op
            threads on the CPU) and the largest head tile its shared memory allows.
        kernel: ``"hopper"``, ``"portable"`` or ``"cpu"``: plan for that kernel family (the
            Hopper family includes the small-heads kernel; ``"hopper_small"`` is accepted and
            means ``"hopper"``). Without ``device`` it describes the family in general (no
            shared-memory cap) and then needs ``num_sms`` (except ``"cpu"``); with ``device`` it
            must be one the device runs (a Hopper GPU runs "portable" too).
        num_sms: the SM count to plan for; None: the device's.
        head_tiles: an explicit choice to describe (checked like the op checks it); None: the
            planner's choice.

    Bad arguments raise ValueError naming the argument.
    """
    return _checked_prefill_plan("cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill_details", num_tokens, num_heads, topk,
                                 extra_topk, num_sms, device, kernel, head_tiles)


def _checked_prefill_plan(function: str, num_tokens, num_heads, topk, extra_topk, num_sms, device, kernel,
                          head_tiles) -> Dict[str, Union[int, str]]:
    """The C++ planner's plan, its arguments checked once in the name of the public ``function``."""
    num_tokens, num_heads, topk, extra_topk, num_sms, head_tiles = int_args(
        function, required=("num_tokens", "num_heads", "topk", "extra_topk"), num_tokens=num_tokens,
        num_heads=num_heads, topk=topk, extra_topk=extra_topk, num_sms=num_sms, head_tiles=head_tiles)
    kernel = str_arg(function, "kernel", kernel)
    return _C.plan_prefill(num_tokens, num_heads, topk, extra_topk, num_sms, _device_name(device), kernel, head_tiles)


def cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill(
    *,
    num_tokens: int,
    num_heads: int,
    topk: int,
    extra_topk: int = 0,
    num_sms: Optional[int] = None,
    device: DeviceLike = None,
    kernel: Optional[str] = None,
) -> int:
    """Head tiles the prefill uses for this shape when ``head_tiles`` is not given.

    A larger tile shares each gathered, dequantized cache row among more heads; the planner
    takes the largest choice whose work items (tokens x head blocks) reach that choice's share of
    the SM count, a threshold measured on the H200 per kernel family (docs/planner.md; e.g. 50% for
    two tiles and 90% for four on the portable kernel, so the items may be fewer than the SMs),
    then caps it at what the device's shared memory per block allows.

    Args:
        num_tokens: T, the query tokens of the call (>= 0).
        num_heads: H, one of 16, 32, ..., 128.
        topk: width of the main candidate list (>= 1).
        extra_topk: width of the extra candidate list (0: none).
        num_sms: the SM count to plan for; None: the device's.
        device: where the call runs; None: the current CUDA device when there is one, else the CPU.
        kernel: ``"hopper"``, ``"portable"`` or ``"cpu"`` (``"hopper_small"`` means ``"hopper"``):
            plan for that kernel family; None: the device's own.

    Each argument means what it means for ``cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill_details``,
    which returns the whole plan. Bad arguments raise ValueError naming the argument.
    """
    return _checked_prefill_plan("cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill", num_tokens, num_heads, topk,
                                 extra_topk, num_sms, device, kernel, None)["head_tiles"]


def resolved_device(device_type: str, device_index: Optional[int]) -> Tuple[str, int]:
    """The device a planner call asks about, as the key of the planners' cached answers: its name,
    with the current CUDA device's index where none is given, and what its plans depend on that can
    change in a process besides the kernel override (whose key the callers add): on the CPU
    the intra-op threads, which the planner counts as its SMs (0 elsewhere)."""
    if device_index is None and device_type == "cuda":
        device_index = torch.cuda.current_device()
    name = device_type if device_index is None else f"{device_type}:{device_index}"
    return name, torch.get_num_threads() if device_type == "cpu" else 0


# The planners' answers for a device and a shape do not change within a process unless the key
# does, so each is computed once: a decode step would otherwise spend more host time planning (the
# C++ planner over every token count up to the SM count) than its kernels take on the GPU.
@functools.lru_cache(maxsize=4096, typed=True)
def _cached_plan_steps(device: Tuple[str, int], num_heads: int, head_tiles: Optional[int],
                       override_key: int) -> tuple:
    return tuple(tuple(step) for step in _C.prefill_plan_steps(num_heads, head_tiles, device=device[0]))


@torch.compiler.assume_constant_result
def _plan_steps(device_type: str, device_index: Optional[int], num_heads: int, head_tiles: Optional[int],
                override_key: int) -> tuple:
    """The C++ planner's answer on a device for every token count (a constant while tracing;
    ``override_key`` ties it to the kernel override in force)."""
    return _cached_plan_steps(resolved_device(device_type, device_index), num_heads, head_tiles, override_key)


@torch.compiler.assume_constant_result
def _planner_accepts(device_type: str, device_index: Optional[int], num_heads: int, head_tiles: Optional[int],
                     override_key: int) -> bool:
    """Whether the C++ planner accepts ``head_tiles`` for ``num_heads`` on a device (a constant while
    tracing): a head tile among the choices for H can still be past what the device's shared memory
    holds."""
    try:
        _cached_plan_steps(resolved_device(device_type, device_index), num_heads, head_tiles, override_key)
    except ValueError:
        return False
    return True


def planner_accepts(device: torch.device, num_heads: int, head_tiles: Optional[int]) -> bool:
    """``_planner_accepts`` for ``q``'s device, tied to the kernel override in force; True on a device
    without kernels, whose planning then raises the ValueError naming ``q`` (``planned_for_q``)."""
    if device.type not in ("cpu", "cuda"):
        return True
    return _planner_accepts(device.type, device.index, num_heads, head_tiles, _kernel_override._key)


def plan_for_tokens(steps: tuple, num_tokens) -> Dict[str, Union[int, str]]:
    """Reads the plan for ``num_tokens`` off the planner's steps. Under ``torch.compile`` with a
    symbolic token count each comparison becomes a guard, so a graph holds one plan."""
    _, head_tiles, kernel, ctas_per_token, grid_per_token, grid_base = steps[0]
    for min_tokens, *step in steps[1:]:
        if num_tokens < min_tokens:
            break
        head_tiles, kernel, ctas_per_token, grid_per_token, grid_base = step
    return {"head_tiles": head_tiles, "num_ctas": num_tokens * ctas_per_token,
            "grid_size": num_tokens * grid_per_token + grid_base, "kernel": kernel}


def q_device_error(device: torch.device) -> ValueError:
    """The error naming ``q`` for a call on a device without kernels (the ops themselves take meta
    tensors, through their fake implementations; the Python functions do not)."""
    return ValueError(f"q: expected a tensor on the CPU or a CUDA device, got one on {device}")


def planned_for_q(device: torch.device, planner, *args):
    """``planner(*args)`` for a call on ``q``'s device. That device must have kernels: the CPU or
    a CUDA device (the ops themselves also take meta tensors, through their fake
    implementations); where the planner rejects another one, the error names ``q``, not a
    ``device`` argument the caller never passed. (Checked only on failure: nothing on the hot
    path.)"""
    try:
        return planner(*args)
    except ValueError as error:
        if device.type not in ("cpu", "cuda"):
            raise q_device_error(device) from error
        raise


def plan_for_call(device: torch.device, num_tokens, num_heads: int, head_tiles: Optional[int]) -> Dict[str, Union[int, str]]:
    """The plan of a prefill call on ``device`` (what the op resolves for these arguments)."""
    # The override's key is read here, in traced code, so torch.compile guards on it.
    steps = planned_for_q(device, _plan_steps, device.type, device.index, num_heads, head_tiles,
                          _kernel_override._key)
    return plan_for_tokens(steps, num_tokens)
