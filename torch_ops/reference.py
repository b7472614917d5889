"""The readable definition of the math, in float64 plain PyTorch: the test oracle.

Deliberately simple (a Python loop over tokens) and independent of the kernels: it dequantizes
through ``nvfp4_dequantize_sparse_mla_cache`` (table lookups and torch's own float8 decoding)
and follows docs/contract.md sections 6 (candidates) and 7 (math) line by line.

Non-finite values. For one (token, head) row with logits ``z`` over its valid candidates:

- ``z`` holds a NaN or a ``+inf`` (a NaN in ``q[t, h]``, a NaN cache value among the candidates,
  an infinite ``q`` or RoPE value, or a non-finite ``sm_scale``, which makes every logit NaN):
  output NaN and lse NaN, whatever the sink;
- no valid candidate, or every ``z`` is ``-inf``: nothing carries weight, so zeros and ``-inf``,
  or the sink's own lse (with no candidate the row has no score, so ``sm_scale`` does not
  matter);
- in any row, a zero weight times an infinite value (a RoPE value is stored as is) is NaN in that
  dim: the output is NaN there, whatever the other candidates' weights or the sink;
- a NaN sink makes the lse NaN, and the output NaN for a row with candidates.
"""
import math
from typing import Optional, Tuple

import torch

from .cache import E2M1_VALUES, GROUP_SIZE, HEAD_DIM, NOPE_DIM, cache_geometry, nvfp4_dequantize_sparse_mla_cache


def _valid_slots(indices: torch.Tensor, lengths: Optional[torch.Tensor], t: int, num_slots: int) -> torch.Tensor:
    row = indices.reshape(indices.shape[0], -1)[t].to(torch.int64)
    width = row.numel()
    length = width if lengths is None else min(max(int(lengths[t]), 0), width)
    row = row[:length]
    return row[(row >= 0) & (row < num_slots)]


