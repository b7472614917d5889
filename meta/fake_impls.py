"""Fake implementations: shape/dtype checks, so the ops trace under torch.compile and
FakeTensor. The mutating ops (the prefill, the decode, the writers) write their outputs in place
and return nothing, so there is nothing to allocate for them; the functional prefill allocates
its two outputs. The C++ library
names this module (``m.set_python_module``), so PyTorch imports it on first need."""
import torch

# Plain ints from the loaded extension (torch_ops imports _C before this module), so the fakes
# check the same format constants as the C++ kernels.
from .. import _C

HEAD_DIM = _C.HEAD_DIM
TOKEN_BYTES = _C.TOKEN_BYTES


def _check_devices(anchor_name, anchor, **named):
    """ValueError naming a tensor of `named` (None: absent) on another device than `anchor`, as
    the C++ checks say it (a meta tensor among real ones sends a call to these fakes, which must
    not pass it as a write that never happens)."""
    for name, tensor in named.items():
        if tensor is not None and tensor.device != anchor.device:
            raise ValueError(f"{name}: expected a tensor on {anchor.device} (the device of {anchor_name}), "
                             f"got {tensor.device}")


def _check_rank(name, tensor, ranks, shapes):
    """ValueError naming `name` for a rank the C++ checks reject, before the fakes index its shape
    (a 0-d tensor would otherwise raise IndexError from here)."""
    if tensor.dim() not in ranks:
        raise ValueError(f"{name}: expected {shapes}, got shape {list(tensor.shape)}")


def _concrete(*tensors):
    """Whether every size, stride and storage offset of `tensors` (None: absent) is a plain int: the
    C++ checks read them as such, so a call traced with symbolic shapes keeps the checks below."""
    return all(isinstance(value, int) for tensor in tensors if tensor is not None
               for value in (*tensor.shape, *tensor.stride(), tensor.storage_offset()))


def _traced():
    """Whether torch.compile (or export) is tracing this call. Dynamo's fake runs of an op have a
    TracingContext; torch.compiler.is_compiling() says so only in some torch versions (2.14, not 2.11)."""
    return torch._guards.TracingContext.try_get() is not None


def _concrete_scale(value, stand_in):
    """A scale as the C++ checks take it: a Python number as a float; anything else (a symbolic
    value while tracing) by a stand-in those checks accept."""
    return float(value) if isinstance(value, (int, float)) else stand_in


