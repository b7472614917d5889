"""Every ValueError of docs/contract.md section 10 (errors), each with the message it must carry.
Raised before any launch, so the output buffers stay poisoned."""
import contextlib
import math

import pytest
import torch

import torch_ops

T, H, TOPK = 3, 32, 100


def base_args(device="cpu"):
    cache = torch.zeros(4, 1, 64, 384, dtype=torch.uint8, device=device)
    return dict(
        q=torch.randn(T, H, 512, device=device).to(torch.bfloat16),
        kv_cache=cache,
        indices=torch.zeros(T, TOPK, dtype=torch.int32, device=device),
        output=torch.full((T, H, 512), float("nan"), dtype=torch.bfloat16, device=device),
        out_lse=torch.full((T, H), float("nan"), device=device),
        sm_scale=0.1,
    )


# The op's positional arguments, in order (the rest are keywords).
POSITIONAL = ("q", "kv_cache", "indices", "output", "out_lse", "sm_scale")


def pop_positional(args: dict) -> list:
    """The positional arguments taken out of a dict of all of a call's arguments (the dict keeps
    the keywords)."""
    return [args.pop(k) for k in POSITIONAL]


def call(device="cpu", base=None, **overrides):
    args = dict(base) if base is not None else base_args(device)
    args.update(overrides)
    positional = pop_positional(args)
    return torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(*positional, **args)


def raw_op(device="cpu", base=None, **overrides):
    """The op without the Python wrapper's normalisation."""
    args = dict(base) if base is not None else base_args(device)
    args.update(overrides)
    positional = pop_positional(args)
    return torch.ops.cake.sparse_mla_prefill(*positional, **args)


