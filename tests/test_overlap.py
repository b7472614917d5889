"""A tensor an op writes may not share memory with another tensor of the call (docs/contract.md,
section 10): the prefill's output and out_lse, the decode's scratch as well, and the cache writers'
cache. Each case carves the two tensors from one buffer (one storage, or separate storages made by
torch.frombuffer); the call raises ValueError naming both and leaves the buffer as it was. Tensors
carved side by side from one buffer, apart, are accepted and give the results of separate tensors."""
import pytest
import torch

import torch_ops

T, H, TOPK, PAGES = 3, 32, 100, 4
SLOTS = PAGES * 64


def call_args():
    """A prefill's tensors, each of its own (a packed cache, valid indices, random q, NaN outputs)."""
    latent = torch.randn(PAGES, 64, 512).to(torch.bfloat16)
    return dict(
        q=torch.randn(T, H, 512).to(torch.bfloat16),
        kv_cache=torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent, kv_layout="HND").view(PAGES, 64, 384),
        indices=torch.randint(0, SLOTS, (T, TOPK), dtype=torch.int32),
        output=torch.full((T, H, 512), float("nan"), dtype=torch.bfloat16),
        out_lse=torch.full((T, H), float("nan")),
        topk_length=torch.tensor([TOPK, 50, 7], dtype=torch.int32),
        attn_sink=torch.randn(H),
        extra_kv_cache=torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent[:2], kv_layout="HND").view(2, 64, 384),
        extra_indices=torch.randint(0, 128, (T, 8), dtype=torch.int32),
        extra_topk_length=torch.tensor([8, 3, 0], dtype=torch.int32),
    )


def nbytes(tensor):
    return tensor.numel() * tensor.element_size()


def carve(buffer, offset, like):
    """A view of `buffer` (uint8) from byte `offset` with `like`'s shape and dtype, holding its values."""
    view = buffer[offset:offset + nbytes(like)].view(like.dtype).view(like.shape)
    view.copy_(like)
    return view


def two_in_one(first, second):
    """`first` and `second` both from byte 0 of one buffer on first's device: they share their
    first bytes (second's values over first's there)."""
    buffer = torch.zeros(max(nbytes(first), nbytes(second)) + 64, dtype=torch.uint8, device=first.device)
    a = carve(buffer, 0, first)
    b = carve(buffer, 0, second)
    return buffer, a, b


def share_memory(args, written, other):
    """args[other] and args[written] replaced by views from byte 0 of one buffer (two_in_one);
    returns the buffer and a copy of its bytes, to check that a refused call wrote nothing."""
    buffer, args[other], args[written] = two_in_one(args[other], args[written])
    return buffer, buffer.clone()


def split_positional(args):
    """The call's positional tensors (in order) and its keyword arguments."""
    args = dict(args)
    return [args.pop(k) for k in ("q", "kv_cache", "indices", "output", "out_lse")], args


def prefill(args, op):
    positional, args = split_positional(args)
    if op == "raw":
        return torch.ops.cake.sparse_mla_prefill(*positional, 0.1, **args)
    return torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(*positional, 0.1, **args)


# (written, other): every pair the prefill checks.
READ = ["q", "kv_cache", "indices", "topk_length", "attn_sink", "extra_kv_cache", "extra_indices",
        "extra_topk_length"]
PAIRS = [("output", "out_lse")] + [(w, r) for w in ("output", "out_lse") for r in READ]


@pytest.mark.parametrize("op", ["raw", "api"])
@pytest.mark.parametrize("written,other", PAIRS)
def test_prefill_rejects_a_written_tensor_sharing_memory(written, other, op):
    args = call_args()
    buffer, before = share_memory(args, written, other)
    with pytest.raises(ValueError, match=f"{written}: shares memory with {other}, which the op reads or writes"):
        prefill(args, op)
    assert torch.equal(buffer, before), "nothing may be written before validation passes"


def test_prefill_rejects_output_that_is_q():
    args = call_args()
    args["output"] = args["q"]
    with pytest.raises(ValueError, match="output: shares memory with q"):
        prefill(args, "api")


