"""The cake operations have no backward: refuse inputs that would need one.

The operators refuse them too (their Autograd kernel, ``csrc/ops/no_backward.cpp``); checking
here as well names the Python function the caller used.
"""
from typing import Optional

import torch


def check_no_grad(function: str, **tensors: Optional[torch.Tensor]) -> None:
    """Raise ``NotImplementedError`` if grad mode is on and any of ``tensors`` requires grad."""
    if not torch.is_grad_enabled():
        return
    for name, tensor in tensors.items():
        if tensor is not None and tensor.requires_grad:
            raise NotImplementedError(
                f"{function}: {name} requires grad, but this operation has no backward. Call it under "
                f"torch.no_grad() or torch.inference_mode(), or pass {name}.detach().")