CASES = {
    "q_rank": (dict(q=torch.zeros(T, H * 512, dtype=torch.bfloat16)), r"q: expected shape \[T, H, 512\]"),
    "q_dim": (dict(q=torch.zeros(T, H, 256, dtype=torch.bfloat16)), r"q: expected shape \[T, H, 512\]"),
    "q_dtype": (dict(q=torch.zeros(T, H, 512)), "q: expected dtype bfloat16"),
    "q_contiguous": (dict(q=torch.zeros(H, T, 512, dtype=torch.bfloat16).transpose(0, 1)), "q: expected a contiguous"),
    # Contiguous views one element past an aligned allocation.
    "q_misaligned": (dict(q=torch.zeros(T * H * 512 + 8, dtype=torch.bfloat16)[1:1 + T * H * 512].view(T, H, 512)),
                     r"q: expected a 16-byte aligned data pointer \(storage offset 1\)"),
    "heads_8": (dict(q=torch.zeros(T, 8, 512, dtype=torch.bfloat16)), "q: expected a head count"),
    "heads_24": (dict(q=torch.zeros(T, 24, 512, dtype=torch.bfloat16)), "q: expected a head count"),
    "heads_144": (dict(q=torch.zeros(T, 144, 512, dtype=torch.bfloat16)), "q: expected a head count"),
    "output_shape": (dict(output=torch.zeros(T, H, 511, dtype=torch.bfloat16)), "output: expected shape"),
    "output_dtype": (dict(output=torch.zeros(T, H, 512)), "output: expected dtype bfloat16"),
    "output_contiguous": (dict(output=torch.zeros(T, 512, H, dtype=torch.bfloat16).transpose(1, 2)),
                          "output: expected a contiguous"),
    "output_misaligned": (dict(output=torch.full((T * H * 512 + 2,), float("nan"), dtype=torch.bfloat16)[1:1 + T * H * 512]
                               .view(T, H, 512)), r"output: expected a 4-byte aligned data pointer \(storage offset 1\)"),
    "lse_shape": (dict(out_lse=torch.zeros(T, H + 1)), r"out_lse: expected shape \[3, 32\]"),
    "lse_dtype": (dict(out_lse=torch.zeros(T, H, dtype=torch.float64)), "out_lse: expected dtype float32"),
    "lse_contiguous": (dict(out_lse=torch.zeros(H, T).t()), "out_lse: expected a contiguous"),
    "cache_dtype": (dict(kv_cache=torch.zeros(4, 64, 384)), "kv_cache: expected dtype uint8"),
    "cache_rank": (dict(kv_cache=torch.zeros(4 * 64, 384, dtype=torch.uint8)), "kv_cache: expected"),
    "cache_last_dim": (dict(kv_cache=torch.zeros(4, 64, 352, dtype=torch.uint8)), "kv_cache: expected last dim 384"),
    "cache_4d_form": (dict(kv_cache=torch.zeros(4, 2, 32, 384, dtype=torch.uint8)), "kv_cache: a 4-D cache must be"),
    "cache_inner_stride": (dict(kv_cache=torch.zeros(4, 384, 64, dtype=torch.uint8).transpose(1, 2)),
                           "kv_cache: expected stride 1 in the last dim"),
    "cache_token_stride": (dict(kv_cache=torch.zeros(4, 64, 400, dtype=torch.uint8)[:, :, :384]),
                           "kv_cache: expected token stride 384"),
    "cache_page_stride_16": (dict(kv_cache=torch.zeros(4, 64 * 384 + 8, dtype=torch.uint8)[:, : 64 * 384].view(4, 64, 384)),
                             "kv_cache: expected a page stride that is a multiple of 16"),
    "cache_page_stride_small": (dict(kv_cache=torch.zeros(4 * 64 * 384, dtype=torch.uint8).as_strided((4, 64, 384), (16 * 384, 384, 1))),
                                r"kv_cache: expected a page stride >= page_size \* 384"),
    "cache_misaligned": (dict(kv_cache=torch.zeros(4 * 64 * 384 + 8, dtype=torch.uint8)[8:].view(4, 64, 384)),
                         "kv_cache: expected a 16-byte aligned data pointer"),
    "indices_dtype": (dict(indices=torch.zeros(T, TOPK, dtype=torch.int64)), "indices: expected dtype int32"),
    "indices_rank": (dict(indices=torch.zeros(T * TOPK, dtype=torch.int32)), r"indices: expected shape \[T, topk\]"),
    "indices_rows": (dict(indices=torch.zeros(T + 1, TOPK, dtype=torch.int32)), "indices: expected 3 rows"),
    "indices_empty": (dict(indices=torch.zeros(T, 0, dtype=torch.int32)), "indices: expected topk >= 1"),
    "lengths_dtype": (dict(topk_length=torch.zeros(T, dtype=torch.int64)), "topk_length: expected dtype int32"),
    "lengths_rank": (dict(topk_length=torch.zeros(T, 1, dtype=torch.int32)), "topk_length: expected a 1-D"),
    "lengths_short": (dict(topk_length=torch.zeros(T - 1, dtype=torch.int32)), "topk_length: expected at least 3"),
    "sink_dtype": (dict(attn_sink=torch.zeros(H, dtype=torch.float64)), "attn_sink: expected dtype float32"),
    "sink_short": (dict(attn_sink=torch.zeros(H - 1)), "attn_sink: expected a 1-D tensor with at least 32"),
    "sink_rank": (dict(attn_sink=torch.zeros(1, H)), "attn_sink: expected a 1-D"),
    "extra_cache_alone": (dict(extra_kv_cache=torch.zeros(2, 64, 384, dtype=torch.uint8)),
                          "extra_indices: required when extra_kv_cache"),
    "extra_indices_alone": (dict(extra_indices=torch.zeros(T, 8, dtype=torch.int32)),
                            "extra_kv_cache: required when extra_indices"),
    "extra_length_alone": (dict(extra_topk_length=torch.zeros(T, dtype=torch.int32)),
                           "extra_topk_length: given without extra_indices"),
    "extra_cache_bad": (dict(extra_kv_cache=torch.zeros(2, 64, 380, dtype=torch.uint8),
                             extra_indices=torch.zeros(T, 8, dtype=torch.int32)), "extra_kv_cache: expected last dim 384"),
    "extra_indices_rows": (dict(extra_kv_cache=torch.zeros(2, 64, 384, dtype=torch.uint8),
                                extra_indices=torch.zeros(T + 2, 8, dtype=torch.int32)), "extra_indices: expected 3 rows"),
    "extra_lengths_dtype": (dict(extra_kv_cache=torch.zeros(2, 64, 384, dtype=torch.uint8),
                                 extra_indices=torch.zeros(T, 8, dtype=torch.int32),
                                 extra_topk_length=torch.zeros(T)), "extra_topk_length: expected dtype int32"),
    "too_many_chunks": (dict(indices=torch.zeros(T, 1025, dtype=torch.int32)), "expected ceil"),
    "too_many_chunks_split": (dict(indices=torch.zeros(T, 1000, dtype=torch.int32),
                                   extra_kv_cache=torch.zeros(2, 64, 384, dtype=torch.uint8),
                                   extra_indices=torch.zeros(T, 20, dtype=torch.int32)), "got 16 \\+ 1"),
    "sm_scale_huge": (dict(sm_scale=1e31), r"sm_scale: expected a magnitude of at most 1e30 .*got 1e\+31"),
    "sm_scale_huge_negative": (dict(sm_scale=-3e38), r"sm_scale: expected a magnitude of at most 1e30"),
    "lse_scale_zero": (dict(lse_scale=0.0), r"lse_scale: expected a finite value that is nonzero as a float32 .*got 0"),
    "lse_scale_below_float32": (dict(lse_scale=1e-50), r"lse_scale: expected a finite value .*got 1e-50"),
    "lse_scale_past_float32": (dict(lse_scale=-1e39), r"lse_scale: expected a finite value .*got -1e\+39"),
    "lse_scale_nan": (dict(lse_scale=float("nan")), "lse_scale: expected a finite value"),
    "lse_scale_inf": (dict(lse_scale=float("inf")), "lse_scale: expected a finite value"),
    "head_tiles_3": (dict(head_tiles=3), r"head_tiles: expected one of \[1, 2\] for H = 32"),
    "head_tiles_4_for_32": (dict(head_tiles=4), r"head_tiles: expected one of \[1, 2\]"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_value_errors(name):
    overrides, message = CASES[name]
    base = base_args()
    base["indices"] = torch.randint(0, 256, (T, TOPK), dtype=torch.int32)  # valid slots: only the override is wrong
    with pytest.raises(ValueError, match=message):
        raw_op(base=base, **overrides)
    with pytest.raises(ValueError, match=message):
        call(base=base, **overrides)
    assert torch.isnan(base["output"].float()).all(), "nothing may be written before validation passes"
    assert torch.isnan(base["out_lse"]).all(), "nothing may be written before validation passes"


def test_indices_3d_accepted_and_t_zero_is_valid():
    plan = call(indices=torch.zeros(T, 1, TOPK, dtype=torch.int32))
    assert plan["head_tiles"] in (1, 2)
    empty = dict(q=torch.zeros(0, H, 512, dtype=torch.bfloat16), indices=torch.zeros(0, TOPK, dtype=torch.int32),
                 output=torch.zeros(0, H, 512, dtype=torch.bfloat16), out_lse=torch.zeros(0, H))
    assert call(**empty)["num_ctas"] == 0


def test_sixteen_chunks_accepted():
    extra = dict(indices=torch.zeros(T, 960, dtype=torch.int32), extra_kv_cache=torch.zeros(2, 64, 384, dtype=torch.uint8),
                 extra_indices=torch.zeros(T, 64, dtype=torch.int32))
    call(**extra)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["q_dtype", "cache_4d_form", "too_many_chunks", "head_tiles_3", "lengths_short"])
def test_value_errors_cuda(name):
    overrides, message = CASES[name]
    overrides = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in overrides.items()}
    with pytest.raises(ValueError, match=message):
        raw_op(device="cuda", **overrides)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_misaligned_q_and_output_cuda():
    # Built on the device, as below: the kernels would fault on these views.
    q = torch.randn(T * H * 512 + 8, device="cuda").to(torch.bfloat16)[1:1 + T * H * 512].view(T, H, 512)
    with pytest.raises(ValueError, match="q: expected a 16-byte aligned data pointer"):
        raw_op(device="cuda", q=q)
    output = torch.full((T * H * 512 + 2,), float("nan"), dtype=torch.bfloat16, device="cuda")[1:1 + T * H * 512]
    with pytest.raises(ValueError, match="output: expected a 4-byte aligned data pointer"):
        raw_op(device="cuda", output=output.view(T, H, 512))
    assert torch.isnan(output.float()).all(), "nothing may be written before validation passes"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_misaligned_cache_cuda():
    # Built on the device: moving a misaligned CPU view to CUDA would realign it.
    cache = torch.zeros(4 * 64 * 384 + 8, dtype=torch.uint8, device="cuda")[8:].view(4, 64, 384)
    with pytest.raises(ValueError, match="kv_cache: expected a 16-byte aligned data pointer"):
        raw_op(device="cuda", kv_cache=cache)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_mixed_devices_rejected():
    with pytest.raises(ValueError, match="indices: expected a tensor on cuda"):
        raw_op(device="cuda", indices=torch.zeros(T, TOPK, dtype=torch.int32))
    with pytest.raises(ValueError, match="attn_sink: expected a tensor on cuda"):
        raw_op(device="cuda", attn_sink=torch.zeros(H))


