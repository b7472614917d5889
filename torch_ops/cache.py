"""NVFP4 cache writers (ops) and a plain-PyTorch dequantizer.

Byte format (docs/contract.md sections 3 and 4; csrc/format/nvfp4_format.h, whose constants are
read here through ``_C``): inside a page of ``page_size`` tokens, all 352-byte data rows come first
(224 bytes of E2M1 NoPE codes, 128 bytes of raw bf16 RoPE), then all 32-byte scale rows (28 E4M3
block scales, 4 zero bytes).

Non-finite inputs to the writers: a 16-value NoPE group holding a NaN is written with the E4M3
NaN scale byte (0x7F), so the whole group reads back as NaN; an infinite NoPE value saturates to
+-2688 (6 times the largest scale, 448). RoPE values are stored bit for bit, NaN and inf included.
"""
from typing import Tuple

import torch

from . import _C
from .no_backward import check_apart_when_compiled, check_tensor_args

TOKEN_BYTES = _C.TOKEN_BYTES
DATA_ROW_BYTES = _C.DATA_ROW_BYTES
SCALE_ROW_BYTES = _C.SCALE_ROW_BYTES
NOPE_DIM = _C.NOPE_DIM
ROPE_DIM = _C.ROPE_DIM
HEAD_DIM = _C.HEAD_DIM
GROUP_SIZE = _C.GROUP_SIZE

# E2M1 code -> value; bit 3 is the sign.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def nvfp4_quantize_pack_sparse_mla_cache(latent_kv: torch.Tensor, *, kv_layout: str = "HND") -> torch.Tensor:
    """Quantize whole pages of bf16 latent rows into a new NVFP4 cache.

    Args:
        latent_kv: bf16 ``[pages, page_size, 512]``, or with a singleton head axis
            (``[pages, 1, page_size, 512]`` or ``[pages, page_size, 1, 512]``).
        kv_layout: ``"HND"`` returns ``[pages, 1, page_size, 384]``, ``"NHD"``
            ``[pages, page_size, 1, 384]``.

    Returns:
        A new contiguous uint8 cache on ``latent_kv``'s device.
    """
    check_tensor_args("nvfp4_quantize_pack_sparse_mla_cache", required=("latent_kv",), latent_kv=latent_kv)
    if kv_layout not in ("HND", "NHD"):
        raise ValueError(f"kv_layout: expected 'HND' or 'NHD', got {kv_layout!r}")
    given_shape = tuple(latent_kv.shape)
    if latent_kv.dim() == 4:
        if latent_kv.shape[1] == 1:
            latent_kv = latent_kv[:, 0]
        elif latent_kv.shape[2] == 1:
            latent_kv = latent_kv[:, :, 0]
        else:
            raise ValueError(f"latent_kv: expected a singleton head axis in a 4-D tensor, got shape {tuple(latent_kv.shape)}")
    if latent_kv.dim() != 3 or latent_kv.shape[-1] != HEAD_DIM:
        raise ValueError(f"latent_kv: expected shape [pages, page_size, 512], got {tuple(latent_kv.shape)}")
    pages, page_size = latent_kv.shape[0], latent_kv.shape[1]
    if page_size < 1:  # (the cache made from it would be rejected, naming a cache the caller never passed)
        raise ValueError(f"latent_kv: expected page_size >= 1, got shape {given_shape}")
    shape = (pages, 1, page_size, TOKEN_BYTES) if kv_layout == "HND" else (pages, page_size, 1, TOKEN_BYTES)
    cache = torch.empty(shape, dtype=torch.uint8, device=latent_kv.device)
    torch.ops.cake.nvfp4_pack_cache(latent_kv, cache)
    return cache


def nvfp4_quantize_append_sparse_mla_cache(
    latent_kv: torch.Tensor, slot_mapping: torch.Tensor, cache: torch.Tensor
) -> None:
    """Quantize bf16 rows ``latent_kv [N, 512]`` into ``cache`` at ``slot_mapping [N]``.

    ``slot_mapping`` is int32 or int64. Negative or out-of-range slots are skipped; when a slot
    occurs more than once the lowest input row wins. Only the addressed data and scale rows are
    written.
    """
    check_tensor_args("nvfp4_quantize_append_sparse_mla_cache", required=("latent_kv", "slot_mapping", "cache"),
                      latent_kv=latent_kv, slot_mapping=slot_mapping, cache=cache)
    check_apart_when_compiled("append", latent_kv, cache)
    torch.ops.cake.nvfp4_append_cache(latent_kv, slot_mapping, cache)


