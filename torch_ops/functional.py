"""The functional prefill: returns new ``(output, out_lse)`` tensors instead of writing buffers
the caller passes. Same validation, plan and kernel as the mutating
``cake_sparse_mla_sm120_dsv4_nvfp4_prefill``; use it where no input may be mutated, e.g. under
``torch.compile(mode="reduce-overhead")``, whose CUDA graphs skip a graph that writes into its
inputs."""
from typing import Optional, Tuple

import torch

from .no_backward import check_tensor_args, float_args, int_args
from .planner import q_device_error
from .prefill import _contiguous


def sparse_mla_prefill_functional(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    sm_scale: float,
    *,
    topk_length: Optional[torch.Tensor] = None,
    attn_sink: Optional[torch.Tensor] = None,
    extra_kv_cache: Optional[torch.Tensor] = None,
    extra_indices: Optional[torch.Tensor] = None,
    extra_topk_length: Optional[torch.Tensor] = None,
    lse_scale: float = 1.0,
    head_tiles: Optional[int] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Sparse-MLA prefill attention over an NVFP4 paged cache, returning new tensors.

    Runs ``torch.ops.cake.sparse_mla_prefill_functional``: it allocates ``output`` and
    ``out_lse`` and computes exactly what ``cake_sparse_mla_sm120_dsv4_nvfp4_prefill`` writes
    into caller buffers (same kernel, bitwise equal results).

    Args:
        q: ``[T, H, 512]`` contiguous bf16 queries (448 NoPE dims, then 64 RoPE dims);
            H in {16, 32, ..., 128}.
        kv_cache: uint8 NVFP4 cache, 384 bytes per token: ``[pages, page_size, 384]``, HND
            ``[pages, 1, page_size, 384]`` or NHD ``[pages, page_size, 1, 384]``.
        indices: ``[T, topk]`` or ``[T, 1, topk]`` int32 slots (``page * page_size + row``);
            negative or out-of-range slots are masked.
        sm_scale: scale of the QK logits (natural-log units). Not finite: every row with a
            candidate is NaN.
        topk_length: 1-D int32, at least T entries: valid leading slots per token (clamped to
            ``[0, topk]``); every slot counts when omitted.
        attn_sink: 1-D float32, at least H entries: per-head sink logit.
        extra_kv_cache: a second cache in the same format, with its own page geometry; needs
            ``extra_indices``.
        extra_indices: ``[T, extra_topk]`` int32 slots into ``extra_kv_cache``.
        extra_topk_length: 1-D int32 lengths for ``extra_indices``.
        lse_scale: multiplier for ``out_lse``.
        head_tiles: sixteen-head tiles per work item; ``None`` lets the op plan (the same rule as
            ``cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill``).

    Returns:
        ``(output, out_lse)``: ``[T, H, 512]`` bf16 and ``[T, H]`` float32 (base-2 log-sum-exp
        times ``lse_scale``; ``-inf`` for a token with no valid candidate and no sink).

    Invalid arguments raise ``ValueError`` naming the argument. There is no backward: an input
    that requires grad while grad mode is on raises ``NotImplementedError``.
    """
    check_tensor_args("sparse_mla_prefill_functional", required=("q", "kv_cache", "indices"), q=q, kv_cache=kv_cache,
                      indices=indices, topk_length=topk_length, attn_sink=attn_sink, extra_kv_cache=extra_kv_cache,
                      extra_indices=extra_indices, extra_topk_length=extra_topk_length)
    (head_tiles,) = int_args("sparse_mla_prefill_functional", head_tiles=head_tiles)
    float_args("sparse_mla_prefill_functional", sm_scale=sm_scale, lse_scale=lse_scale)
    if q.device.type not in ("cpu", "cuda"):  # (it plans nothing, where the other entries find this)
        raise q_device_error(q.device)
    return torch.ops.cake.sparse_mla_prefill_functional(
        q,
        kv_cache,
        _contiguous(indices),
        sm_scale,
        topk_length=_contiguous(topk_length),
        attn_sink=_contiguous(attn_sink),
        extra_kv_cache=extra_kv_cache,
        extra_indices=_contiguous(extra_indices),
        extra_topk_length=_contiguous(extra_topk_length),
        lse_scale=lse_scale,
        head_tiles=head_tiles,
    )