def test_mixed_devices_rejected_meta():
    """A device mismatch is caught on CPU machines too (meta tensors stand in for a second device)."""
    with pytest.raises(ValueError, match="kv_cache: expected a tensor on cpu"):
        raw_op(kv_cache=torch.zeros(4, 64, 384, dtype=torch.uint8, device="meta"))


@pytest.mark.parametrize("name", ["q", "kv_cache", "indices", "output", "out_lse"])
def test_required_tensor_missing_or_not_a_tensor(name):
    """The Python functions name a required tensor argument that is None or not a tensor."""
    for bad in (None, [0.0]):
        with pytest.raises(TypeError, match=f"{name}: expected a torch.Tensor, got {type(bad).__name__}"):
            call(**{name: bad})


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("name", ["q", "kv_cache", "indices", "output", "out_lse", "attn_sink", "topk_length"])
def test_python_functions_name_a_tensor_that_is_not_dense(name):
    """A sparse (COO or CSR) or nested tensor argument: ValueError naming it, from the prefill, the
    decode and the one entry (the dispatcher would name only the op and its sparse backend)."""
    args = base_args()
    args["attn_sink"] = torch.zeros(H)
    args["topk_length"] = torch.full((T,), TOPK, dtype=torch.int32)
    dense = args[name]
    bads = [dense.to_sparse()]
    if dense.dim() == 2:
        bads.append(dense.to_sparse_csr())
    if dense.dim() >= 2:
        bads.append(torch.nested.nested_tensor(list(dense.unbind(0)), layout=torch.jagged))
    for bad in bads:
        layout = "nested" if bad.is_nested else str(bad.layout)
        for function in (torch_ops.sparse_mla_prefill, torch_ops.sparse_mla_decode, torch_ops.sparse_mla_attention):
            call_args = dict(args, **{name: bad})
            positional = pop_positional(call_args)
            message = f"{name}: expected a dense \\(torch.strided\\) tensor, got a {layout} one"
            with pytest.raises(ValueError, match=message):
                function(*positional, **call_args)
        assert torch.isnan(args["output"].float()).all() and torch.isnan(args["out_lse"]).all()
    cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(torch.randn(1, 16, 512).to(torch.bfloat16))
    with pytest.raises(ValueError, match="slots: expected a dense"):
        torch_ops.nvfp4_dequantize_sparse_mla_cache(cache, torch.tensor([0, 1]).to_sparse())
    with pytest.raises(ValueError, match="latent_kv: expected a dense"):
        torch_ops.nvfp4_quantize_pack_sparse_mla_cache(torch.randn(1, 16, 512).to(torch.bfloat16).to_sparse())


