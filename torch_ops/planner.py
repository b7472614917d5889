"""Head-tile planning for the prefill.

The thresholds are one table in C++ (csrc/ops/prefill_plan.h), read here once; this module and
the C++ op evaluate it with the same rule, so ``head_tiles=None`` resolves to the same plan in
both (tests/test_planner.py checks that). The rule is plain Python so that it traces under
``torch.compile`` with symbolic token counts.
"""
from typing import Tuple

import torch

from . import _C

CHUNK_SIZE = 64
MAX_CHUNKS = 16
HEADS_PER_TILE = 16

# {kernel: {head_tiles: minimum work items, in percent of the SM count, for that tile to be chosen}}
PLAN_KERNELS = ("portable", "hopper")
_MIN_ITEMS_PERCENT = {kernel: dict(_C.prefill_plan_table(kernel == "hopper")) for kernel in PLAN_KERNELS}


def cake_sparse_mla_sm120_dsv4_nvfp4_prefill_head_tiles(num_heads: int) -> Tuple[int, ...]:
    """Head-tile choices (sixteen-head tiles per work item) for ``num_heads``.

    ``(1,)`` plus 2 when ``num_heads % 32 == 0`` plus 4 when ``num_heads % 64 == 0``; ``()`` for a
    head count without a prefill instance (anything but 16, 32, ..., 128).
    """
    if not (16 <= num_heads <= 128 and num_heads % 16 == 0):
        return ()
    choices = [1]
    if num_heads % 32 == 0:
        choices.append(2)
    if num_heads % 64 == 0:
        choices.append(4)
    return tuple(choices)


def plan_head_tiles(num_tokens, num_heads: int, num_sms: int, kernel: str = "portable") -> int:
    """The planning rule itself (no argument checks); mirrors cake::plan_prefill_head_tiles."""
    thresholds = _MIN_ITEMS_PERCENT[kernel]
    choices = cake_sparse_mla_sm120_dsv4_nvfp4_prefill_head_tiles(num_heads)
    for head_tiles in reversed(choices):
        if head_tiles == 1:
            return 1
        items = num_tokens * (num_heads // (HEADS_PER_TILE * head_tiles))
        if items * 100 >= thresholds[head_tiles] * num_sms:
            return head_tiles
    return 1


@torch.compiler.assume_constant_result
def _num_sms(device_type: str, device_index: int) -> int:
    if device_type == "cuda":
        return torch.cuda.get_device_properties(device_index).multi_processor_count
    return torch.get_num_threads()


@torch.compiler.assume_constant_result
def _max_head_tiles(device_type: str, device_index: int) -> int:
    if device_type == "cuda":
        smem = torch.cuda.get_device_properties(device_index).shared_memory_per_block_optin
        return _C.prefill_max_head_tiles(smem)
    return 4


@torch.compiler.assume_constant_result
def _prefill_kernel(device_type: str, device_index: int) -> str:
    if device_type == "cuda":
        props = torch.cuda.get_device_properties(device_index)
        hopper = _C.device_runs_hopper_prefill(props.major, props.shared_memory_per_block_optin)
        return "hopper" if hopper else "portable"
    return "portable"


def _device_index(device: torch.device) -> int:
    if device.index is not None:
        return device.index
    return torch.cuda.current_device() if device.type == "cuda" else -1


def device_max_head_tiles(device: torch.device) -> int:
    """Largest head tile the device's shared memory allows (4 on Hopper and the CPU, 4 on A100
    through a smaller instance, 1 on GPUs with ~100 KB per block such as sm_120)."""
    return _max_head_tiles(device.type, _device_index(device))


def device_prefill_kernel(device: torch.device) -> str:
    """The kernel family whose planner table applies on ``device``: "hopper" where 4-tile calls run
    the Hopper kernel (sm_90 with an sm_90a build), else "portable" (the CPU included)."""
    return _prefill_kernel(device.type, _device_index(device))


def device_num_sms(device: torch.device) -> int:
    """Multiprocessors of a CUDA device; intra-op threads for the CPU (what the C++ op uses).

    A constant while tracing, so ``torch.compile`` bakes the plan into the graph."""
    return _num_sms(device.type, _device_index(device))


def cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill(
    *, num_tokens: int, num_heads: int, topk: int, extra_topk: int = 0, num_sms: int, kernel: str = "portable"
) -> int:
    """Head tiles the prefill uses for this shape when ``head_tiles`` is not given.

    A larger tile shares each gathered, dequantized cache row among more heads; the planner
    takes the largest choice that still leaves enough work items (tokens x head blocks) for every
    multiprocessor, by thresholds measured on the H200 (docs/planner.md). On a GPU with less
    shared memory per block the op then caps the choice (``device_max_head_tiles``).

    Args:
        num_tokens: T, the query tokens of the call.
        num_heads: H, one of 16, 32, ..., 128.
        topk: width of the main candidate list (>= 1).
        extra_topk: width of the extra candidate list (0: none).
        num_sms: multiprocessors of the device (intra-op threads for the CPU).
        kernel: which planner table: "portable" or "hopper" (``device_prefill_kernel``).
    """
    choices = cake_sparse_mla_sm120_dsv4_nvfp4_prefill_head_tiles(num_heads)
    if not choices:
        raise ValueError(f"num_heads: expected 16, 32, ..., 128 (a prefill instance), got {num_heads}")
    if num_tokens < 0:
        raise ValueError(f"num_tokens: expected >= 0, got {num_tokens}")
    if topk < 1:
        raise ValueError(f"topk: expected >= 1, got {topk}")
    if extra_topk < 0:
        raise ValueError(f"extra_topk: expected >= 0, got {extra_topk}")
    chunks = -(-topk // CHUNK_SIZE) + -(-extra_topk // CHUNK_SIZE)
    if chunks > MAX_CHUNKS:
        raise ValueError(f"topk/extra_topk: expected ceil(topk/64) + ceil(extra_topk/64) <= 16, got {chunks}")
    if num_sms < 1:
        raise ValueError(f"num_sms: expected >= 1, got {num_sms}")
    if kernel not in PLAN_KERNELS:
        raise ValueError(f"kernel: expected one of {PLAN_KERNELS}, got {kernel!r}")
    return plan_head_tiles(num_tokens, num_heads, num_sms, kernel)
