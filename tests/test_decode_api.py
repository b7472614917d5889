"""The decode as a PyTorch operator and its entry points (docs/contract.md sections 1, 10, 12):
the schema, opcheck (CPU and CUDA), torch.compile(fullgraph=True) with no copies, the errors, no
backward, sparse_mla_attention's choice. The CUDA kernels' results: test_decode.py and
test_decode_cuda.py."""
import contextlib

import pytest
import torch
import torch._dynamo
from torch._inductor.utils import run_and_get_code

import torch_ops
from helpers import DEVICES, CacheSpec, assert_matches_reference, make_problem
from test_validation import CASES as PREFILL_CASES
from test_validation import _without_data, pop_positional
from test_validation import base_args as prefill_base_args

allocate = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch


def test_schema_marks_outputs_and_scratch_mutated():
    schema = torch.ops.cake.sparse_mla_decode.default._schema
    mutated = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    assert mutated == ["output", "out_lse", "mid_out", "mid_lse"]
    assert len(schema.returns) == 0
    assert torch._C._dispatch_has_kernel_for_dispatch_key("cake::sparse_mla_decode", "CPU")
    if torch.cuda.is_available():
        assert torch._C._dispatch_has_kernel_for_dispatch_key("cake::sparse_mla_decode", "CUDA")
    assert torch._C._dispatch_has_kernel_for_dispatch_key("cake::sparse_mla_decode", "Autograd")
    assert torch_ops.sparse_mla_decode is torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_decode


def decode_args(num_splits, extra=True, num_tokens=4, num_heads=24, device="cpu"):
    problem = make_problem(num_tokens=num_tokens, num_heads=num_heads, topk=300, main=CacheSpec(3, 48, "NHD", 16),
                           device=device, seed=3, extra=CacheSpec(9, 2) if extra else None, extra_topk=70 if extra else 0,
                           lengths="random", sink=1.0, lse_scale=0.5)
    output = torch.full((num_tokens, num_heads, 512), float("nan"), dtype=torch.bfloat16, device=device)
    out_lse = torch.full((num_tokens, num_heads), float("nan"), device=device)
    kwargs = dict(problem.kwargs, num_splits=num_splits, head_tiles=2)
    if num_splits > 1:
        kwargs["mid_out"], kwargs["mid_lse"] = allocate(num_tokens, num_heads, 300, 70 if extra else 0, device=device)
    return (problem.q, problem.kv_cache, problem.indices, output, out_lse, problem.sm_scale), kwargs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_splits", [1, 4])
