"""Fake (meta) implementations of the cake ops, installed as ``torch_ops.meta``."""
from . import fake_impls  # noqa: F401