def test_tensors_apart_in_one_buffer_are_accepted_and_match():
    """output, out_lse and q carved one after another from one buffer, apart: the same results as
    separate tensors."""
    args = call_args()
    prefill(args, "api")
    expected = (args["output"].clone(), args["out_lse"].clone())
    together = dict(args)
    buffer = torch.zeros(nbytes(args["q"]) + nbytes(args["output"]) + nbytes(args["out_lse"]) + 64, dtype=torch.uint8)
    together["q"] = carve(buffer, 0, args["q"])
    together["output"] = carve(buffer, nbytes(args["q"]), torch.full_like(args["output"], float("nan")))
    together["out_lse"] = carve(buffer, nbytes(args["q"]) + nbytes(args["output"]),
                                torch.full_like(args["out_lse"], float("nan")))
    prefill(together, "api")
    assert torch.equal(together["output"], expected[0])
    assert torch.equal(together["out_lse"], expected[1])


def test_a_padded_cache_view_counts_its_whole_span():
    """A cache view with padded pages is not dense, so whether a tensor shares one of its bytes is
    not told element by element: out_lse inside the view's span (in the padding between two
    pages) is rejected, and out_lse past the span is accepted."""
    args = call_args()
    page_stride = 64 * 384 + 1024  # 1 KB of padding after each page
    buffer = torch.zeros(PAGES * page_stride + 2048, dtype=torch.uint8)
    cache = buffer[:PAGES * page_stride].view(PAGES, page_stride)[:, :64 * 384].view(PAGES, 64, 384)
    cache.copy_(args["kv_cache"])
    assert not cache.is_contiguous()
    inside = carve(buffer, 64 * 384 + 16, args["out_lse"])  # in page 0's padding
    with pytest.raises(ValueError, match="out_lse: shares memory with kv_cache"):
        prefill(dict(args, kv_cache=cache, out_lse=inside), "api")
    past = carve(buffer, PAGES * page_stride, args["out_lse"])
    prefill(dict(args, kv_cache=cache, out_lse=past), "api")
    assert torch.isfinite(past).all()


def decode_args(num_splits=2):
    args = call_args()
    args["indices"] = torch.randint(0, SLOTS, (T, 256), dtype=torch.int32)
    args["topk_length"] = torch.tensor([256, 100, 7], dtype=torch.int32)
    args["mid_out"] = torch.empty(num_splits, T, H, 512)
    args["mid_lse"] = torch.empty(num_splits, T, H)
    return args


def decode(args):
    positional, args = split_positional(args)
    return torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_decode(*positional, 0.1, num_splits=2, **args)


@pytest.mark.parametrize("written,other", [("mid_out", "mid_lse"), ("mid_out", "output"), ("mid_lse", "out_lse"),
                                           ("mid_out", "q"), ("mid_lse", "kv_cache"), ("mid_out", "indices")])
def test_decode_rejects_scratch_sharing_memory(written, other):
    args = decode_args()
    buffer, before = share_memory(args, written, other)
    with pytest.raises(ValueError, match=f"{written}: shares memory with {other}"):
        decode(args)
    assert torch.equal(buffer, before)


def test_decode_rejects_outputs_sharing_memory_and_takes_its_own_scratch():
    args = decode_args()
    buffer, a, b = two_in_one(args["out_lse"], args["output"])
    with pytest.raises(ValueError, match="output: shares memory with out_lse"):
        decode(dict(args, out_lse=a, output=b))
    # The scratch the library allocates: two tensors apart.
    mid_out, mid_lse = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch(T, H, 256, device="cpu")
    decode(dict(args, mid_out=mid_out, mid_lse=mid_lse))
    assert torch.isfinite(args["out_lse"]).all()


def test_writers_reject_latent_rows_inside_the_cache():
    latent = torch.randn(PAGES, 64, 512).to(torch.bfloat16)
    buffer = torch.zeros(PAGES * 64 * 1024 + 2048, dtype=torch.uint8)
    cache = buffer[:PAGES * 64 * 384].view(PAGES, 64, 384)
    inside = carve(buffer, 1024, latent)  # starts in page 0 of the cache
    before = buffer.clone()
    with pytest.raises(ValueError, match="cache: shares memory with latent_kv"):
        torch.ops.cake.nvfp4_pack_cache(inside, cache)
    rows = inside.view(-1, 512)[:5]
    with pytest.raises(ValueError, match="cache: shares memory with latent_kv"):
        torch.ops.cake.nvfp4_append_cache(rows, torch.arange(5, dtype=torch.int32), cache)
    assert torch.equal(buffer, before)
    torch.ops.cake.nvfp4_pack_cache(latent, cache)  # rows of their own: accepted
    assert not torch.equal(buffer, before)


