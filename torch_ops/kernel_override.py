"""Which CUDA prefill kernel serves a call, overridden for tests and benchmarks.

The override lives in C++ (csrc/ops/prefill_kernel_override.h) and is validated there. It starts
from the environment, parsed once when torch_ops is imported: ``CAKE_PREFILL_KERNEL`` =
``hopper`` | ``portable`` | ``hopper_small`` and ``CAKE_PREFILL_VARIANT`` = ``stages,k_tiles`` (a
bad value raises ValueError naming the variable). After that, only these functions change it.

- ``kernel="portable"`` keeps Hopper GPUs on the portable kernel; ``kernel="hopper"`` requires
  the Hopper kernels (calls on a CUDA device that cannot run them raise ValueError) and chooses
  as a Hopper GPU does by default: the 64-head kernel for H % 64 == 0 at head_tiles 4, the
  small-heads kernel (plan kernel ``"hopper_small"``; docs/hopper_small_kernel.md) for every
  other call. ``kernel="hopper_small"`` is a synonym of ``kernel="hopper"`` (the same family,
  named by its small-heads kernel).
- ``variant=(stages, k_tiles)`` runs every CUDA prefill call on the portable instance with that
  pipeline for the call's head tile (and so on the portable kernel); the decode keeps its own
  ``(2, 1)`` instances.

The planner follows the override (on Hopper, the portable kernel's table applies under
``kernel="portable"``). A graph compiled by ``torch.compile`` guards on it: changing it makes
the next call recompile.
"""
import contextlib
from typing import Iterator, Optional, Tuple

from . import _C

# The override in force as one int (override_key): the same int exactly when the override is the
# same. The APIs pass it into their traced planning, so torch.compile guards on it: a graph
# recompiles when the override changes, and a graph compiled under an override is reused whenever
# that override is back in force (a counter bumped on every set would recompile on each, and after
# torch.compile's recompile limit fail a fullgraph function). Set with the override; read from the
# environment at import (below).
_key = 0

_KERNELS = (None, "hopper", "portable", "hopper_small")


def override_key(override: dict) -> int:
    """``override`` (``get_prefill_kernel_override()``'s dict) as an int: kernel and variant."""
    variant = override["variant"]
    # Validated pipelines: a few stages and k-tiles each, far below 1000 (so no two overrides share a key).
    assert variant is None or all(0 <= value < 1000 for value in variant), variant
    return _KERNELS.index(override["kernel"]) * 1_000_000 + (0 if variant is None else 1 + 1000 * variant[0] + variant[1])


def get_prefill_kernel_override() -> dict:
    """The override in force: ``{"kernel": None | "hopper" | "portable" | "hopper_small", "variant": None |
    (stages, k_tiles)}``."""
    return _C.get_prefill_kernel_override()


def set_prefill_kernel_override(kernel: Optional[str] = None, variant: Optional[Tuple[int, int]] = None) -> None:
    """Replaces the override (``None`` for both: every device's own choice).

    ``kernel``: None, ``"hopper"`` (require the Hopper kernels: the 64-head one where it serves
    the call, the small-heads one for the others), ``"hopper_small"`` (the same as ``"hopper"``)
    or ``"portable"`` (keep Hopper GPUs on the portable kernel). ``variant``: None or
    ``(stages, k_tiles)``, the pipeline of a compiled portable instance that every CUDA prefill call
    then runs (the decode keeps its own ``(2, 1)`` instances).

    Raises ValueError naming ``kernel`` or ``variant`` for a value the library cannot run (a
    kernel other than "hopper" / "portable" / "hopper_small", a pipeline no portable instance
    has, a variant with a Hopper kernel); the override is then left as it was.
    """
    global _key
    _C.set_prefill_kernel_override(kernel, variant)
    _key = override_key(_C.get_prefill_kernel_override())


@contextlib.contextmanager
def prefill_kernel_override(kernel: Optional[str] = None, variant: Optional[Tuple[int, int]] = None) -> Iterator[None]:
    """Sets the override for the ``with`` block and restores the previous one on exit.

    ``kernel`` and ``variant`` mean what they mean for ``set_prefill_kernel_override`` (and are
    checked the same way, before the block runs).
    """
    previous = get_prefill_kernel_override()
    set_prefill_kernel_override(kernel, variant)
    try:
        yield
    finally:
        set_prefill_kernel_override(**previous)


# Read the environment now, so a bad value fails the import rather than a later call.
_key = override_key(get_prefill_kernel_override())
