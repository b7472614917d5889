"""cake: DeepSeek-V4 sparse-MLA prefill over an NVFP4-quantized paged KV cache.

Importing this package loads the compiled extension, which registers the operators under
``torch.ops.cake`` (``sparse_mla_prefill``, ``sparse_mla_prefill_functional``,
``nvfp4_pack_cache``, ``nvfp4_append_cache``) with their fake implementations
(``torch_ops.meta``). ``sparse_mla_prefill`` is a short name for
``cake_sparse_mla_sm120_dsv4_nvfp4_prefill``.
"""
import torch  # noqa: F401  (the extension links against torch's libraries)

from . import _C  # noqa: F401  registers torch.ops.cake.*
from . import meta  # noqa: F401  fake implementations for torch.compile / FakeTensor
from ._version import __version__
from .cache import (
    nvfp4_dequantize_sparse_mla_cache,
    nvfp4_quantize_append_sparse_mla_cache,
    nvfp4_quantize_pack_sparse_mla_cache,
)
from .kernel_override import get_prefill_kernel_override, prefill_kernel_override, set_prefill_kernel_override
from .planner import (
    cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill,
    cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill_details,
    cake_sparse_mla_sm120_dsv4_nvfp4_prefill_head_tiles,
)
from .functional import sparse_mla_prefill_functional
from .prefill import cake_sparse_mla_sm120_dsv4_nvfp4_prefill

sparse_mla_prefill = cake_sparse_mla_sm120_dsv4_nvfp4_prefill

__all__ = [
    "cake_sparse_mla_sm120_dsv4_nvfp4_prefill",
    "sparse_mla_prefill",
    "sparse_mla_prefill_functional",
    "cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill",
    "cake_sparse_mla_sm120_dsv4_nvfp4_prefill_head_tiles",
    "nvfp4_quantize_pack_sparse_mla_cache",
    "nvfp4_quantize_append_sparse_mla_cache",
    "nvfp4_dequantize_sparse_mla_cache",
    "cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill_details",
    "set_prefill_kernel_override",
    "get_prefill_kernel_override",
    "prefill_kernel_override",
]
