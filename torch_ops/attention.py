"""One entry for both ops: the decode for shapes the prefill cannot fill the GPU with (or cannot
run at all), the prefill otherwise, chosen by the C++ rule (``..._select_kernel``) from shapes
and ints only, so that it traces under ``torch.compile(fullgraph=True)``."""
import operator
from typing import Dict, Optional, Union

import torch

from .decode import _width, cake_sparse_mla_sm120_dsv4_nvfp4_decode
from .decode_planner import decode_token_limit
from .no_backward import REQUIRED_ATTENTION_TENSORS, check_tensor_args, float_args
from .planner import planned_for_q
from .prefill import cake_sparse_mla_sm120_dsv4_nvfp4_prefill


def _choose_op(q: torch.Tensor, indices: torch.Tensor, extra_indices: Optional[torch.Tensor]) -> str:
    """'decode' or 'prefill' for this call (the shapes and the device only)."""
    topk, extra_topk = _width(indices), _width(extra_indices)
    if q.dim() != 3 or topk is None or extra_topk is None:
        # Malformed: the decode names the argument (its checks are the prefill's, with the wider
        # head counts, so a head count only the decode takes is not what gets blamed).
        return "decode"
    num_heads = operator.index(q.shape[1])
    limit = planned_for_q(q.device, decode_token_limit, q.device.type, q.device.index, num_heads, topk, extra_topk)
    if limit is None:
        return "decode"  # neither op serves the shape; the decode's checks are the wider ones
    return "decode" if limit < 0 or q.shape[0] < limit else "prefill"


def sparse_mla_attention(
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
) -> Dict[str, Union[str, Dict[str, Union[int, str]]]]:
    """Sparse-MLA attention over an NVFP4 paged cache by whichever op serves the shape.

    The arguments mean what they mean for ``cake_sparse_mla_sm120_dsv4_nvfp4_decode`` (``q``,
    ``kv_cache``, ``indices``, ``output``, ``out_lse``, ``sm_scale``, ``topk_length``,
    ``attn_sink``, ``extra_kv_cache``, ``extra_indices``, ``extra_topk_length``, ``mid_out``,
    ``mid_lse``, ``lse_scale``); both ops compute the same attention and write the same outputs.
    The choice is ``cake_sparse_mla_sm120_dsv4_nvfp4_select_kernel`` for the device's SM count
    (intra-op threads on the CPU): the decode when the prefill cannot run the shape (H = 8, 24,
    ..., more than 16 chunks of 64 candidates, each list rounded up to whole chunks on its own) or when its largest launch, ``T * H / 16`` work items, is
    below a share of the SM count (200% for H a multiple of 64, 300% for H = 80 and 96, 50% for
    the others); the prefill otherwise, which ignores the scratch. The decode needs ``mid_out`` / ``mid_lse`` when its plan
    splits: allocate it with ``cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch(T, H, topk,
    extra_topk)``, which covers every plan, or with its ``max_splits`` at 16 or more (the decode here
    plans with the default ``max_splits`` of 16, so scratch for a smaller one may be too small).

    Returns:
        ``{"op": "decode" | "prefill", "plan": the plan the chosen op returned}``.
    """
    check_tensor_args("sparse_mla_attention", required=REQUIRED_ATTENTION_TENSORS, q=q, kv_cache=kv_cache,
                      indices=indices, output=output, out_lse=out_lse, topk_length=topk_length, attn_sink=attn_sink,
                      extra_kv_cache=extra_kv_cache, extra_indices=extra_indices,
                      extra_topk_length=extra_topk_length, mid_out=mid_out, mid_lse=mid_lse)
    float_args("sparse_mla_attention", sm_scale=sm_scale, lse_scale=lse_scale)
    shared = dict(topk_length=topk_length, attn_sink=attn_sink, extra_kv_cache=extra_kv_cache,
                  extra_indices=extra_indices, extra_topk_length=extra_topk_length, lse_scale=lse_scale)
    op = _choose_op(q, indices, extra_indices)
    if op == "decode":
        plan = cake_sparse_mla_sm120_dsv4_nvfp4_decode(q, kv_cache, indices, output, out_lse, sm_scale, mid_out=mid_out,
                                                       mid_lse=mid_lse, **shared)
    else:
        plan = cake_sparse_mla_sm120_dsv4_nvfp4_prefill(q, kv_cache, indices, output, out_lse, sm_scale, **shared)
    return {"op": op, "plan": plan}