def over_one_buffer(buffer, offset, like):
    """A tensor whose storage is its own object (torch.frombuffer) over `buffer`'s bytes from
    `offset` (a bytearray), with `like`'s shape, dtype and values."""
    view = torch.frombuffer(buffer, dtype=torch.uint8, count=nbytes(like), offset=offset)
    view = view.view(like.dtype).view(like.shape)
    view.copy_(like)
    return view


def aligned_bytearray(size):
    """A bytearray and the first offset in it that is 64-byte aligned (the ops check alignment)."""
    buffer = bytearray(size + 64)
    address = torch.frombuffer(buffer, dtype=torch.uint8).data_ptr()
    return buffer, (-address) % 64


@pytest.mark.parametrize("written,other", [("output", "q"), ("output", "out_lse"), ("output", "kv_cache"),
                                           ("out_lse", "attn_sink")])
def test_separate_storages_over_the_same_bytes_are_rejected(written, other):
    """Two tensors made by torch.frombuffer over one buffer have storages that are separate objects:
    the check compares the bytes each spans, so sharing is found there too."""
    args = call_args()
    buffer, start = aligned_bytearray(max(nbytes(args[other]), nbytes(args[written])))
    args[other] = over_one_buffer(buffer, start, args[other])
    args[written] = over_one_buffer(buffer, start, args[written])
    assert args[other].untyped_storage().data_ptr() == args[written].untyped_storage().data_ptr()
    before = bytes(buffer)
    with pytest.raises(ValueError, match=f"{written}: shares memory with {other}"):
        prefill(args, "api")
    assert bytes(buffer) == before, "nothing may be written before validation passes"


def test_separate_storages_apart_are_accepted_and_match():
    """output and q over one buffer by torch.frombuffer, their bytes apart: the same results as
    separate tensors."""
    args = call_args()
    prefill(args, "api")
    expected = args["output"].clone()
    buffer, start = aligned_bytearray(nbytes(args["q"]) + nbytes(args["output"]))
    together = dict(args, q=over_one_buffer(buffer, start, args["q"]),
                    output=over_one_buffer(buffer, start + nbytes(args["q"]),
                                           torch.full_like(args["output"], float("nan"))))
    prefill(together, "api")
    assert torch.equal(together["output"], expected)


def test_separate_storages_sharing_decode_scratch_and_writer_rows_are_rejected():
    args = decode_args()
    buffer, start = aligned_bytearray(nbytes(args["mid_out"]))
    args["output"] = over_one_buffer(buffer, start, args["output"])
    args["mid_out"] = over_one_buffer(buffer, start, args["mid_out"])
    with pytest.raises(ValueError, match="mid_out: shares memory with output"):
        decode(args)
    latent = torch.randn(PAGES, 64, 512).to(torch.bfloat16)
    buffer, start = aligned_bytearray(nbytes(latent))
    cache = over_one_buffer(buffer, start, torch.zeros(PAGES, 64, 384, dtype=torch.uint8))
    rows = over_one_buffer(buffer, start, latent[0, :5])
    with pytest.raises(ValueError, match="cache: shares memory with latent_kv"):
        torch.ops.cake.nvfp4_append_cache(rows, torch.arange(5, dtype=torch.int32), cache)


def test_compiled_decode_on_scratch_carved_apart_matches_eager():
    """Under torch.compile, mid_out and mid_lse carved apart from one float32 buffer reach the op as
    copies (torch's functionalization of two views of one storage) that are written back: the
    results are eager's (docs/contract.md, section 10)."""
    args = decode_args()
    decode(args)
    expected = (args["output"].clone(), args["out_lse"].clone())
    mid_out, mid_lse = args["mid_out"], args["mid_lse"]
    buffer = torch.zeros(mid_out.numel() + mid_lse.numel() + 16)
    args["mid_out"] = buffer[:mid_out.numel()].view(mid_out.shape)
    args["mid_lse"] = buffer[mid_out.numel():mid_out.numel() + mid_lse.numel()].view(mid_lse.shape)
    args["output"] = torch.full_like(expected[0], float("nan"))
    args["out_lse"] = torch.full_like(expected[1], float("nan"))
    torch._dynamo.reset()
    torch.compile(decode, fullgraph=True)(args)
    assert torch.equal(args["output"], expected[0])
    assert torch.equal(args["out_lse"], expected[1])