@pytest.mark.parametrize("device", ["gpu", "cuda:x", 3.5])
def test_scratch_allocation_names_a_device_it_cannot_parse(device):
    with pytest.raises(ValueError, match="allocate_decode_scratch: device: expected None, a torch.device or a "
                                         "device string"):
        torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch(2, 16, 2048, device=device)


def test_python_functions_name_q_for_a_meta_device():
    """The ops take meta tensors (their fake implementations); the Python functions (the
    functional one too, which plans nothing) say that a meta q's device has no kernels, naming q."""
    args = {name: (t.to("meta") if isinstance(t, torch.Tensor) else t) for name, t in base_args().items()}
    positional = pop_positional(args)
    for function in (torch_ops.sparse_mla_prefill, torch_ops.sparse_mla_decode, torch_ops.sparse_mla_attention):
        with pytest.raises(ValueError, match="q: expected a tensor on the CPU or a CUDA device, got one on meta"):
            function(*positional, **args)
    with pytest.raises(ValueError, match="q: expected a tensor on the CPU or a CUDA device, got one on meta"):
        torch_ops.sparse_mla_prefill_functional(positional[0], positional[1], positional[2], positional[5])
    torch.ops.cake.sparse_mla_prefill(*positional, **args)  # the ops themselves: shapes only
    torch.ops.cake.sparse_mla_prefill_functional(positional[0], positional[1], positional[2], positional[5])


@pytest.mark.parametrize("value", [2.0, True, "2"])
def test_head_tiles_not_an_int_names_it(value):
    with pytest.raises(TypeError, match=f"head_tiles: expected an int, got {type(value).__name__}"):
        call(head_tiles=value)

    class Two:
        def __index__(self):
            return 2

    call(head_tiles=Two())  # anything with __index__ but a bool (a numpy integer, say)


def test_fakes_name_a_tensor_of_the_wrong_rank():
    """The fake implementations (meta tensors, torch.compile) raise the C++ checks' ValueError for
    a cache or index tensor of the wrong rank, rather than an IndexError from indexing its shape."""
    args = {name: (t.to("meta") if isinstance(t, torch.Tensor) else t) for name, t in base_args().items()}
    cases = {"kv_cache": (torch.zeros((), dtype=torch.uint8, device="meta"), r"kv_cache: expected \[num_pages"),
             "indices": (torch.zeros((), dtype=torch.int32, device="meta"), r"indices: expected shape \[T, topk\]")}
    for name, (bad, message) in cases.items():
        with pytest.raises(ValueError, match=message):
            raw_op(base=args, **{name: bad})
        functional = {k: v for k, v in args.items() if k not in ("output", "out_lse")}
        functional[name] = bad
        with pytest.raises(ValueError, match=message):
            torch.ops.cake.sparse_mla_prefill_functional(*[functional.pop(k) for k in ("q", "kv_cache", "indices", "sm_scale")])
        with pytest.raises(ValueError, match=message):
            torch.ops.cake.sparse_mla_decode(*[dict(args, **{name: bad})[k] for k in POSITIONAL])
    cache = torch.zeros(2, 4, 384, dtype=torch.uint8, device="meta")
    with pytest.raises(ValueError, match=r"latent_kv: expected shape"):
        torch.ops.cake.nvfp4_pack_cache(torch.zeros((), dtype=torch.bfloat16, device="meta"), cache)
    with pytest.raises(ValueError, match=r"latent_kv: expected shape \[N, 512\]"):
        torch.ops.cake.nvfp4_append_cache(torch.zeros((), dtype=torch.bfloat16, device="meta"),
                                          torch.zeros(1, dtype=torch.int32, device="meta"), cache)
    with pytest.raises(ValueError, match=r"slot_mapping: expected shape \[1\] \(rows of latent_kv\), got \[\]"):
        torch.ops.cake.nvfp4_append_cache(torch.zeros(1, 512, dtype=torch.bfloat16, device="meta"),
                                          torch.zeros((), dtype=torch.int32, device="meta"), cache)


def test_decode_under_compile_names_a_rejected_plan_int():
    """Traced, the decode does not ask the (untraceable) planner again for ints it rejected: the
    compiled graph's op raises the eager ValueError naming the argument."""
    base = base_args()
    q, cache, indices, output, out_lse = (base[k] for k in ("q", "kv_cache", "indices", "output", "out_lse"))

    for overrides, message in ((dict(num_splits=7), "num_splits: expected 1 to 2"),
                               (dict(head_tiles=3), r"head_tiles: expected one of \[1, 2\]")):
        torch._dynamo.reset()

        def decode(q, cache, indices, output, out_lse):
            return torch_ops.sparse_mla_decode(q, cache, indices, output, out_lse, 0.1, **overrides)

        with pytest.raises(ValueError, match=message):
            torch.compile(decode, fullgraph=True, backend="eager")(q, cache, indices, output, out_lse)
        assert torch.isnan(output.float()).all(), "nothing may be written before validation passes"