def cache_geometry(cache: torch.Tensor) -> Tuple[int, int, int]:
    """(num_pages, page_size, page_stride_bytes) of a 3-D, HND or NHD cache view.

    Raises ValueError naming ``cache`` for a view whose bytes are not laid out as the format says
    (the strides the operators reject: docs/contract.md section 4), which would be read wrongly."""
    if cache.dtype != torch.uint8 or cache.dim() not in (3, 4) or cache.shape[-1] != TOKEN_BYTES:
        raise ValueError(f"cache: expected a uint8 [P, page_size, 384] / HND / NHD view, got {cache.dtype} {tuple(cache.shape)}")
    if cache.dim() == 4:
        token_dim = 2 if cache.shape[1] == 1 else 1
        if cache.shape[3 - token_dim] != 1:
            raise ValueError(f"cache: a 4-D cache needs a singleton head axis, got shape {tuple(cache.shape)}")
    else:
        token_dim = 1
    num_pages, page_size = cache.shape[0], cache.shape[token_dim]
    if page_size < 1:
        raise ValueError(f"cache: expected page_size >= 1, got {page_size}")
    if cache.stride(-1) != 1:
        raise ValueError(f"cache: expected stride 1 in the last dim, got {cache.stride(-1)}")
    if page_size > 1 and cache.stride(token_dim) != TOKEN_BYTES:
        raise ValueError(f"cache: expected token stride 384 inside a page, got {cache.stride(token_dim)}")
    page_stride = cache.stride(0) if num_pages > 1 else page_size * TOKEN_BYTES
    if page_stride % 16:
        raise ValueError(f"cache: expected a page stride that is a multiple of 16 bytes, got {page_stride}")
    if page_stride < page_size * TOKEN_BYTES:
        raise ValueError(f"cache: expected a page stride >= page_size * 384 = {page_size * TOKEN_BYTES}, got {page_stride}")
    return num_pages, page_size, page_stride


def nvfp4_dequantize_sparse_mla_cache(cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """Dequantize cache rows exactly: float32 ``[N, 512]`` for ``slots [N]`` (all must be valid).

    Args:
        cache: a uint8 cache view (``[pages, page_size, 384]``, HND or NHD).
        slots: int tensor of slots ``page * page_size + row``, each in ``[0, pages * page_size)``.

    A group whose scale byte is the E4M3 NaN (0x7F or 0xFF) reads back as 16 NaNs.
    """
    check_tensor_args("nvfp4_dequantize_sparse_mla_cache", required=("cache", "slots"), cache=cache, slots=slots)
    for name, tensor in (("cache", cache), ("slots", slots)):
        if tensor.device.type == "meta":
            raise ValueError(f"{name}: expected a tensor with data (its values are read), got one on the meta device")
    if slots.dtype.is_floating_point or slots.dtype.is_complex or slots.dtype == torch.bool:
        raise ValueError(f"slots: expected an integer dtype, got {slots.dtype}")
    num_pages, page_size, page_stride = cache_geometry(cache)
    slots = slots.to(device=cache.device, dtype=torch.int64).reshape(-1)
    if slots.numel() and (int(slots.min()) < 0 or int(slots.max()) >= num_pages * page_size):
        raise ValueError(f"slots: expected values in [0, {num_pages * page_size}), got min {int(slots.min())} max {int(slots.max())}")
    if num_pages == 0:
        return torch.empty(0, HEAD_DIM, dtype=torch.float32, device=cache.device)
    # One flat byte view over the pages (respecting the view's storage offset and page stride).
    flat = cache.as_strided(((num_pages - 1) * page_stride + page_size * TOKEN_BYTES,), (1,))
    page, row = slots // page_size, slots % page_size
    data_start = page * page_stride + row * DATA_ROW_BYTES
    scale_start = page * page_stride + page_size * DATA_ROW_BYTES + row * SCALE_ROW_BYTES
    data = flat[data_start[:, None] + torch.arange(DATA_ROW_BYTES, device=cache.device)]
    scale = flat[scale_start[:, None] + torch.arange(NOPE_DIM // GROUP_SIZE, device=cache.device)]

    codes = torch.stack([data[:, : NOPE_DIM // 2] & 0xF, data[:, : NOPE_DIM // 2] >> 4], dim=-1).reshape(-1, NOPE_DIM)
    lut = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=cache.device)
    block_scale = scale.contiguous().view(torch.float8_e4m3fn).to(torch.float32)
    nope = lut[codes.long()] * block_scale.repeat_interleave(GROUP_SIZE, dim=1)
    rope = data[:, NOPE_DIM // 2 :].contiguous().view(torch.bfloat16).to(torch.float32)
    return torch.cat([nope, rope], dim=1)