@pytest.mark.parametrize("written,other", [("output", "out_lse"), ("out_lse", "q"), ("output", "kv_cache")])
def test_fakes_reject_views_of_one_storage_that_overlap(written, other):
    """Fake tensors have no data pointers, but views of one storage keep their storage offsets: the
    fakes compare those (FakeTensorMode, outside a trace, runs the op's whole checks)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    fake_mode = FakeTensorMode()
    args = call_args()
    share_memory(args, written, other)
    fake_args = {k: fake_mode.from_tensor(v) for k, v in args.items()}
    with fake_mode, pytest.raises(ValueError, match=f"{written}: shares memory with {other}"):
        prefill(fake_args, "raw")


def test_fakes_leave_separate_storages_to_the_op():
    """Two fakes of separate storages say nothing of where their bytes lie (torch.frombuffer over one
    buffer): the fakes accept them and only the op compares their pointers (as for alignment)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    fake_mode = FakeTensorMode()
    args = call_args()
    buffer, start = aligned_bytearray(max(nbytes(args["out_lse"]), nbytes(args["output"])))
    args["out_lse"] = over_one_buffer(buffer, start, args["out_lse"])
    args["output"] = over_one_buffer(buffer, start, args["output"])
    fake_args = {k: fake_mode.from_tensor(v) for k, v in args.items()}
    with fake_mode:
        prefill(fake_args, "raw")


@pytest.fixture(autouse=True)
def no_compile_caches():
    """torch's caches of compiled graphs off: the same code compiled for inputs of other aliasing
    can come back from them (seen with inductor)."""
    with torch._inductor.config.patch(force_disable_caches=True):
        yield


def compile_afresh(function, backend="aot_eager", dynamic=None):
    torch._dynamo.reset()
    return torch.compile(function, fullgraph=True, backend=backend, dynamic=dynamic)


def compiled(function, args, backend="aot_eager"):
    """function(args), compiled afresh."""
    return compile_afresh(function, backend)(args)


def share_one_dtype_buffer(args, written, other):
    """As share_memory, for two tensors of one dtype, as plain views of a buffer of that dtype:
    torch.compile takes those (views of one storage through different dtypes it refuses itself)."""
    first, second = args[other], args[written]
    buffer = torch.zeros(max(first.numel(), second.numel()) + 64, dtype=first.dtype)
    args[other] = buffer[:first.numel()].view(first.shape).copy_(first)
    args[written] = buffer[:second.numel()].view(second.shape).copy_(second)
    as_bytes = buffer.view(torch.uint8)  # (NaN values compare unequal; their bytes do not)
    return as_bytes, as_bytes.clone()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("written,other", [("output", "q"), ("out_lse", "attn_sink")])
def test_compiled_prefill_refuses_overlapping_views(written, other, backend):
    """Under torch.compile, views of one storage reach the op as copies (functionalization), so the
    op cannot see that they share bytes: the public function's check in the graph
    (cake::check_call_apart) raises the eager ValueError at run time, and nothing is written."""
    args = call_args()
    buffer, before = share_one_dtype_buffer(args, written, other)
    with pytest.raises(ValueError, match=f"{written}: shares memory with {other}, which the op reads or writes"):
        compiled(lambda a: prefill(a, "api"), args, backend)
    assert torch.equal(buffer, before)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("written,other", [("mid_out", "mid_lse"), ("mid_lse", "out_lse")])
def test_compiled_decode_refuses_overlapping_scratch(written, other, backend):
    args = decode_args()
    buffer, before = share_one_dtype_buffer(args, written, other)
    with pytest.raises(ValueError, match=f"{written}: shares memory with {other}"):
        compiled(decode, args, backend)
    assert torch.equal(buffer, before)


@pytest.mark.parametrize("written,other", [("output", "out_lse"), ("mid_out", "q")])
def test_compiled_call_on_views_of_one_storage_with_two_dtypes_fails_to_compile(written, other):
    """Views of one byte buffer as two dtypes: torch refuses to compile the call (its own error, not
    the op's), before anything runs."""
    args = decode_args()
    buffer, before = share_memory(args, written, other)
    with pytest.raises(Exception, match=r"aot_autograd\(\) does not yet handle"):
        compiled(decode, args)
    assert torch.equal(buffer, before)