def test_prefill_under_compile_names_a_rejected_head_count_or_tile():
    """Traced, the prefill does not plan a head count or head_tiles the op rejects (the planner would
    raise inside the trace, which torch reports as its own internal error): the compiled graph's op
    raises the eager ValueError naming the argument, and writes nothing."""
    for heads, head_tiles, message in ((H, 3, r"head_tiles: expected one of"),
                                       (8, None, r"q: expected a head count")):
        base = base_args()
        q = torch.randn(T, heads, 512).to(torch.bfloat16)
        output = torch.full((T, heads, 512), float("nan"), dtype=torch.bfloat16)
        out_lse = torch.full((T, heads), float("nan"))
        torch._dynamo.reset()

        def prefill(q, cache, indices, output, out_lse):
            return torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(q, cache, indices, output, out_lse, 0.1,
                                                                      head_tiles=head_tiles)

        with pytest.raises(ValueError, match=message):
            prefill(q, base["kv_cache"], base["indices"], output, out_lse)
        with pytest.raises(ValueError, match=message):
            torch.compile(prefill, fullgraph=True, backend="eager")(q, base["kv_cache"], base["indices"], output, out_lse)
        assert torch.isnan(output.float()).all() and torch.isnan(out_lse).all()


@pytest.mark.parametrize("bad", [4.0, True, None, "4"])
def test_planning_functions_name_an_argument_that_is_not_an_int(bad):
    """Not a pybind error naming a private function: TypeError naming the public one and the argument."""
    p = "cake_sparse_mla_sm120_dsv4_nvfp4_"
    calls = [
        ("prefill_head_tiles", lambda v: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill_head_tiles(v), "num_heads"),
        ("decode_head_tiles", lambda v: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_decode_head_tiles(v), "num_heads"),
        ("num_chunks", lambda v: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_num_chunks(512, v), "extra_topk"),
        ("plan_prefill_details", lambda v: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill_details(
            num_tokens=v, num_heads=64, topk=512), "num_tokens"),
        ("plan_splits", lambda v: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_splits(
            num_tokens=4, num_heads=64, topk=512, num_sms=v), "num_sms"),
        ("plan_decode", lambda v: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode(
            num_tokens=4, num_heads=v, topk=512), "num_heads"),
        ("scratch_bytes", lambda v: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_scratch_bytes(4, 64, v), "topk"),
        ("allocate_decode_scratch", lambda v: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch(
            v, 64, 512), "num_tokens"),
        ("select_kernel", lambda v: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_select_kernel(
            num_tokens=4, num_heads=64, topk=v, num_sms=132), "topk"),
    ]
    for name, make_call, argument in calls:
        with pytest.raises(TypeError, match=f"{p}{name}: {argument}: expected an int"):
            make_call(bad)
    # None stays accepted where it was before: plan_splits' head_tiles.
    assert torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_splits(num_tokens=4, num_heads=64, topk=512, num_sms=132,
                                                                   head_tiles=None)


@pytest.mark.parametrize("bad", [None, "0.1", 1j, True, torch.tensor(0.1)])
@pytest.mark.parametrize("name", ["sm_scale", "lse_scale"])
def test_scales_that_are_not_real_numbers_are_named(name, bad):
    """TypeError naming the function and the scale (not the dispatcher's RuntimeError), before
    anything is written; real numbers of other types (an int, a numpy float) are taken."""
    import numpy as np

    base = base_args()
    q, cache, indices, output, out_lse = (base[k] for k in ("q", "kv_cache", "indices", "output", "out_lse"))
    scales = dict(sm_scale=0.1, lse_scale=1.0)
    scales[name] = bad
    for function in ("cake_sparse_mla_sm120_dsv4_nvfp4_prefill", "cake_sparse_mla_sm120_dsv4_nvfp4_decode"):
        with pytest.raises(TypeError, match=f"{function}: {name}: expected a float"):
            getattr(torch_ops, function)(q, cache, indices, output, out_lse, scales["sm_scale"],
                                         lse_scale=scales["lse_scale"])
    with pytest.raises(TypeError, match=f"sparse_mla_prefill_functional: {name}: expected a float"):
        torch_ops.sparse_mla_prefill_functional(q, cache, indices, scales["sm_scale"], lse_scale=scales["lse_scale"])
    assert torch.isnan(output.float()).all()
    for good in (1, np.float32(0.5)):
        torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(q, cache, indices, output, out_lse, good, lse_scale=good)


