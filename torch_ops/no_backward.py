"""The Python functions' first check of their arguments: each tensor argument is a tensor, each
count an integer within int64 and each scale a real number within a double's range (``TypeError``
or ``ValueError`` naming it otherwise, where the dispatcher or the binding would name nothing or a
private function), and, since the cake operations have no backward, no
tensor requires grad.

The operators refuse inputs that require grad too (their Autograd kernel,
``csrc/ops/no_backward.cpp``); checking here as well names the Python function the caller used.
Under ``torch.compile`` the functions also put the call's overlap checks in the graph
(``check_apart_when_compiled``).
"""
import numbers
import operator
from typing import Optional, Tuple

import torch
import torch.fx


# The tensors every attention call needs (the rest are optional).
REQUIRED_ATTENTION_TENSORS = ("q", "kv_cache", "indices", "output", "out_lse")

# cake::check_call_apart returns nothing: kept in a compiled graph only as an op with effects.
torch.fx.node.has_side_effect(torch.ops.cake.check_call_apart.default)


def check_apart_when_compiled(op: str, *tensors: Optional[torch.Tensor]) -> None:
    """Under torch.compile, cake::check_call_apart on the call's tensors (in `op`'s argument
    order) right before its mutating op: functionalization hands that op copies of tensors that are
    views of one storage, so only this check, in the graph, sees two of them share bytes (the eager
    op's ValueError, at run time). Eager calls skip it: the op checks the same itself."""
    if torch.compiler.is_compiling():
        torch.ops.cake.check_call_apart(op, list(tensors))


def check_tensor_args(function: str, *, required: Tuple[str, ...] = (), **tensors: Optional[torch.Tensor]) -> None:
    """Raise ``TypeError`` naming an argument of ``tensors`` that is not a tensor (``None`` is
    allowed except for the names in ``required``), ``ValueError`` naming one that is not a dense
    tensor (sparse or nested: the dispatcher would name only the op and the backend), and
    ``NotImplementedError`` if grad mode is on and one of them requires grad. (One pass: every
    eager call runs it.)"""
    grad_enabled = torch.is_grad_enabled()
    for name, tensor in tensors.items():
        if tensor is None:
            if name in required:
                raise TypeError(f"{function}: {name}: expected a torch.Tensor, got NoneType")
        elif not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{function}: {name}: expected a torch.Tensor, got {type(tensor).__name__}")
        elif tensor.layout != torch.strided or tensor.is_nested:
            layout = "nested" if tensor.is_nested else str(tensor.layout)
            raise ValueError(f"{function}: {name}: expected a dense (torch.strided) tensor, got a {layout} one")
        elif grad_enabled and tensor.requires_grad:
            raise NotImplementedError(
                f"{function}: {name} requires grad, but this operation has no backward. Call it under "
                f"torch.no_grad() or torch.inference_mode(), or pass {name}.detach().")


def int_args(function: str, *, required: Tuple[str, ...] = (), **values: Optional[int]) -> Tuple[Optional[int], ...]:
    """``values`` as Python ints, in their order (``None`` kept where allowed: not for the names in
    ``required``); ``TypeError`` naming one that is not an integer (anything with ``__index__`` but
    a bool), ``ValueError`` naming one outside int64. Under ``torch.compile`` an int argument can arrive symbolic (it changed between
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
        # (Literal bounds: the check is on every eager call's path.)
        if not -0x8000000000000000 <= index <= 0x7FFFFFFFFFFFFFFF:
            raise ValueError(f"{function}: {name}: expected a value in int64's range, got {_int_text(index)}")
        result.append(index)
    return tuple(result)


def _int_text(value: int) -> str:
    """`value` in decimal where that is short; Python refuses to print an int of over 4300 digits."""
    return str(value) if value.bit_length() <= 256 else f"a {value.bit_length()}-bit integer"


# Ints of smaller magnitude convert to a finite double; from this one on they round to infinity
# (float() raises OverflowError).
_DOUBLE_INT_LIMIT = (1 << 1024) - (1 << 970)


def str_arg(function: str, name: str, value: Optional[str]) -> Optional[str]:
    """``value`` if it is a string or None; ``TypeError`` naming the argument otherwise (the
    binding would name a private function)."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{function}: {name}: expected None or a string, got {type(value).__name__}")
    return value


def float_args(function: str, **values) -> None:
    """``TypeError`` naming a scale argument that is not a real number (a bool, ``None``, a string,
    a complex, a tensor), and ``ValueError`` naming one too large for a double (a huge int), which
    the operator would otherwise reject with the dispatcher's ``RuntimeError`` naming no function.
    Under ``torch.compile`` a float can arrive symbolic."""
    for name, value in values.items():
        if type(value) is float:  # the common case, without the ABC check (~0.4 us each)
            continue
        if type(value) is int:
            # An int past a double's range: the dispatcher would reject it naming nothing. Compared,
            # not converted, so that the check also works where torch.compile traces it.
            if -_DOUBLE_INT_LIMIT < value < _DOUBLE_INT_LIMIT:
                continue
            raise ValueError(f"{function}: {name}: expected a value within a double's range, got "
                             f"{_int_text(value)}")
        if isinstance(value, bool) or not isinstance(value, (numbers.Real, torch.SymFloat, torch.SymInt)):
            raise TypeError(f"{function}: {name}: expected a float, got {type(value).__name__}")
        if isinstance(value, (torch.SymFloat, torch.SymInt)):
            continue
        try:  # another real type (a Fraction, a numpy number) past a double's range
            float(value)
        except OverflowError:
            raise ValueError(f"{function}: {name}: expected a value within a double's range, got one "
                             f"too large to convert") from None