def test_compiled_append_refuses_latent_rows_inside_the_cache():
    """Both views made inside the compiled function from one byte buffer (torch refuses a compiled
    call whose inputs are views of one storage with different dtypes before anything runs)."""
    latent = torch.randn(5, 512).to(torch.bfloat16)
    buffer = torch.zeros(PAGES * 64 * 384 + 2048, dtype=torch.uint8)
    before = buffer.clone()

    def append(a):
        buffer, latent = a
        rows = buffer[1024:1024 + latent.numel() * 2].view(torch.bfloat16).view(latent.shape)
        rows.copy_(latent)
        cache = buffer[:PAGES * 64 * 384].view(PAGES, 64, 384)
        torch_ops.nvfp4_quantize_append_sparse_mla_cache(rows, torch.arange(5, dtype=torch.int32), cache)

    with pytest.raises(ValueError, match="cache: shares memory with latent_kv"):
        compiled(append, (buffer, latent))
    assert torch.equal(buffer[:1024], before[:1024]) and torch.equal(buffer[2048 + 1024:], before[2048 + 1024:])


@pytest.mark.parametrize("dynamic", [None, True])
def test_compiled_prefill_checks_every_call_of_one_graph(dynamic):
    """The check runs in the graph at every call: with static shapes torch does not guard storage
    offsets, so the graph traced on views carved apart runs the views that meet too, and refuses
    them (with dynamic shapes torch recompiles for them, and the new graph refuses them)."""
    args = call_args()
    prefill(args, "api")
    expected = args["output"].clone()
    n = args["q"].numel()

    def views(offset):
        buffer = torch.zeros(2 * n + 64, dtype=torch.bfloat16)
        q = buffer[:n].view(args["q"].shape)
        q.copy_(args["q"])
        output = buffer[offset:offset + n].view(args["q"].shape).fill_(float("nan"))
        return dict(args, q=q, output=output, out_lse=torch.full_like(args["out_lse"], float("nan")))

    function = compile_afresh(lambda a: prefill(a, "api"), dynamic=dynamic)
    for offset in (n, n + 16):
        apart = views(offset)
        function(apart)
        assert torch.equal(apart["output"], expected)
    meeting = views(n - 16)
    with pytest.raises(ValueError, match="output: shares memory with q"):
        function(meeting)
    assert torch.isnan(meeting["output"][-1, -1, -16:].float()).all(), "nothing may run"


def test_compiled_prefill_traced_on_separate_tensors_refuses_views_that_meet_later():
    """A graph traced on separate allocations, then called with output and q views of one buffer
    that meet: refused (eager's ValueError), nothing written."""
    args = call_args()
    function = compile_afresh(lambda a: prefill(a, "api"))
    function(args)
    meeting = dict(args)
    buffer, before = share_one_dtype_buffer(meeting, "output", "q")
    with pytest.raises(ValueError, match="output: shares memory with q"):
        function(meeting)
    assert torch.equal(buffer, before)


def test_compiled_prefill_on_views_carved_apart_matches_eager():
    """q and output carved apart from one bf16 buffer: accepted, and the compiled call gives eager's
    results through functionalization's copies."""
    args = call_args()
    prefill(args, "api")
    expected = (args["output"].clone(), args["out_lse"].clone())
    buffer = torch.zeros(2 * args["q"].numel() + 64, dtype=torch.bfloat16)
    together = dict(args, q=buffer[:args["q"].numel()].view(args["q"].shape),
                    output=buffer[args["q"].numel():2 * args["q"].numel()].view(args["q"].shape),
                    out_lse=torch.full_like(expected[1], float("nan")))
    together["q"].copy_(args["q"])
    together["output"].fill_(float("nan"))
    compiled(lambda a: prefill(a, "api"), together)
    assert torch.equal(together["output"], expected[0])
    assert torch.equal(together["out_lse"], expected[1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("written,other", [("output", "out_lse"), ("out_lse", "kv_cache"), ("output", "q")])
def test_prefill_rejects_a_written_tensor_sharing_memory_cuda(written, other):
    args = {k: v.cuda() for k, v in call_args().items()}
    buffer, before = share_memory(args, written, other)
    with pytest.raises(ValueError, match=f"{written}: shares memory with {other}"):
        prefill(args, "api")
    torch.cuda.synchronize()
    assert torch.equal(buffer, before)