def test_integers_past_int64_and_scales_past_a_double_are_named():
    """An int argument outside int64, or a scale too large for a double, raises ValueError naming
    the public function and the argument (not the dispatcher's RuntimeError or a binding's
    TypeError naming a private function), before anything is written; a planner's kernel that is
    not a string raises TypeError naming it. The ends of int64 are taken."""
    base = base_args()
    q, cache, indices, output, out_lse = (base[k] for k in ("q", "kv_cache", "indices", "output", "out_lse"))
    p = "cake_sparse_mla_sm120_dsv4_nvfp4_"
    past = 2 ** 63
    calls = {
        ("prefill", "head_tiles"): lambda: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(
            q, cache, indices, output, out_lse, 0.1, head_tiles=past),
        ("decode", "num_splits"): lambda: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_decode(
            q, cache, indices, output, out_lse, 0.1, num_splits=-past - 1),
        ("decode", "max_splits"): lambda: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_decode(
            q, cache, indices, output, out_lse, 0.1, max_splits=past),
        ("prefill_head_tiles", "num_heads"): lambda: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill_head_tiles(past),
        ("plan_prefill_details", "num_tokens"): lambda: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill_details(
            num_tokens=past, num_heads=32, topk=64),
        ("num_chunks", "topk"): lambda: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_num_chunks(past),
        ("scratch_bytes", "num_tokens"): lambda: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_scratch_bytes(2 ** 64, 8, 64),
        ("select_kernel", "num_sms"): lambda: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_select_kernel(
            num_tokens=1, num_heads=64, topk=512, num_sms=past),
    }
    for (function, argument), make_call in calls.items():
        with pytest.raises(ValueError, match=f"{p}{function}: {argument}: expected a value in int64's range"):
            make_call()
    for name in ("sm_scale", "lse_scale"):
        scales = dict(dict(sm_scale=0.1, lse_scale=1.0), **{name: 10 ** 400})
        for function in ("prefill", "decode"):
            with pytest.raises(ValueError, match=f"{p}{function}: {name}: expected a value within a double's range"):
                getattr(torch_ops, p + function)(q, cache, indices, output, out_lse, scales["sm_scale"],
                                                 lse_scale=scales["lse_scale"])
    assert torch.isnan(output.float()).all() and torch.isnan(out_lse).all()
    with pytest.raises(TypeError, match=f"{p}plan_prefill_details: kernel: expected None or a string, got int"):
        torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill_details(num_tokens=1, num_heads=32, topk=64, kernel=1)
    with pytest.raises(TypeError, match=f"{p}plan_prefill: kernel: expected None or a string, got int"):
        torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill(num_tokens=1, num_heads=32, topk=64, kernel=1)
    with pytest.raises(ValueError, match="sparse_mla_attention: sm_scale: expected a value within a double's range"):
        torch_ops.sparse_mla_attention(q, cache, indices, output, out_lse, 10 ** 400)
    # An int too long to print names itself by its size.
    with pytest.raises(ValueError, match=f"{p}num_chunks: topk: expected a value in int64's range, got a 16610-bit"):
        torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_num_chunks(10 ** 5000)
    with pytest.raises(ValueError, match=f"{p}prefill: sm_scale: expected a value within a double's range, got a"):
        torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(q, cache, indices, output, out_lse, 10 ** 5000)
    assert torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_num_chunks(past - 1) == 2 ** 57
    assert torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_select_kernel(num_tokens=1, num_heads=64, topk=512,
                                                                     num_sms=past - 1) == "decode"


def test_a_scale_past_a_double_is_named_where_compile_traces_it():
    """The check compares rather than converts, so where torch.compile traces the wrapper (and, as
    a failed check does, falls back to eager) the caller still gets the ValueError naming the scale."""
    base = base_args()
    q, cache, indices, output, out_lse = (base[k] for k in ("q", "kv_cache", "indices", "output", "out_lse"))
    torch._dynamo.reset()

    def prefill(q, cache, indices, output, out_lse):
        torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(q, cache, indices, output, out_lse, 10 ** 400)

    with pytest.raises(ValueError, match="cake_sparse_mla_sm120_dsv4_nvfp4_prefill: sm_scale: expected a value within"):
        torch.compile(prefill, backend="eager")(q, cache, indices, output, out_lse)
    assert torch.isnan(output.float()).all()


@pytest.mark.parametrize("sm_scale", [1e30, -1e30, math.inf, -math.inf, math.nan])
def test_fakes_accept_the_scales_the_op_accepts(sm_scale):
    """The largest finite sm_scale and the non-finite ones pass the fakes' checks as they pass the
    op's (section 8 makes the non-finite ones NaN, not errors)."""
    args = {k: (v.to("meta") if isinstance(v, torch.Tensor) else v) for k, v in base_args().items()}
    args["sm_scale"] = sm_scale
    positional = pop_positional(args)
    torch.ops.cake.sparse_mla_prefill(*positional, **args)
    torch.ops.cake.sparse_mla_decode(*positional, num_splits=1)
    torch.ops.cake.sparse_mla_prefill_functional(positional[0], positional[1], positional[2], sm_scale)


