"""cake: DeepSeek-V4 sparse-MLA prefill and decode over an NVFP4-quantized paged KV cache.

Importing this package loads the compiled extension, which registers the operators under
``torch.ops.cake`` (``sparse_mla_prefill``, ``sparse_mla_prefill_functional``,
``sparse_mla_decode``, ``nvfp4_pack_cache``, ``nvfp4_append_cache``) with their fake
implementations (``torch_ops.meta``). ``sparse_mla_prefill`` and ``sparse_mla_decode`` are short
names for ``cake_sparse_mla_sm120_dsv4_nvfp4_prefill`` and ``..._decode``;
``sparse_mla_attention`` runs whichever of the two serves a shape.
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
from .decode_planner import (
    cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch,
    cake_sparse_mla_sm120_dsv4_nvfp4_decode_head_tiles,
    cake_sparse_mla_sm120_dsv4_nvfp4_num_chunks,
    cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode,
    cake_sparse_mla_sm120_dsv4_nvfp4_plan_splits,
    cake_sparse_mla_sm120_dsv4_nvfp4_scratch_bytes,
    cake_sparse_mla_sm120_dsv4_nvfp4_select_kernel,
)
from .functional import sparse_mla_prefill_functional
from .prefill import cake_sparse_mla_sm120_dsv4_nvfp4_prefill
from .decode import cake_sparse_mla_sm120_dsv4_nvfp4_decode
from .attention import sparse_mla_attention

sparse_mla_prefill = cake_sparse_mla_sm120_dsv4_nvfp4_prefill
sparse_mla_decode = cake_sparse_mla_sm120_dsv4_nvfp4_decode

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
    "cake_sparse_mla_sm120_dsv4_nvfp4_decode",
    "sparse_mla_decode",
    "sparse_mla_attention",
    "cake_sparse_mla_sm120_dsv4_nvfp4_decode_head_tiles",
    "cake_sparse_mla_sm120_dsv4_nvfp4_num_chunks",
    "cake_sparse_mla_sm120_dsv4_nvfp4_plan_splits",
    "cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode",
    "cake_sparse_mla_sm120_dsv4_nvfp4_scratch_bytes",
    "cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch",
    "cake_sparse_mla_sm120_dsv4_nvfp4_select_kernel",
]