def _check_prefill(q, kv_cache, indices, output, out_lse, topk_length, attn_sink, extra_kv_cache, extra_indices,
                   extra_topk_length, op="prefill", max_splits=16, head_tiles=None, mid_out=None, mid_lse=None,
                   num_splits=None, sm_scale=0.0, lse_scale=1.0):
    """The op's checks; True where they ran whole (concrete shapes, not traced), else the trace's."""
    _check_devices("q", q, kv_cache=kv_cache, indices=indices, output=output, out_lse=out_lse, topk_length=topk_length,
                   attn_sink=attn_sink, extra_kv_cache=extra_kv_cache, extra_indices=extra_indices,
                   extra_topk_length=extra_topk_length)
    tensors = (q, kv_cache, indices, output, out_lse, topk_length, attn_sink, extra_kv_cache, extra_indices,
               extra_topk_length)
    if _concrete(*tensors, mid_out, mid_lse) and not _traced():
        # Meta tensors and a caller's FakeTensorMode: the op's own checks (every ValueError of the
        # eager call but those that need the data pointers or the device: the alignment, overlap
        # between separate storages, whether the GPU fits a head tile, the planned split count).
        # Not while torch.compile traces: it would report a ValueError raised here as its own
        # TorchRuntimeError, so there the compiled graph's op raises the eager ValueError at run
        # time (and cake::check_call_apart, before it, the overlap checks).
        _C.check_attention_inputs(op, *tensors, max_splits=max_splits, mid_out=mid_out, mid_lse=mid_lse,
                                  head_tiles=head_tiles, num_splits=num_splits,
                                  sm_scale=_concrete_scale(sm_scale, 0.0), lse_scale=_concrete_scale(lse_scale, 1.0))
        return True
    # Traced (or symbolic shapes): what the trace needs to be consistent.
    torch._check(q.dim() == 3, lambda: f"q: expected shape [T, H, 512], got {tuple(q.shape)}")
    torch._check(q.shape[2] == HEAD_DIM, lambda: f"q: expected last dim 512, got {q.shape[2]}")
    torch._check(q.dtype == torch.bfloat16, lambda: f"q: expected dtype bfloat16, got {q.dtype}")
    torch._check(output.shape == q.shape, lambda: f"output: expected shape {tuple(q.shape)}, got {tuple(output.shape)}")
    torch._check(output.dtype == torch.bfloat16, lambda: f"output: expected dtype bfloat16, got {output.dtype}")
    torch._check(out_lse.dim() == 2, lambda: f"out_lse: expected shape [T, H], got {tuple(out_lse.shape)}")
    torch._check(out_lse.shape[0] == q.shape[0], lambda: "out_lse: expected T rows")
    torch._check(out_lse.shape[1] == q.shape[1], lambda: "out_lse: expected H columns")
    torch._check(out_lse.dtype == torch.float32, lambda: f"out_lse: expected dtype float32, got {out_lse.dtype}")
    torch._check(kv_cache.dtype == torch.uint8, lambda: f"kv_cache: expected dtype uint8, got {kv_cache.dtype}")
    _check_rank("kv_cache", kv_cache, (3, 4), "[num_pages, page_size, 384], HND [num_pages, 1, page_size, 384] or NHD "
                "[num_pages, page_size, 1, 384]")
    torch._check(kv_cache.shape[-1] == TOKEN_BYTES, lambda: "kv_cache: expected last dim 384")
    torch._check(indices.dtype == torch.int32, lambda: f"indices: expected dtype int32, got {indices.dtype}")
    _check_rank("indices", indices, (2, 3), "shape [T, topk] or [T, 1, topk]")
    torch._check(indices.shape[0] == q.shape[0], lambda: "indices: expected T rows")
    torch._check((extra_kv_cache is None) == (extra_indices is None), lambda: "extra_kv_cache and extra_indices go together")


@torch.library.register_fake("cake::sparse_mla_prefill")
def _sparse_mla_prefill_fake(
    q,
    kv_cache,
    indices,
    output,
    out_lse,
    sm_scale,
    *,
    topk_length=None,
    attn_sink=None,
    extra_kv_cache=None,
    extra_indices=None,
    extra_topk_length=None,
    lse_scale=1.0,
    head_tiles=None,
):
    _check_prefill(q, kv_cache, indices, output, out_lse, topk_length, attn_sink, extra_kv_cache, extra_indices,
                   extra_topk_length, head_tiles=head_tiles, sm_scale=sm_scale, lse_scale=lse_scale)
    return None


@torch.library.register_fake("cake::sparse_mla_prefill_functional")
def _sparse_mla_prefill_functional_fake(
    q,
    kv_cache,
    indices,
    sm_scale,
    *,
    topk_length=None,
    attn_sink=None,
    extra_kv_cache=None,
    extra_indices=None,
    extra_topk_length=None,
    lse_scale=1.0,
    head_tiles=None,
):
    if q.dim() != 3 or q.shape[2] != HEAD_DIM:
        raise ValueError(f"q: expected shape [T, H, 512], got {tuple(q.shape)}")
    output = q.new_empty(q.shape, dtype=torch.bfloat16)
    out_lse = q.new_empty(q.shape[:2], dtype=torch.float32)
    _check_prefill(q, kv_cache, indices, output, out_lse, topk_length, attn_sink, extra_kv_cache, extra_indices,
                   extra_topk_length, head_tiles=head_tiles, sm_scale=sm_scale, lse_scale=lse_scale)
    return output, out_lse