@pytest.mark.parametrize("extra", [False, True])
def test_opcheck_decode(device, num_splits, extra):
    args, kwargs = decode_args(num_splits, extra, device=device)
    torch.library.opcheck(torch.ops.cake.sparse_mla_decode.default, args, kwargs,
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


def api_plan_call(q, kv_cache, indices, output, out_lse, mid_out, mid_lse, topk_length, attn_sink):
    plan = torch_ops.sparse_mla_decode(q, kv_cache, indices, output, out_lse, 0.05, topk_length=topk_length,
                                       attn_sink=attn_sink, mid_out=mid_out, mid_lse=mid_lse, lse_scale=0.5)
    return output, out_lse, plan["head_tiles"], plan["num_splits"], plan["chunks_per_block"]


def api_call(*inputs):
    return api_plan_call(*inputs)[:2]


def raw_call(q, kv_cache, indices, output, out_lse, mid_out, mid_lse, topk_length, attn_sink):
    torch.ops.cake.sparse_mla_decode(q, kv_cache, indices, output, out_lse, 0.05, topk_length=topk_length,
                                     attn_sink=attn_sink, mid_out=mid_out, mid_lse=mid_lse, lse_scale=0.5, num_splits=3)
    return output, out_lse


def attention_call(q, kv_cache, indices, output, out_lse, mid_out, mid_lse, topk_length, attn_sink):
    torch_ops.sparse_mla_attention(q, kv_cache, indices, output, out_lse, 0.05, topk_length=topk_length,
                                   attn_sink=attn_sink, mid_out=mid_out, mid_lse=mid_lse, lse_scale=0.5)
    return output, out_lse


def compile_inputs(num_tokens, seed, num_heads=16, topk=300):
    problem = make_problem(num_tokens=num_tokens, num_heads=num_heads, topk=topk, main=CacheSpec(8, 64), device="cpu",
                           seed=seed, lengths="random", sink=1.0)
    mid_out, mid_lse = allocate(num_tokens, num_heads, topk)
    output = torch.full((num_tokens, num_heads, 512), float("nan"), dtype=torch.bfloat16)
    out_lse = torch.full((num_tokens, num_heads), float("nan"))
    return (problem.q, problem.kv_cache, problem.indices, output, out_lse, mid_out, mid_lse,
            problem.kwargs["topk_length"], problem.kwargs["attn_sink"])


@pytest.mark.parametrize("fn", [api_call, raw_call, attention_call], ids=["api", "op", "attention"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph(fn, dynamic, num_threads_8):
    """8 intra-op threads, so that the plan and the choice change with T (the op's 1 and 3 tokens
    decode with 5 and 2 splits; sparse_mla_attention takes the decode for 1 token and the prefill
    for 3 and 9, by select_kernel)."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, dynamic=dynamic)
    for num_tokens, seed in [(1, 1), (3, 2), (9, 4)]:
        inputs = compile_inputs(num_tokens, seed)
        eager_inputs = tuple(x.clone() for x in inputs)
        (out, lse), codes = run_and_get_code(compiled, *inputs)
        eager_out, eager_lse = fn(*eager_inputs)
        assert out.data_ptr() == inputs[3].data_ptr() and lse.data_ptr() == inputs[4].data_ptr()
        assert torch.equal(out.view(torch.int16), eager_out.view(torch.int16)) and torch.equal(lse, eager_lse)
        for scratch, eager_scratch in zip(inputs[5:7], eager_inputs[5:7]):  # the same partials, the same unused splits
            torch.testing.assert_close(scratch, eager_scratch, rtol=0, atol=0, equal_nan=True)
        code = "\n".join(codes)
        selected = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_select_kernel(
            num_tokens=num_tokens, num_heads=16, topk=300, num_sms=8)
        if fn is not attention_call or selected == "decode":
            assert "cake.sparse_mla_decode" in code
        assert "copy_" not in code, code
    assert torch._dynamo.explain(fn)(*compile_inputs(2, 3)).graph_break_count == 0


def test_compiled_decode_one_graph_over_the_plans_steps(num_threads_16):
    """16 intra-op threads, 1024 candidates: the planned split count changes at several token
    counts between 2 and 19 (the split rule's steps), yet a dynamic-shape graph is compiled once
    (no guard per step: the plan is read off the steps symbolically and the op plans itself), and
    every call gives the eager call's bits, written splits and returned plan."""
    from torch._dynamo.testing import CompileCounter
    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(api_plan_call, backend=counter, fullgraph=True, dynamic=True)
    plans = set()
    for num_tokens in range(2, 20):
        inputs = compile_inputs(num_tokens, num_tokens, topk=1024)
        eager_inputs = tuple(x.clone() for x in inputs)
        out, lse, *plan = compiled(*inputs)
        eager_out, eager_lse, *eager_plan = api_plan_call(*eager_inputs)
        assert plan == eager_plan
        plans.add(tuple(plan))
        assert torch.equal(out.view(torch.int16), eager_out.view(torch.int16)) and torch.equal(lse, eager_lse)
        for scratch, eager_scratch in zip(inputs[5:7], eager_inputs[5:7]):
            torch.testing.assert_close(scratch, eager_scratch, rtol=0, atol=0, equal_nan=True)
    assert len(plans) >= 3, plans  # the steps this test is about
    assert counter.frame_count == 1


@pytest.mark.parametrize("fn", [api_plan_call, attention_call], ids=["decode", "attention"])
def test_compiled_decode_one_graph_per_chunk_count_of_the_lists(fn, num_threads_8):
    """The plans depend on a list's width only through its chunks of 64: under dynamic shapes a
    graph is specialised to the chunk count, so widths growing a token at a time within a chunk
    (a serving loop's) share one graph, and a width in the next chunk compiles one more; every
    call gives the eager call's bits (and, for the decode, its plan)."""
    from torch._dynamo.testing import CompileCounter
    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(fn, backend=counter, fullgraph=True, dynamic=True)
    for topk in (100, 101, 102, 127, 128, 129):
        inputs = compile_inputs(2, topk, topk=topk)
        eager_inputs = tuple(x.clone() for x in inputs)
        got, expected = compiled(*inputs), fn(*eager_inputs)
        assert torch.equal(got[0].view(torch.int16), expected[0].view(torch.int16)) and torch.equal(got[1], expected[1])
        assert tuple(got[2:]) == tuple(expected[2:])
    assert counter.frame_count == 2  # widths 65..128, then 129..192


def _threads(count):
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def num_threads_8():
    yield from _threads(8)


@pytest.fixture
def num_threads_16():
    yield from _threads(16)


@pytest.mark.parametrize("num_tokens,num_heads,topk,expected", [(1, 64, 300, "decode"), (1, 16, 300, "decode"),
                                                                (3, 16, 300, "decode"), (4, 16, 300, "prefill"),
                                                                (3, 64, 300, "decode"), (4, 64, 300, "prefill"), (40, 8, 100, "decode"),
                                                                (40, 16, 1100, "decode"), (3, 128, 64, "prefill")])
def test_attention_runs_the_selected_op(num_tokens, num_heads, topk, expected, num_threads_8):
    """On 8 "SMs": the decode for T * H / 16 work items below 16 (H = 64, 128: 200%) or below 4
    (the head counts here other than 80 and 96: 50%), 8 heads or more than 16 chunks."""
    assert torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_select_kernel(
        num_tokens=num_tokens, num_heads=num_heads, topk=topk, num_sms=8) == expected
    problem = make_problem(num_tokens=num_tokens, num_heads=num_heads, topk=topk, main=CacheSpec(20, 64), device="cpu",
                           seed=num_tokens, lengths="random", sink=1.0, lse_scale=0.5)
    mid_out, mid_lse = allocate(num_tokens, num_heads, topk)
    output = torch.full((num_tokens, num_heads, 512), float("nan"), dtype=torch.bfloat16)
    out_lse = torch.full((num_tokens, num_heads), float("nan"))
    result = torch_ops.sparse_mla_attention(problem.q, problem.kv_cache, problem.indices, output, out_lse,
                                            problem.sm_scale, mid_out=mid_out, mid_lse=mid_lse, **problem.kwargs)
    assert result["op"] == expected
    if expected == "decode":
        assert set(result["plan"]) == {"head_tiles", "num_splits", "chunks_per_block"}
    else:
        assert result["plan"]["kernel"] == "cpu"
    assert_matches_reference(output, out_lse, *problem.reference())


def base_args():
    """A valid decode call that needs its scratch: the prefill's validation shape (T = 3, H = 32,
    topk 100: 2 chunks) with 2 forced splits."""
    args = prefill_base_args()
    args["indices"] = torch.randint(0, 256, (3, 100), dtype=torch.int32, generator=torch.Generator().manual_seed(5))
    args.update(mid_out=torch.full((2, 3, 32, 512), float("nan")), mid_lse=torch.full((2, 3, 32), float("nan")),
                num_splits=2)
    return args


DECODE_CASES = {
    "no_scratch": (dict(mid_out=None, mid_lse=None), r"mid_out/mid_lse: required when the plan splits \(num_splits = 2\)"),
    "mid_out_alone": (dict(mid_lse=None), "mid_lse: required when mid_out is given"),
    "mid_lse_alone": (dict(mid_out=None), "mid_out: required when mid_lse is given"),
    "mid_out_dtype": (dict(mid_out=torch.zeros(2, 3, 32, 512, dtype=torch.float64)), "mid_out: expected dtype float32"),
    "mid_out_shape": (dict(mid_out=torch.zeros(2, 3, 32, 256)), r"mid_out: expected shape \[S, 3, 32, 512\]"),
    "mid_out_tokens": (dict(mid_out=torch.zeros(2, 4, 32, 512)), r"mid_out: expected shape \[S, 3, 32, 512\]"),
    "mid_out_splits": (dict(mid_out=torch.zeros(1, 3, 32, 512)), "mid_out: expected at least 2 splits"),
    "mid_out_contiguous": (dict(mid_out=torch.zeros(2, 3, 512, 32).transpose(2, 3)), "mid_out: expected a contiguous"),
    "mid_out_aligned": (dict(mid_out=torch.zeros(2 * 3 * 32 * 512 + 1)[1:].view(2, 3, 32, 512)),
                        r"mid_out: expected a 16-byte aligned data pointer \(storage offset 1\)"),
    "mid_lse_shape": (dict(mid_lse=torch.zeros(2, 3 * 32)), r"mid_lse: expected shape \[S, 3, 32\]"),
    "mid_lse_splits": (dict(mid_lse=torch.zeros(1, 3, 32)), "mid_lse: expected at least 2 splits"),
    "mid_lse_dtype": (dict(mid_lse=torch.zeros(2, 3, 32, dtype=torch.bfloat16)), "mid_lse: expected dtype float32"),
    "mid_out_device": (dict(mid_out=torch.zeros(2, 3, 32, 512, device="meta")), "mid_out: expected a tensor on cpu"),
    "num_splits_0": (dict(num_splits=0), "num_splits: expected 1 to 2"),
    "num_splits_3": (dict(num_splits=3), "num_splits: expected 1 to 2"),
    "num_splits_max": (dict(max_splits=1), "num_splits: expected 1 to 1"),
    "max_splits_0": (dict(max_splits=0), "max_splits: expected >= 1"),
    "one_split_of_33_chunks": (dict(indices=torch.zeros(3, 2049, dtype=torch.int32), num_splits=1),
                               r"num_splits: expected 2 to 16 for 33 chunks of 64 candidates \(at most 32 chunks per "
                               r"split"),
    "too_many_chunks": (dict(indices=torch.zeros(3, 1025, dtype=torch.int32), max_splits=1, num_splits=None),
                        r"indices/extra_indices: expected .* <= 16 \* max_splits = 16 chunks, got 17 \+ 0"),
    "heads_12": (dict(q=torch.zeros(3, 12, 512, dtype=torch.bfloat16)), r"q: expected a head count in \{8, 16, ..., 128\}"),
    "heads_136": (dict(q=torch.zeros(3, 136, 512, dtype=torch.bfloat16)), "q: expected a head count"),
    "head_tiles": (dict(head_tiles=4), r"head_tiles: expected one of \[1, 2\] for H = 32 in the decode"),
}
# The checks shared with the prefill (attention_inputs.h), through the decode: same messages.
SHARED = sorted(name for name in PREFILL_CASES if not name.startswith(("heads_", "head_tiles", "too_many_chunks")))


@pytest.mark.parametrize("name", sorted(DECODE_CASES) + [f"shared:{name}" for name in SHARED])
def test_value_errors(name):
    overrides, message = PREFILL_CASES[name[len("shared:"):]] if name.startswith("shared:") else DECODE_CASES[name]
    for call in (torch_ops.sparse_mla_decode, torch.ops.cake.sparse_mla_decode):
        args = base_args()
        buffers = [args[key] for key in ("output", "out_lse", "mid_out", "mid_lse")]
        args.update(overrides)
        positional = pop_positional(args)
        with pytest.raises(ValueError, match=message):
            call(*positional, **args)
        for buffer in buffers:
            assert torch.isnan(buffer.float()).all(), "nothing may be written before validation passes"


# A data pointer's alignment needs the data; a meta scratch among meta tensors is on their device.
_DECODE_CASES_NEEDING_DATA = {"mid_out_aligned", "mid_out_device"}


@pytest.mark.parametrize("mode", ["meta", "fake"])
@pytest.mark.parametrize("name", sorted(set(DECODE_CASES) - _DECODE_CASES_NEEDING_DATA))
def test_fakes_raise_the_decodes_plan_and_scratch_errors(name, mode):
    """The decode's fake, on meta tensors and under a caller's FakeTensorMode, raises the eager
    call's ValueError for its own arguments too: head_tiles, an explicit num_splits, the scratch
    (the split count it must hold where num_splits is given)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    fake_mode = FakeTensorMode()
    convert = (lambda t: t.to("meta")) if mode == "meta" else fake_mode.from_tensor
    overrides, message = DECODE_CASES[name]
    args = {k: _without_data(v, convert) for k, v in dict(base_args(), **overrides).items()}
    positional = pop_positional(args)
    with fake_mode if mode == "fake" else contextlib.nullcontext():
        with pytest.raises(ValueError, match=message):
            torch.ops.cake.sparse_mla_decode(*positional, **args)


def test_decode_fake_leaves_the_planned_split_count_to_the_op():
    """Without num_splits the split count is the device's planner's: the fake accepts a call without
    scratch (the op may plan one split) and a scratch of any split count in its form, and still
    rejects a scratch of the wrong form."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    fake_mode = FakeTensorMode()
    for overrides, message in ((dict(mid_out=None, mid_lse=None), None),
                               (dict(mid_out=torch.zeros(1, 3, 32, 512), mid_lse=torch.zeros(1, 3, 32)), None),
                               (dict(mid_lse=torch.zeros(1, 3, 32, dtype=torch.float64)), "mid_lse: expected dtype float32")):
        args = {k: _without_data(v, fake_mode.from_tensor) for k, v in dict(base_args(), num_splits=None, **overrides).items()}
        positional = pop_positional(args)
        with fake_mode:
            if message is None:
                torch.ops.cake.sparse_mla_decode(*positional, **args)
            else:
                with pytest.raises(ValueError, match=message):
                    torch.ops.cake.sparse_mla_decode(*positional, **args)


def _value_error(call):
    try:
        call()
    except ValueError as error:
        return str(error)
    return None


@pytest.mark.parametrize("num_tokens", [0, 3])
def test_decode_fake_says_what_the_op_says_or_nothing(num_tokens):
    """Against the eager CPU op on a grid of split counts, scratch sizes and scratch defects: where
    the op accepts, the meta call accepts; where it raises, the meta call raises the same message,
    or (only where the answer depends on the device's planned split count: no num_splits, T > 0)
    nothing. With num_splits given, or T = 0, the meta call always says what the op says."""
    cases = 0
    for topk, heads in ((100, 32), (2049, 8)):
        for num_splits in (None, 1, 2, 3, 40):
            for splits in (None, 0, 1, 2, 3, 80):
                for defect in (None, "contiguous", "lse_dtype"):
                    if splits is None and defect is not None:
                        continue
                    args = dict(q=torch.zeros(num_tokens, heads, 512, dtype=torch.bfloat16),
                                kv_cache=torch.zeros(4, 64, 384, dtype=torch.uint8),
                                indices=torch.zeros(num_tokens, topk, dtype=torch.int32),
                                output=torch.zeros(num_tokens, heads, 512, dtype=torch.bfloat16),
                                out_lse=torch.zeros(num_tokens, heads), sm_scale=0.05, num_splits=num_splits)
                    if splits is not None:
                        shape = (splits, num_tokens, heads, 512)
                        args["mid_out"] = (torch.zeros(shape[:2] + (512, heads)).transpose(2, 3)
                                           if defect == "contiguous" else torch.zeros(shape))
                        args["mid_lse"] = torch.zeros(shape[:3], dtype=torch.float64 if defect == "lse_dtype"
                                                      else torch.float32)

                    def call(convert):
                        converted = {k: convert(v) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
                        positional = pop_positional(converted)
                        return _value_error(lambda: torch.ops.cake.sparse_mla_decode(*positional, **converted))
                    eager = call(lambda t: t)
                    fake = call(lambda t: t.to("meta"))
                    context = f"topk {topk}, H {heads}, num_splits {num_splits}, S {splits}, {defect}"
                    if eager is None or num_splits is not None or num_tokens == 0:
                        assert fake == eager, context
                    else:
                        assert fake in (None, eager), context
                    cases += 1
    assert cases > 100


def test_base_args_are_valid_and_one_split_needs_no_scratch():
    args = base_args()
    positional = pop_positional(args)
    assert torch_ops.sparse_mla_decode(*positional, **args) == {"head_tiles": 2, "num_splits": 2, "chunks_per_block": 1}
    args.update(mid_out=None, mid_lse=None, num_splits=1)
    assert torch_ops.sparse_mla_decode(*positional, **args) == {"head_tiles": 2, "num_splits": 1, "chunks_per_block": 2}
    # 33 chunks cannot run in one split (32 at most): the message does not offer num_splits=1. The
    # planned split count depends on the CPU's thread count, so it is asked of the planner.
    wide = dict(indices=torch.zeros(3, 2049, dtype=torch.int32), mid_out=None, mid_lse=None, num_splits=None)
    planned = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode(num_tokens=3, num_heads=32, topk=2049,
                                                                     device="cpu")["num_splits"]
    assert planned >= 2
    with pytest.raises(ValueError, match=rf"required when the plan splits \(num_splits = {planned}\); allocate them with "
                                         r"cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch$"):
        torch_ops.sparse_mla_decode(*positional[:2], wide.pop("indices"), *positional[3:], **wide)


def test_lists_of_17_to_32_chunks_run_in_one_split_when_asked():
    """A split holds up to 32 chunks: where the plan splits lists of 32 chunks, the message for the
    missing scratch offers num_splits=1, and num_splits=1 runs them without scratch (33 chunks
    cannot: the value error "one_split_of_33_chunks")."""
    args = base_args()
    positional = pop_positional(args)
    positional[2] = torch.randint(0, 256, (3, 2048), dtype=torch.int32, generator=torch.Generator().manual_seed(6))
    args.update(mid_out=None, mid_lse=None, num_splits=None)
    before = torch.get_num_threads()
    torch.set_num_threads(24)  # the CPU planner's SMs: 3 work items of 32 chunks plan several splits
    try:
        planned = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode(num_tokens=3, num_heads=32, topk=2048,
                                                                         device="cpu")["num_splits"]
        assert planned >= 2
        with pytest.raises(ValueError, match=rf"required when the plan splits \(num_splits = {planned}\); allocate "
                                             r"them with cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch or "
                                             r"pass num_splits=1$"):
            torch_ops.sparse_mla_decode(*positional, **args)
    finally:
        torch.set_num_threads(before)
    args.update(num_splits=1)
    assert torch_ops.sparse_mla_decode(*positional, **args) == {"head_tiles": 2, "num_splits": 1, "chunks_per_block": 32}


def test_scratch_form_is_checked_before_any_split_count():
    """Without num_splits the fake cannot know the planned count, so for a mid_out of few splits it
    checks only the two buffers' device, dtype and shape: it still rejects a mid_lse of the wrong
    form, with the message the op gives (the op checks both buffers' form before either's count)."""
    args = base_args()
    args.update(num_splits=None, mid_out=torch.zeros(1, 3, 32, 512))
    for bad, message in ((torch.zeros(7, dtype=torch.float64), "mid_lse: expected dtype float32"),
                         (torch.zeros(1, 3, 31), r"mid_lse: expected shape \[S, 3, 32\]")):
        for convert in (lambda t: t, lambda t: _without_data(t, lambda x: x.to("meta"))):  # eager CPU, then the fake
            call = {k: convert(v) for k, v in dict(args, mid_lse=bad).items()}
            positional = pop_positional(call)
            with pytest.raises(ValueError, match=message):
                torch.ops.cake.sparse_mla_decode(*positional, **call)
    call = {k: _without_data(v, lambda x: x.to("meta")) for k, v in args.items()}
    call["mid_lse"] = torch.zeros(1, 3, 32)  # on the CPU, the rest on meta: the fake
    positional = pop_positional(call)
    with pytest.raises(ValueError, match="mid_lse: expected a tensor on meta"):
        torch.ops.cake.sparse_mla_decode(*positional, **call)


def test_sparse_mla_attention_names_a_malformed_list_at_any_head_count():
    """A malformed candidate list is named whatever the head count (at H = 8 or 24, which only the
    decode takes, not q)."""
    for heads, name in ((8, "indices"), (24, "extra_indices"), (16, "indices")):
        args = prefill_base_args()
        args.update(q=torch.zeros(3, heads, 512, dtype=torch.bfloat16),
                    output=torch.zeros(3, heads, 512, dtype=torch.bfloat16), out_lse=torch.zeros(3, heads))
        if name == "indices":
            args["indices"] = torch.zeros(100, dtype=torch.int32)
        else:
            args.update(extra_kv_cache=args["kv_cache"], extra_indices=torch.zeros(100, dtype=torch.int32))
        positional = pop_positional(args)
        with pytest.raises(ValueError, match=rf"^{name}: expected shape \[T, topk\]"):
            torch_ops.sparse_mla_attention(*positional, **args)


def test_inputs_requiring_grad_raise_clearly():
    args = base_args()
    positional = pop_positional(args)
    q = positional[0].clone().requires_grad_()
    for fn, name in [(torch_ops.sparse_mla_decode, "cake_sparse_mla_sm120_dsv4_nvfp4_decode"),
                     (torch.ops.cake.sparse_mla_decode, "cake::sparse_mla_decode"),
                     (torch_ops.sparse_mla_attention, "sparse_mla_attention")]:
        kwargs = {k: v for k, v in args.items() if k != "num_splits" or fn is not torch_ops.sparse_mla_attention}
        with pytest.raises(NotImplementedError, match=f"{name}: q requires grad, but this operat(ion|or) has no backward"):
            fn(q, *positional[1:], **kwargs)
    with torch.no_grad():
        torch_ops.sparse_mla_decode(q, *positional[1:], **args)
    assert not torch.isnan(positional[3].float()).any()


def test_planners_ask_the_cpp_planner_once_per_device_and_shape(monkeypatch):
    """The decode and prefill calls read their plans off steps the C++ planner computes once per
    device, shape and kernel override (an eager decode step would otherwise plan every token count
    up to the SM count on each call, more host time than its kernels take on a GPU); the CPU's key
    holds its intra-op threads, which the planner counts as SMs."""
    from torch_ops import _C, decode_planner, planner

    calls = []
    real = _C.decode_plan_steps

    def counted(*args, **kwargs):
        calls.append(kwargs.get("device"))
        return real(*args, **kwargs)

    monkeypatch.setattr(_C, "decode_plan_steps", counted)
    decode_planner._cached_decode_plan_steps.cache_clear()
    threads = torch.get_num_threads()
    cpu = torch.device("cpu")
    try:
        first = decode_planner.decode_plan_for_call(cpu, 3, 64, 1024, 0, 16, None, None)
        assert decode_planner.decode_plan_for_call(cpu, 5, 64, 1024, 0, 16, None, None) is not None
        assert decode_planner.decode_plan_for_call(cpu, 3, 64, 1024, 0, 16, None, None) == first
        assert len(calls) == 1
        decode_planner.decode_plan_for_call(cpu, 3, 64, 2048, 0, 16, None, None)  # another shape
        assert len(calls) == 2
        # Widths of the same chunks share the entry (the plan depends on the chunks only).
        assert decode_planner.decode_plan_for_call(cpu, 3, 64, 1000, 0, 16, None, None) == first
        assert decode_planner.decode_plan_for_call(cpu, 3, 64, 2000, 0, 16, None, None) is not None
        assert len(calls) == 2
        # A float where an int belongs reaches the C++ planner, which rejects it, whatever is cached.
        with pytest.raises(TypeError):
            decode_planner.decode_plan_for_call(cpu, 3, 64, 1024, 0, 16.0, None, None)
        assert len(calls) == 3
        torch.set_num_threads(threads + 1)  # other CPU "SMs": planned again
        decode_planner.decode_plan_for_call(cpu, 3, 64, 1024, 0, 16, None, None)
        assert len(calls) == 4
        torch_ops.set_prefill_kernel_override(kernel="portable")  # another override key
        decode_planner.decode_plan_for_call(cpu, 3, 64, 1024, 0, 16, None, None)
        assert len(calls) == 5
    finally:
        torch.set_num_threads(threads)
        torch_ops.set_prefill_kernel_override(kernel=None)
        decode_planner._cached_decode_plan_steps.cache_clear()
    planner._cached_plan_steps.cache_clear()
    steps = planner._plan_steps("cpu", None, 64, None, 0)
    assert planner._plan_steps("cpu", None, 64, None, 0) is steps
    assert planner._cached_plan_steps.cache_info().misses == 1


@pytest.mark.parametrize("max_splits", [2**59, 2**63 - 1])
def test_a_huge_max_splits_is_no_limit(max_splits):
    """16 * max_splits saturates instead of overflowing: the call plans and runs as with no limit."""
    args = base_args()
    positional = pop_positional(args)
    args.update(max_splits=max_splits, num_splits=None)
    plan = torch_ops.sparse_mla_decode(*positional, **args)
    assert plan == torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode(num_tokens=3, num_heads=32, topk=100,
                                                                           max_splits=max_splits, device="cpu")
    assert not torch.isnan(positional[3].float()).any()
    assert torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_scratch_bytes(3, 32, 100, max_splits=max_splits) > 0


@pytest.mark.parametrize("name,value", [("num_splits", 2.0), ("max_splits", None), ("max_splits", "16"),
                                        ("head_tiles", True), ("head_tiles", 1.5)])
def test_counts_that_are_not_ints_name_the_argument(name, value):
    args = base_args()
    buffers = [args[key] for key in ("output", "out_lse", "mid_out", "mid_lse")]
    positional = pop_positional(args)
    args[name] = value
    with pytest.raises(TypeError, match=f"{name}: expected an int, got {type(value).__name__}"):
        torch_ops.sparse_mla_decode(*positional, **args)
    for buffer in buffers:
        assert torch.isnan(buffer.float()).all()


@pytest.mark.parametrize("dynamic", [None, True])
def test_compiled_calls_with_explicit_counts_that_change(dynamic):
    """Under torch.compile an int argument that changes between calls arrives symbolic; the
    planners need a constant, so each value gets its own graph (as its plan does) instead of the
    trace failing. Same outputs as eager, prefill and decode."""
    g = torch.Generator().manual_seed(5)
    cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(torch.randn(2, 16, 512, generator=g).to(torch.bfloat16))
    q = torch.randn(3, 64, 512, generator=g).to(torch.bfloat16)
    indices = torch.randint(0, 32, (3, 70), generator=g, dtype=torch.int32)
    mid_out, mid_lse = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch(3, 64, 70)

    def decode(output, out_lse, num_splits, head_tiles):
        return torch_ops.sparse_mla_decode(q, cache, indices, output, out_lse, 0.05, num_splits=num_splits,
                                           head_tiles=head_tiles, mid_out=mid_out, mid_lse=mid_lse)

    def prefill(head_tiles):
        return torch_ops.sparse_mla_prefill_functional(q, cache, indices, 0.05, head_tiles=head_tiles)

    torch._dynamo.reset()
    compiled_decode = torch.compile(decode, fullgraph=True, backend="aot_eager", dynamic=dynamic)
    compiled_prefill = torch.compile(prefill, fullgraph=True, backend="aot_eager", dynamic=dynamic)
    for num_splits, head_tiles in ((1, 1), (2, 2), (2, 4), (1, 4)):
        output, out_lse = torch.full_like(q, float("nan")), torch.full((3, 64), float("nan"))
        expected, expected_lse = torch.full_like(q, float("nan")), torch.full((3, 64), float("nan"))
        plan = compiled_decode(output, out_lse, num_splits, head_tiles)
        assert plan == decode(expected, expected_lse, num_splits, head_tiles)
        assert (plan["num_splits"], plan["head_tiles"]) == (num_splits, head_tiles)
        assert torch.equal(output, expected) and torch.equal(out_lse, expected_lse)
        assert all(torch.equal(a, b) for a, b in zip(compiled_prefill(head_tiles), prefill(head_tiles)))
