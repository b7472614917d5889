"""The public decode entry point: argument normalisation, planning, one op call."""
import operator
from typing import Dict, Optional

import torch

from .decode_planner import (DEFAULT_MAX_SPLITS, cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode, chunk_width,
                             decode_plan_for_call)
from .no_backward import REQUIRED_ATTENTION_TENSORS, check_apart_when_compiled, check_tensor_args, float_args, int_args
from .prefill import _contiguous


def _width(indices: Optional[torch.Tensor]) -> Optional[int]:
    """A candidate list's width rounded up to whole chunks of 64, or None when the tensor has no
    plausible shape (the op says why). The plans depend on a width only through its chunks: under
    torch.compile the rounded width is what a graph is specialised to (a constant there, which the
    planners need), so lists whose width changes within a chunk, as a serving loop's do a token a
    step, share a graph."""
    if indices is None:
        return 0
    if not isinstance(indices, torch.Tensor) or indices.dim() not in (2, 3):
        return None
    return operator.index(chunk_width(indices.shape[-1]))


def cake_sparse_mla_sm120_dsv4_nvfp4_decode(
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
    mid_out: Optional[torch.Tensor] = None,
    mid_lse: Optional[torch.Tensor] = None,
    lse_scale: float = 1.0,
    num_splits: Optional[int] = None,
    max_splits: int = DEFAULT_MAX_SPLITS,
    head_tiles: Optional[int] = None,
) -> Dict[str, int]:
    """Sparse-MLA decode attention over an NVFP4 paged cache, split-K over the candidates.

    Computes what ``cake_sparse_mla_sm120_dsv4_nvfp4_prefill`` computes (the same candidates,
    masks, sink, LSE and non-finite rules), for shapes with few tokens and many candidates: each
    (token, head block) is spread over ``num_splits`` splits of at most 32 chunks of 64
    candidates; each split writes its partial output and LSE into ``mid_out`` / ``mid_lse``, and a
    merge folds them, with the sink, into ``output`` / ``out_lse``. One split writes ``output``
    directly and needs no scratch.

    Args:
        q: ``[T, H, 512]`` contiguous bf16 queries; H in {8, 16, ..., 128}.
        kv_cache: uint8 NVFP4 cache, 384 bytes per token: ``[pages, page_size, 384]``, HND
            ``[pages, 1, page_size, 384]`` or NHD ``[pages, page_size, 1, 384]``.
        indices: ``[T, topk]`` or ``[T, 1, topk]`` int32 slots (``page * page_size + row``);
            negative or out-of-range slots are masked and never read.
        output: ``[T, H, 512]`` contiguous bf16, written in place.
        out_lse: ``[T, H]`` contiguous float32, written in place with the base-2 log-sum-exp
            times ``lse_scale`` (``-inf`` for a token with no valid candidate and no sink).
        sm_scale: scale of the QK logits (natural-log units).
        topk_length: 1-D int32, at least T entries: valid leading slots per token (clamped to
            ``[0, topk]``).
        attn_sink: 1-D float32, at least H entries: per-head sink logit.
        extra_kv_cache: a second cache with its own page geometry; needs ``extra_indices``.
        extra_indices: ``[T, extra_topk]`` int32 slots into ``extra_kv_cache``.
        extra_topk_length: 1-D int32 lengths for ``extra_indices``.
        mid_out: float32 ``[S, T, H, 512]`` contiguous scratch, ``S >= num_splits``; split ``s``
            writes its normalised partial output of token ``t``, head ``h`` to ``mid_out[s, t, h]``.
            Required (with ``mid_lse``) when the plan has more than one split;
            ``cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch`` makes one that covers
            every plan.
        mid_lse: float32 ``[S, T, H]`` contiguous scratch: the split's base-2 LSE (not scaled by
            ``lse_scale``, without the sink; ``-inf`` for a split without a valid candidate).
        lse_scale: multiplier for ``out_lse``.
        num_splits: splits per (token, head block); None asks
            ``cake_sparse_mla_sm120_dsv4_nvfp4_plan_splits`` for this device (its SM count, and two
            chunks a split at least where its splits run the Hopper kernels; on the small-heads
            Hopper kernel its units and, at H = 80 and 96, one split's two grids:
            ``cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode`` gives the op's plan).
        max_splits: the most splits the planner may use (>= 1); the lists may hold at most
            ``16 * max_splits`` chunks of 64 (16384 candidates at the default).
        head_tiles: sixteen-head tiles per head block, one of
            ``cake_sparse_mla_sm120_dsv4_nvfp4_decode_head_tiles(H)`` that the device runs; None:
            the largest of them, except on Hopper for H = 64 and 128 where T x the 64-head blocks
            are less than the SM count and the plan of 16-head units splits with two chunks a
            split or more and costs less in the planner's model: 1 there (four times the work
            items a split).

    Invalid arguments raise ``ValueError`` naming the argument before anything is written;
    ``T == 0`` runs nothing. No allocation: the call captures in CUDA graphs. Results are bitwise
    repeatable for a fixed plan; different plans round differently, each within the precision
    contract. There is no backward (an input that requires grad while grad mode is on raises
    ``NotImplementedError``). On CUDA (sm_80 and up) a split kernel writes the partials and a
    merge kernel folds them; one split writes the outputs itself, with no merge (one launch; two
    at H = 80 and 96 on Hopper, whose heads the two Hopper kernels share).

    Returns:
        The plan the op ran: ``{"head_tiles": ht, "num_splits": n, "chunks_per_block": c}`` (the
        same dict as ``cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode`` gives for this call).
    """
    check_tensor_args("cake_sparse_mla_sm120_dsv4_nvfp4_decode", required=REQUIRED_ATTENTION_TENSORS, q=q,
                      kv_cache=kv_cache, indices=indices, output=output, out_lse=out_lse, topk_length=topk_length,
                      attn_sink=attn_sink, extra_kv_cache=extra_kv_cache, extra_indices=extra_indices,
                      extra_topk_length=extra_topk_length, mid_out=mid_out, mid_lse=mid_lse)
    float_args("cake_sparse_mla_sm120_dsv4_nvfp4_decode", sm_scale=sm_scale, lse_scale=lse_scale)
    num_splits, max_splits, head_tiles = int_args("cake_sparse_mla_sm120_dsv4_nvfp4_decode",
                                                  required=("max_splits",), num_splits=num_splits,
                                                  max_splits=max_splits, head_tiles=head_tiles)
    plan = None
    topk, extra_topk = _width(indices), _width(extra_indices)
    if q.dim() == 3 and topk is not None and extra_topk is not None:
        # Planned once, here, and passed on explicitly; arguments the planner rejects go to the op
        # as given, which rejects them naming its tensors.
        num_heads = operator.index(q.shape[1])  # a constant under torch.compile: the choices depend on it
        plan = decode_plan_for_call(q.device, q.shape[0], num_heads, topk, extra_topk, max_splits, head_tiles,
                                    num_splits)
        # Eager, the plan goes to the op explicitly. Traced, the op plans it itself (the same planner,
        # the same plan): the plan may be symbolic in T, and passed it would specialise the graph.
        if plan is not None and not torch.compiler.is_compiling():
            head_tiles, num_splits = plan["head_tiles"], plan["num_splits"]
    indices, topk_length, attn_sink, extra_indices, extra_topk_length = map(
        _contiguous, (indices, topk_length, attn_sink, extra_indices, extra_topk_length))
    check_apart_when_compiled("decode", q, kv_cache, indices, output, out_lse, topk_length, attn_sink,
                              extra_kv_cache, extra_indices, extra_topk_length, mid_out, mid_lse)
    torch.ops.cake.sparse_mla_decode(
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
        mid_out=mid_out,
        mid_lse=mid_lse,
        lse_scale=lse_scale,
        num_splits=num_splits,
        max_splits=max_splits,
        head_tiles=head_tiles,
    )
    if plan is None:
        if torch.compiler.is_compiling():
            # Traced, the op above is a fake that does not plan, and the planner below (a C++
            # binding) cannot be traced. The planner rejected these ints, so the op rejects them
            # too: the compiled graph raises its ValueError naming the argument, as eager does,
            # and never returns this.
            return {"head_tiles": head_tiles, "num_splits": num_splits, "chunks_per_block": None}
        # The op checks what the planner checks, so it has raised already; if not, the planner
        # says what it rejects (ValueError naming the argument).
        plan = cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode(
            num_tokens=q.shape[0], num_heads=q.shape[1], topk=indices.shape[-1],
            extra_topk=0 if extra_indices is None else extra_indices.shape[-1], device=q.device,
            max_splits=max_splits, head_tiles=head_tiles, num_splits=num_splits)
    return plan