@torch.library.register_fake("cake::sparse_mla_decode")
def _sparse_mla_decode_fake(
    q,
    kv_cache,
    indices,
    output,
    out_lse,
    sm_scale,
    *,
    topk_length=None,
    attn_sink=None,
    extra_kv_cache=None,
    extra_indices=None,
    extra_topk_length=None,
    mid_out=None,
    mid_lse=None,
    lse_scale=1.0,
    num_splits=None,
    max_splits=16,
    head_tiles=None,
):
    if _check_prefill(q, kv_cache, indices, output, out_lse, topk_length, attn_sink, extra_kv_cache, extra_indices,
                      extra_topk_length, op="decode", max_splits=max_splits, head_tiles=head_tiles,
                      mid_out=mid_out, mid_lse=mid_lse, num_splits=num_splits, sm_scale=sm_scale,
                      lse_scale=lse_scale):
        return None
    _check_devices("q", q, mid_out=mid_out, mid_lse=mid_lse)
    for name, scratch, rank in (("mid_out", mid_out, 4), ("mid_lse", mid_lse, 3)):
        if scratch is None:
            continue
        torch._check(scratch.dtype == torch.float32, lambda: f"{name}: expected dtype float32, got {scratch.dtype}")
        torch._check(scratch.dim() == rank, lambda: f"{name}: expected {rank} dims, got shape {tuple(scratch.shape)}")
        torch._check(scratch.shape[1] == q.shape[0], lambda: f"{name}: expected T of q in dim 1")
        torch._check(scratch.shape[2] == q.shape[1], lambda: f"{name}: expected H of q in dim 2")
    torch._check((mid_out is None) == (mid_lse is None), lambda: "mid_out and mid_lse go together")
    return None


def _check_writer(op, latent_kv, slot_mapping, cache):
    """The writer's own checks (its cache's alignment aside) where the shapes are concrete and
    torch.compile is not tracing (as _check_prefill does for the attention ops); True where they ran."""
    if _concrete(latent_kv, slot_mapping, cache) and not _traced():
        _C.check_writer_inputs(op, latent_kv, slot_mapping, cache)
        return True
    return False


@torch.library.register_fake("cake::check_call_apart")
def _check_call_apart_fake(op, tensors):
    # Fake tensors hold no addresses; the check runs in the compiled graph, on the real tensors.
    return None


@torch.library.register_fake("cake::nvfp4_pack_cache")
def _nvfp4_pack_cache_fake(latent_kv, cache):
    _check_devices("cache", cache, latent_kv=latent_kv)
    if _check_writer("pack", latent_kv, None, cache):
        return None
    _check_rank("latent_kv", latent_kv, (3,), "shape [num_pages, page_size, 512]")
    torch._check(latent_kv.dtype == torch.bfloat16, lambda: f"latent_kv: expected dtype bfloat16, got {latent_kv.dtype}")
    torch._check(latent_kv.shape[-1] == HEAD_DIM, lambda: "latent_kv: expected last dim 512")
    torch._check(cache.dtype == torch.uint8, lambda: f"cache: expected dtype uint8, got {cache.dtype}")
    return None


@torch.library.register_fake("cake::nvfp4_append_cache")
def _nvfp4_append_cache_fake(latent_kv, slot_mapping, cache):
    _check_devices("cache", cache, latent_kv=latent_kv, slot_mapping=slot_mapping)
    if _check_writer("append", latent_kv, slot_mapping, cache):
        return None
    _check_rank("latent_kv", latent_kv, (2,), "shape [N, 512]")
    _check_rank("slot_mapping", slot_mapping, (1,), "shape [N]")
    torch._check(latent_kv.dtype == torch.bfloat16, lambda: f"latent_kv: expected dtype bfloat16, got {latent_kv.dtype}")
    torch._check(latent_kv.shape[-1] == HEAD_DIM, lambda: "latent_kv: expected last dim 512")
    torch._check(slot_mapping.shape[0] == latent_kv.shape[0], lambda: "slot_mapping: expected one slot per row")
    torch._check(cache.dtype == torch.uint8, lambda: f"cache: expected dtype uint8, got {cache.dtype}")
    return None