def test_planners_count_chunks_of_any_width():
    """A list width near 2^63 is more than 16 * max_splits chunks, not a negative count."""
    huge = 2 ** 63 - 1
    assert torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_num_chunks(huge) == 2 ** 57
    assert torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_num_chunks(1, huge) == 2 ** 57 + 1
    shape = dict(num_tokens=2, num_heads=32)
    for widths in (dict(topk=huge), dict(topk=1, extra_topk=huge)):
        with pytest.raises(ValueError, match="topk/extra_topk: expected"):
            torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_splits(**shape, **widths, num_sms=132)
        with pytest.raises(ValueError, match="topk/extra_topk: expected"):
            torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode(**shape, **widths)
        with pytest.raises(ValueError, match="topk/extra_topk: expected"):
            torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill_details(**shape, **widths)
        with pytest.raises(ValueError, match="topk/extra_topk: expected"):
            torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_select_kernel(**shape, **widths, num_sms=132)
        with pytest.raises(ValueError, match="topk/extra_topk: expected"):
            torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_scratch_bytes(2, 32, widths["topk"], widths.get("extra_topk", 0))


def test_planners_bound_the_token_count_and_the_scratch():
    """Counts that would pass 64 bits are rejected naming the argument, not planned with products
    that wrap: a prefill plan past 2^56 tokens (num_tokens), a scratch past 2^63 bytes
    (num_tokens/topk/max_splits). The decode's planners and select_kernel take any count (their
    model runs in 128 bits)."""
    shape = dict(num_heads=128, topk=1024)
    with pytest.raises(ValueError, match=r"num_tokens: expected <= 2\^56"):
        torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill_details(num_tokens=2 ** 56 + 1, **shape)
    plan = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill_details(num_tokens=2 ** 56, **shape)
    assert plan["num_ctas"] == 2 ** 56 * 128 // (16 * plan["head_tiles"])
    # The head tile rule's work-item products stay exact there and for any SM count: as many
    # tokens pick what 2^40 tokens pick, one token on a huge SM count what it picks on 132.
    for kernel in ("portable", None):
        details = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill_details
        for num_tokens in (2 ** 54, 2 ** 55, 2 ** 56):
            assert (details(num_tokens=num_tokens, **shape, num_sms=132, kernel=kernel)["head_tiles"]
                    == details(num_tokens=2 ** 40, **shape, num_sms=132, kernel=kernel)["head_tiles"] == 4)
        # (The Hopper kernel's table picks 4 tiles at any count, so kernel=None on a Hopper GPU
        # compares 4 with 4; the portable rows are the ones that can fail.)
        one_token = details(num_tokens=1, **shape, num_sms=132, kernel=kernel)["head_tiles"]
        assert kernel is None or one_token == 1
        for num_sms in (2 ** 57, 2 ** 62, 2 ** 63 - 1):
            assert details(num_tokens=1, **shape, num_sms=num_sms, kernel=kernel)["head_tiles"] == one_token
    # Many tokens fill any GPU: the prefill serves them (the product in 64 bits had wrapped to the decode).
    assert torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_select_kernel(num_tokens=2 ** 61, **shape, num_sms=132) == "prefill"
    with pytest.raises(ValueError, match="num_tokens/topk/max_splits: the scratch"):
        torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_scratch_bytes(2 ** 50, 128, 16384)
    most = 2 ** 31 - 1
    assert torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_scratch_bytes(most, 128, 16384) == 256 * most * 128 * 513 * 4  # 256 chunks, one a split at most
    with pytest.raises(ValueError, match="num_tokens/topk/max_splits: the scratch"):
        torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_scratch_bytes(most, 128, 2 ** 40, max_splits=2 ** 40)


def test_dequantizer_rejects_what_it_would_misread():
    """Views whose bytes are not where the format puts them, and non-integer slots, raise instead
    of returning other bytes' values."""
    cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(torch.randn(4, 16, 512).to(torch.bfloat16))
    slots = torch.tensor([0, 5, 63])
    padded = torch.zeros(4, 16, 400, dtype=torch.uint8)
    padded[:, :, :384] = cache.view(4, 16, 384)
    bad_views = {
        "expected token stride 384": padded[:, :, :384],
        r"expected a page stride >= page_size \* 384": cache.reshape(-1).as_strided((4, 16, 384), (384, 384, 1)),
        "expected stride 1 in the last dim": cache.view(4, 16, 384).transpose(1, 2).contiguous().transpose(1, 2),
        "expected page_size >= 1": torch.zeros(4, 0, 384, dtype=torch.uint8),
        "expected a page stride that is a multiple of 16 bytes, got 6152": torch.zeros(
            4, 16 * 384 + 8, dtype=torch.uint8)[:, : 16 * 384].view(4, 16, 384),
    }
    for message, view in bad_views.items():
        with pytest.raises(ValueError, match=f"cache: {message}"):
            torch_ops.nvfp4_dequantize_sparse_mla_cache(view, slots[:0] if view.shape[1] == 0 else slots)
    with pytest.raises(ValueError, match="slots: expected an integer dtype"):
        torch_ops.nvfp4_dequantize_sparse_mla_cache(cache, slots.float() + 0.5)
    with pytest.raises(TypeError, match="slots: expected a torch.Tensor, got list"):
        torch_ops.nvfp4_dequantize_sparse_mla_cache(cache, [0, 5])
    with pytest.raises(ValueError, match="slots: expected a tensor with data .*meta device"):
        torch_ops.nvfp4_dequantize_sparse_mla_cache(cache, slots.to("meta"))
    with pytest.raises(ValueError, match="cache: expected a tensor with data .*meta device"):
        torch_ops.nvfp4_dequantize_sparse_mla_cache(cache.to("meta"), slots)