def _weighted_values(weights: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """weights [H, C] @ keys [C, 512], with 0 times an infinite value NaN in its dim as IEEE
    arithmetic has it, whether or not the BLAS skips zero terms."""
    out = weights @ keys
    infinite = torch.isinf(keys)
    if infinite.any():
        zero_times_inf = ((weights == 0).to(keys.dtype) @ infinite.to(keys.dtype)) > 0
        out = torch.where(zero_times_inf, math.nan, out)
    return out


def sparse_mla_prefill_reference(
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
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The prefill in float64: returns (output float64 [T, H, 512], out_lse float64 [T, H]) on the CPU.

    The arguments mean what they mean for ``cake_sparse_mla_sm120_dsv4_nvfp4_prefill``: ``q``
    ``[T, H, 512]``, ``kv_cache`` and ``indices`` (the main list), ``sm_scale``, and optionally
    ``topk_length``, ``attn_sink``, ``extra_kv_cache``, ``extra_indices``, ``extra_topk_length``
    and ``lse_scale``; ``out_lse`` is base 2, times ``lse_scale``.
    """
    q = q.detach().cpu().to(torch.float64)
    num_tokens, num_heads = q.shape[0], q.shape[1]
    lists = [(kv_cache, indices, topk_length)]
    if extra_kv_cache is not None:
        lists.append((extra_kv_cache, extra_indices, extra_topk_length))
    prepared = []
    for cache, idx, lengths in lists:
        pages, page_size, _ = cache_geometry(cache)
        num_slots = pages * page_size
        rows = nvfp4_dequantize_sparse_mla_cache(cache, torch.arange(num_slots)).cpu().to(torch.float64)
        prepared.append((rows, idx.cpu(), None if lengths is None else lengths.cpu(), num_slots))
    sink = None if attn_sink is None else attn_sink.detach().cpu().to(torch.float64)

    output = torch.zeros(num_tokens, num_heads, HEAD_DIM, dtype=torch.float64)
    lse = torch.full((num_tokens, num_heads), -math.inf, dtype=torch.float64)
    scale = sm_scale if math.isfinite(sm_scale) else math.nan
    for t in range(num_tokens):
        keys = torch.cat([rows[_valid_slots(idx, lengths, t, num_slots)] for rows, idx, lengths, num_slots in prepared])
        # [H, C] natural-log units. NaN * 0 is NaN, so a NaN key poisons every head's logit for it.
        logits = scale * (q[t] @ keys.T)
        poisoned = (torch.isnan(logits) | torch.isposinf(logits)).any(dim=1)  # -> NaN output and lse
        weighted = (logits > -math.inf).any(dim=1) | poisoned  # rows with some weight (or NaN)
        safe = torch.where(weighted[:, None], logits, torch.zeros_like(logits))  # no 0/0 for all -inf rows
        row_lse = torch.where(weighted, torch.logsumexp(safe, dim=1), -math.inf)
        # A row whose logits are all -inf weighs every candidate 0; 0 times an infinite value (a
        # RoPE value is stored as is) is NaN, as in any row (docs/contract.md section 8).
        out = _weighted_values(torch.where(weighted[:, None], torch.softmax(safe, dim=1), 0.0), keys)
        if sink is not None:
            head_sink = sink[:num_heads]
            out = out * torch.where(weighted, torch.sigmoid(row_lse - head_sink), 1.0)[:, None]  # NaN sink: NaN
            row_lse = torch.where(weighted, torch.logaddexp(row_lse, head_sink), head_sink)
        row_lse = torch.where(poisoned, math.nan, row_lse)
        out = torch.where(poisoned[:, None], math.nan, out)
        output[t] = out
        lse[t] = row_lse
    return output, lse * (1.0 / math.log(2.0)) * lse_scale


def sparse_mla_decode_partials_reference(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    sm_scale: float,
    *,
    num_splits: int,
    topk_length: Optional[torch.Tensor] = None,
    extra_kv_cache: Optional[torch.Tensor] = None,
    extra_indices: Optional[torch.Tensor] = None,
    extra_topk_length: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """What each split of the decode writes to its scratch, in float64 (docs/contract.md
    section 12): (mid_out [num_splits, T, H, 512], mid_lse [num_splits, T, H]) on the CPU.

    A token's chunks of 64 positions are the main list's ``ceil(topk / 64)`` then the extra
    list's; split ``s`` holds chunks ``[s * C // num_splits, (s + 1) * C // num_splits)``. Over its
    valid candidates (section 6) it has the softmax-normalised output and the base-2 LSE of its
    logits, without the sink or ``lse_scale``: zeros and ``-inf`` when it has no valid candidate
    or only ``-inf`` logits (NaN in a dim where such a candidate's value is infinite: zero weight
    times infinity), NaN and NaN when a logit is NaN or ``+inf``.
    """
    q = q.detach().cpu().to(torch.float64)
    num_tokens, num_heads = q.shape[0], q.shape[1]
    lists = [(kv_cache, indices, topk_length)]
    if extra_kv_cache is not None:
        lists.append((extra_kv_cache, extra_indices, extra_topk_length))
    prepared = []  # (rows, [T, width] indices, lengths, num_slots, first chunk)
    first_chunk = 0
    for cache, idx, lengths in lists:
        pages, page_size, _ = cache_geometry(cache)
        num_slots = pages * page_size
        rows = nvfp4_dequantize_sparse_mla_cache(cache, torch.arange(num_slots)).cpu().to(torch.float64)
        idx = idx.cpu().reshape(idx.shape[0], idx.shape[-1])
        prepared.append((rows, idx, None if lengths is None else lengths.cpu(), num_slots, first_chunk))
        first_chunk += -(-idx.shape[1] // 64)
    num_chunks = first_chunk
    scale = sm_scale if math.isfinite(sm_scale) else math.nan
    mid_out = torch.zeros(num_splits, num_tokens, num_heads, HEAD_DIM, dtype=torch.float64)
    mid_lse = torch.full((num_splits, num_tokens, num_heads), -math.inf, dtype=torch.float64)
    for s in range(num_splits):
        chunk_begin, chunk_end = s * num_chunks // num_splits, (s + 1) * num_chunks // num_splits
        for t in range(num_tokens):
            keys = []
            for rows, idx, lengths, num_slots, first in prepared:
                width = idx.shape[1]
                length = width if lengths is None else min(max(int(lengths[t]), 0), width)
                begin = min(max(chunk_begin - first, 0) * 64, length)
                end = min(max(chunk_end - first, 0) * 64, length)
                slots = idx[t, begin:end].to(torch.int64)
                keys.append(rows[slots[(slots >= 0) & (slots < num_slots)]])
            keys = torch.cat(keys)
            logits = scale * (q[t] @ keys.T)  # [H, C]
            poisoned = (torch.isnan(logits) | torch.isposinf(logits)).any(dim=1)
            weighted = (logits > -math.inf).any(dim=1) & ~poisoned
            safe = torch.where(weighted[:, None], logits, torch.zeros_like(logits))
            lse = torch.where(weighted, torch.logsumexp(safe, dim=1), -math.inf)
            out = _weighted_values(torch.where(weighted[:, None], torch.softmax(safe, dim=1), 0.0), keys)
            mid_lse[s, t] = torch.where(poisoned, math.nan, lse) / math.log(2.0)
            mid_out[s, t] = torch.where(poisoned[:, None], math.nan, out)
    return mid_out, mid_lse


def nvfp4_quantize_reference(latent: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Quantize bf16 rows ``[N, 512]`` the obvious way: (data [N, 352], scales [N, 32]) uint8.

    Nearest grid value by distance, ties to the even code; E4M3 through torch's float8 cast. A
    group holding a NaN gets the E4M3 NaN scale byte 0x7F and zero codes (it decodes to NaN); an
    infinite value saturates (scale 448, code +-6: +-2688).
    """
    x = latent.detach().cpu().to(torch.float32)
    nope = x[:, :NOPE_DIM].reshape(x.shape[0], -1, GROUP_SIZE)
    nan_group = torch.isnan(nope).any(dim=-1)
    nope = torch.where(nan_group[..., None], 0.0, nope)
    amax = nope.abs().amax(dim=-1)
    scale_fp8 = torch.clamp(amax / 6.0, max=448.0).to(torch.float8_e4m3fn)
    scale = scale_fp8.to(torch.float32)
    inverse = torch.where(scale == 0, torch.zeros_like(scale), 1.0 / scale)
    y = nope * inverse[..., None]
    grid = torch.tensor(E2M1_VALUES[:8], dtype=torch.float32)
    magnitude_in = y.abs().clamp(max=6.0)  # saturate at 6 (inf included)
    distance = (magnitude_in[..., None] - grid).abs()  # [N, 28, 16, 8]
    best = distance.min(dim=-1, keepdim=True).values
    tied = distance == best
    # Prefer the lowest even code among the nearest ones, else the (single) odd one.
    even = torch.arange(8) % 2 == 0
    magnitude = torch.where((tied & even).any(-1), (tied & even).int().argmax(-1), tied.int().argmax(-1))
    code = magnitude | (torch.signbit(y).int() << 3)
    code = code.reshape(x.shape[0], NOPE_DIM)
    packed = (code[:, 0::2] | (code[:, 1::2] << 4)).to(torch.uint8)
    rope = latent.detach().cpu()[:, NOPE_DIM:].contiguous().view(torch.uint8)
    data = torch.cat([packed, rope], dim=1)
    scales = torch.zeros(x.shape[0], 32, dtype=torch.uint8)
    scales[:, : NOPE_DIM // GROUP_SIZE] = torch.where(nan_group, 0x7F, scale_fp8.view(torch.uint8).int()).to(torch.uint8)
    return data, scales


def cache_rows_bytes(cache: torch.Tensor, slots: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """The raw (data [N, 352], scale [N, 32]) bytes of ``slots`` in a cache view, on the CPU."""
    pages, page_size, page_stride = cache_geometry(cache)
    flat = cache.as_strided(((pages - 1) * page_stride + page_size * 384,), (1,)).cpu()
    slots = slots.cpu().to(torch.int64)
    page, row = slots // page_size, slots % page_size
    data = flat[(page * page_stride + row * 352)[:, None] + torch.arange(352)]
    scale = flat[(page * page_stride + page_size * 352 + row * 32)[:, None] + torch.arange(32)]
    return data, scale
