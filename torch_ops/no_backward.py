"""The Python functions' first check of their arguments: each tensor argument is a tensor, each
count an integer within int64 and each scale a real number within a double's range (``TypeError``
or ``ValueError`` naming it otherwise, where the dispatcher or the binding would name nothing or a
private function), and, since the cake operations have no backward, no
tensor requires grad.

The operators refuse inputs that require grad too (their Autograd kernel,
``csrc/ops/no_backward.cpp``); checking here as well names the Python function the caller used.
"""
import numbers
import operator
from typing import Optional, Tuple

import torch


# The tensors every attention call needs (the rest are optional).
REQUIRED_ATTENTION_TENSORS = ("q", "kv_cache", "indices", "output", "out_lse")


def check_tensor_args(function: str, *, required: Tuple[str, ...] = (), **tensors: Optional[torch.Tensor]) -> None:
    """Raise ``TypeError`` naming an argument of ``tensors`` that is not a tensor (``None`` is
    allowed except for the names in ``required``), and ``NotImplementedError`` if grad mode is
    on and one of them requires grad. (One pass: every eager call runs it.)"""
    grad_enabled = torch.is_grad_enabled()
    for name, tensor in tensors.items():
        if tensor is None:
            if name in required:
                raise TypeError(f"{function}: {name}: expected a torch.Tensor, got NoneType")
        elif not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{function}: {name}: expected a torch.Tensor, got {type(tensor).__name__}")
        elif grad_enabled and tensor.requires_grad:
            raise NotImplementedError(
                f"{function}: {name} requires grad, but this operation has no backward. Call it under "
                f"torch.no_grad() or torch.inference_mode(), or pass {name}.detach().")


def int_args(function: str, *, required: Tuple[str, ...] = (), **values: Optional[int]) -> Tuple[Optional[int], ...]:
    """``values`` as Python ints, in their order (``None`` kept where allowed: not for the names in
    ``required``); ``TypeError`` naming one that is not an integer (anything with ``__index__`` but
    a bool). Under ``torch.compile`` an int argument can arrive symbolic (it changed between
    calls); its value here is a constant, which the planners need (one graph per value, as the
    plan differs anyway)."""
    result = []
    for name, value in values.items():
        if value is None and name not in required:
            result.append(value)
            continue
        try:  # (operator.index even for an int: traced, a symbolic int may pass for one)
            if isinstance(value, bool):
                raise TypeError
            index = operator.index(value)
        except TypeError:
            raise TypeError(f"{function}: {name}: expected an int, got {type(value).__name__}") from None
        # The operators and the planners take int64: a Python int past it would reach them as a
        # binding's or the dispatcher's type error naming neither the argument nor this function.
        if not _INT64_MIN <= index <= _INT64_MAX:
            raise ValueError(f"{function}: {name}: expected a value in int64's range, got {index}")
        result.append(index)
    return tuple(result)


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_DOUBLE_INT_LIMIT = 1 << 1023  # every int of smaller magnitude converts to a finite double


def str_arg(function: str, name: str, value: Optional[str]) -> Optional[str]:
    """``value`` if it is a string or None; ``TypeError`` naming the argument otherwise (the
    binding would name a private function)."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{function}: {name}: expected None or a string, got {type(value).__name__}")
    return value


def float_args(function: str, **values) -> None:
    """``TypeError`` naming a scale argument that is not a real number (a bool, ``None``, a string,
    a complex, a tensor), which the operator would otherwise reject with the dispatcher's
    ``RuntimeError`` naming no function. Under ``torch.compile`` a float can arrive symbolic."""
    for name, value in values.items():
        if type(value) is float or (type(value) is int and -_DOUBLE_INT_LIMIT < value < _DOUBLE_INT_LIMIT):
            continue  # the common cases, without the ABC check (~0.4 us each)
        if isinstance(value, bool) or not isinstance(value, (numbers.Real, torch.SymFloat, torch.SymInt)):
            raise TypeError(f"{function}: {name}: expected a float, got {type(value).__name__}")
        if isinstance(value, (torch.SymFloat, torch.SymInt)):
            continue
        try:  # an int (or other real) past a double's range: the dispatcher would reject it unnamed
            float(value)
        except OverflowError:
            raise ValueError(f"{function}: {name}: expected a value within a double's range, got one "
                             f"too large to convert") from None