# The data pointer's alignment is a property of the real buffer: checked when the op runs, not by the
# fakes (a meta or fake tensor has no data).
_CASES_NEEDING_DATA = {"q_misaligned", "output_misaligned", "cache_misaligned"}


def _without_data(tensor, convert):
    """`tensor`'s sizes, strides and storage offset on a tensor without data (convert: the meta
    device or a FakeTensorMode), so that a view's layout reaches the fake as it is."""
    if not isinstance(tensor, torch.Tensor):
        return tensor
    base = convert(torch.empty(tensor.untyped_storage().nbytes() // tensor.element_size(), dtype=tensor.dtype))
    return base.as_strided(tensor.shape, tensor.stride(), tensor.storage_offset())


@pytest.mark.parametrize("mode", ["meta", "fake"])
@pytest.mark.parametrize("name", sorted(set(CASES) - _CASES_NEEDING_DATA))
def test_fakes_raise_the_ops_value_errors(name, mode):
    """The fake implementations run the op's own tensor checks: a meta call or one under a caller's
    FakeTensorMode raises the ValueError, with the message, that the eager call does; the prefill's
    and the decode's op alike (while torch.compile traces, the op raises it when the graph runs)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    fake_mode = FakeTensorMode()
    convert = (lambda t: t.to("meta")) if mode == "meta" else fake_mode.from_tensor
    overrides, message = CASES[name]
    base = base_args()
    base["indices"] = torch.randint(0, 256, (T, TOPK), dtype=torch.int32)
    args = {k: _without_data(v, convert) for k, v in dict(base, **overrides).items()}
    positional = pop_positional(args)
    with fake_mode if mode == "fake" else contextlib.nullcontext():
        with pytest.raises(ValueError, match=message):
            torch.ops.cake.sparse_mla_prefill(*positional, **args)
        if name not in ("too_many_chunks", "too_many_chunks_split", "heads_8", "heads_24"):  # the decode takes these
            with pytest.raises(ValueError, match=message):
                torch.ops.cake.sparse_mla_decode(*positional, **args)


def test_fakes_accept_what_needs_data_to_reject():
    """A misaligned view passes the fakes (its data pointer is unknown there) and the decode's fake
    takes the 8 heads and the chunk counts its op takes: the fakes reject no more than the ops."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    fake_mode = FakeTensorMode()
    for name in ("q_misaligned", "output_misaligned", "cache_misaligned"):
        args = {k: _without_data(v, fake_mode.from_tensor) for k, v in dict(base_args(), **CASES[name][0]).items()}
        with fake_mode:
            raw_op(base=args)
    # A head_tiles among H's choices: whether the GPU's shared memory fits it is the op's to say.
    args = {k: _without_data(v, fake_mode.from_tensor) for k, v in base_args().items()}
    with fake_mode:
        raw_op(base=dict(args, head_tiles=2))
    for overrides in (CASES["heads_8"][0], CASES["too_many_chunks"][0]):
        args = {k: _without_data(v, fake_mode.from_tensor) for k, v in dict(base_args(), **overrides).items()}
        if "q" in overrides:
            args["output"] = _without_data(torch.zeros(T, 8, 512, dtype=torch.bfloat16), fake_mode.from_tensor)
            args["out_lse"] = _without_data(torch.zeros(T, 8), fake_mode.from_tensor)
        with fake_mode:
            torch.ops.cake.sparse_mla_decode(*pop_positional(args), **args)


def test_prefill_under_compile_leaves_a_tile_the_device_rejects_to_the_op(monkeypatch):
    """A head_tiles among H's choices that the device's planner still rejects (more shared memory than
    the GPU has; simulated here by a planner that rejects head_tiles = 2) does not fail the trace:
    the compiled graph reaches the op, which decides (a GPU whose shared memory is short raises the
    eager ValueError there). Eager, the planner's ValueError reaches the caller."""
    from torch_ops import planner
    real = planner._cached_plan_steps

    def rejecting(device, num_heads, head_tiles, override_key):
        if head_tiles == 2:
            raise ValueError("head_tiles: expected at most 1 on this device (a test's planner)")
        return real(device, num_heads, head_tiles, override_key)

    monkeypatch.setattr(planner, "_cached_plan_steps", rejecting)
    base = base_args()
    base["indices"] = torch.randint(0, 256, (T, TOPK), dtype=torch.int32)
    q, cache, indices, output, out_lse = (base[k] for k in ("q", "kv_cache", "indices", "output", "out_lse"))

    def prefill(q, cache, indices, output, out_lse):
        return torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(q, cache, indices, output, out_lse, 0.1,
                                                                  head_tiles=2)

    with pytest.raises(ValueError, match="a test's planner"):
        prefill(q, cache, indices, output, out_lse)
    torch._dynamo.reset()
    plan = torch.compile(prefill, fullgraph=True, backend="eager")(q, cache, indices, output, out_lse)
    # The CPU op's own planner takes head_tiles = 2 for H = 32, so the call ran: every element written.
    assert plan == {"head_tiles": 2, "num_ctas": None, "grid_size": None, "kernel": None}
    assert not torch.isnan(output.float()).any() and not torch.isnan(out_lse).any()
