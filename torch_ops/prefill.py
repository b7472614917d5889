"""The public prefill entry point: argument normalisation, planning, one op call."""
import operator
from typing import Dict, Optional, Union

import torch

from .no_backward import REQUIRED_ATTENTION_TENSORS, check_apart_when_compiled, check_tensor_args, float_args, int_args
from .planner import _prefill_head_tiles, plan_for_call, planner_accepts


def _contiguous(tensor: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return tensor.contiguous() if tensor is not None else None


def cake_sparse_mla_sm120_dsv4_nvfp4_prefill(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    output: torch.Tensor,
    out_lse: torch.Tensor,
    sm_scale: float,
    *,
    topk_length: Optional[torch.Tensor] = None,
    attn_sink: Optional[torch.Tensor] = None,
    extra_kv_cache: Optional[torch.Tensor] = None,
    extra_indices: Optional[torch.Tensor] = None,
    extra_topk_length: Optional[torch.Tensor] = None,
    lse_scale: float = 1.0,
    head_tiles: Optional[int] = None,
) -> Dict[str, Union[int, str]]:
    """Sparse-MLA prefill attention over an NVFP4 paged cache, with no scratch.

    One kernel launch (two at H = 80 and 96 on Hopper: heads 0..63, then the rest). Every head of
    token ``t`` attends to the token's candidate rows: the valid slots of
    ``indices[t]`` in ``kv_cache`` and, when given, of ``extra_indices[t]`` in
    ``extra_kv_cache``, under one softmax. K and V are the same dequantized 512-dim row.

    Args:
        q: ``[T, H, 512]`` contiguous bf16 queries (448 NoPE dims, then 64 RoPE dims);
            H in {16, 32, ..., 128}.
        kv_cache: uint8 NVFP4 cache, 384 bytes per token: ``[pages, page_size, 384]``, HND
            ``[pages, 1, page_size, 384]`` or NHD ``[pages, page_size, 1, 384]``. Page size and
            page stride (a multiple of 16, possibly padded) are read from the view.
        indices: ``[T, topk]`` or ``[T, 1, topk]`` int32 slots (``page * page_size + row``).
            Negative or out-of-range slots are masked and never read.
        output: ``[T, H, 512]`` contiguous bf16, written in place.
        out_lse: ``[T, H]`` contiguous float32, written in place with the base-2 log-sum-exp
            times ``lse_scale`` (``-inf`` for a token with no valid candidate and no sink).
        sm_scale: scale of the QK logits (natural-log units).
        topk_length: 1-D int32, at least T entries: valid leading slots per token (clamped to
            ``[0, topk]``); every slot counts when omitted.
        attn_sink: 1-D float32, at least H entries: per-head sink logit joining the softmax
            normalisation as a candidate of value zero.
        extra_kv_cache: a second cache in the same format, with its own page geometry; needs
            ``extra_indices``.
        extra_indices: ``[T, extra_topk]`` int32 slots into ``extra_kv_cache``.
        extra_topk_length: 1-D int32 lengths for ``extra_indices``.
        lse_scale: multiplier for ``out_lse``.
        head_tiles: sixteen-head tiles per work item, one of
            ``cake_sparse_mla_sm120_dsv4_nvfp4_prefill_head_tiles(H)``; ``None`` asks
            ``cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill``.

    ``ceil(topk/64) + ceil(extra_topk/64)`` must be at most 16. Invalid arguments raise
    ``ValueError`` before anything is launched; ``T == 0`` launches nothing. There is no
    backward: an input that requires grad while grad mode is on raises ``NotImplementedError``
    (call under ``torch.no_grad()`` or pass detached tensors). A NaN among a row's scores (NaN in
    ``q``, in a selected cache row, or a non-finite ``sm_scale``) makes that row's output and
    lse NaN; a row without candidates stays zeros and ``-inf`` (or the sink's lse).

    Returns:
        The plan the op ran, from the C++ planner for ``q``'s device (the same dict as
        ``cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill_details`` gives for this call):
        ``{"head_tiles": ht, "num_ctas": n, "grid_size": g, "kernel": k}``. ``n`` work items, one
        per token and block of ``16 * ht`` heads; ``g`` CTAs launched: ``n`` for the portable
        kernel, ``min(n, SMs)`` for the Hopper kernel's persistent grid; ``k`` is "hopper",
        "hopper_small" (the small-heads Hopper kernel, every other call on Hopper; its persistent
        grid walks its own units: see ``cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill_details``),
        "portable" or "cpu".
    """
    check_tensor_args("cake_sparse_mla_sm120_dsv4_nvfp4_prefill", required=REQUIRED_ATTENTION_TENSORS, q=q,
                      kv_cache=kv_cache, indices=indices, output=output, out_lse=out_lse, topk_length=topk_length,
                      attn_sink=attn_sink, extra_kv_cache=extra_kv_cache, extra_indices=extra_indices,
                      extra_topk_length=extra_topk_length)
    (head_tiles,) = int_args("cake_sparse_mla_sm120_dsv4_nvfp4_prefill", head_tiles=head_tiles)
    float_args("cake_sparse_mla_sm120_dsv4_nvfp4_prefill", sm_scale=sm_scale, lse_scale=lse_scale)
    plan = None
    if head_tiles is None and q.dim() == 3:
        # Planned once, here, and passed on explicitly; a head count without a prefill instance
        # goes to the op as is, which rejects it (naming q).
        num_heads = operator.index(q.shape[1])  # a constant under torch.compile: the choices depend on it
        if _prefill_head_tiles(num_heads):
            plan = plan_for_call(q.device, q.shape[0], num_heads, None)
            head_tiles = plan["head_tiles"]
    indices, topk_length, attn_sink, extra_indices, extra_topk_length = map(
        _contiguous, (indices, topk_length, attn_sink, extra_indices, extra_topk_length))
    check_apart_when_compiled("prefill", q, kv_cache, indices, output, out_lse, topk_length, attn_sink,
                              extra_kv_cache, extra_indices, extra_topk_length, None, None)
    torch.ops.cake.sparse_mla_prefill(
        q,
        kv_cache,
        indices,
        output,
        out_lse,
        sm_scale,
        topk_length=topk_length,
        attn_sink=attn_sink,
        extra_kv_cache=extra_kv_cache,
        extra_indices=extra_indices,
        extra_topk_length=extra_topk_length,
        lse_scale=lse_scale,
        head_tiles=head_tiles,
    )
    if plan is None:
        num_heads = operator.index(q.shape[1])
        if torch.compiler.is_compiling() and (head_tiles not in _prefill_head_tiles(num_heads)
                                              or not planner_accepts(q.device, num_heads, head_tiles)):
            # Traced, the op above is a fake that does not check the head count or head_tiles (nor
            # whether the device's shared memory holds that tile); the op rejects them when the
            # graph runs (ValueError naming the argument, as eager), so this is never returned.
            # Planning here would raise inside the trace instead, where torch reports it as its own
            # internal error.
            return {"head_tiles": head_tiles, "num_ctas": None, "grid_size": None, "kernel": None}
        # An explicit head_tiles, already checked by the op: the kernel and grid it ran.
        plan = plan_for_call(q.device, q.shape[0], num_heads, head_tiles)
    return plan
