"""The planner (docs/contract.md section 9): one C++ implementation (csrc/ops/prefill_plan.h), asked
by the op and, through torch_ops._C, by Python. The API returns the plan the op ran, which is what
the planner says for the device."""
import itertools

import pytest
import torch

import torch_ops
from helpers import DEVICES, HAS_CUDA, CacheSpec, assert_matches_reference, make_problem
from torch_ops import _C
from torch_ops.planner import plan_for_tokens

plan = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill
details = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill_details
choices = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill_head_tiles


@pytest.fixture
def num_threads():
    """Sets torch's intra-op threads (the CPU planner's "SMs") for one test, then restores them."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


def test_constants_come_from_the_extension():
    assert (_C.HEAD_DIM, _C.TOKEN_BYTES, _C.HEADS_PER_TILE, _C.CHUNK_SIZE, _C.MAX_CHUNKS) == (512, 384, 16, 64, 16)
    assert torch_ops.cache.TOKEN_BYTES is _C.TOKEN_BYTES and torch_ops.cache.HEAD_DIM is _C.HEAD_DIM


def test_head_tile_choices():
    assert choices(16) == (1,) and choices(48) == (1,) and choices(80) == (1,) and choices(112) == (1,)
    assert choices(32) == (1, 2) and choices(96) == (1, 2)
    assert choices(64) == (1, 2, 4) and choices(128) == (1, 2, 4)
    for bad in (0, 8, 24, 144, 256, -16):
        assert choices(bad) == ()


def test_hopper_table_takes_four_tiles_at_any_size():
    """Measured on the H200 (docs/planner.md): the Hopper kernel with 4 tiles beats the portable
    kernel's 1 and 2 tiles from T = 64 up, so its plan is 4 whenever H % 64 == 0."""
    for num_tokens in (1, 64, 4096):
        assert plan(num_tokens=num_tokens, num_heads=64, topk=512, num_sms=132, kernel="hopper") == 4
        assert plan(num_tokens=num_tokens, num_heads=128, topk=512, num_sms=132, kernel="hopper") == 4
    assert plan(num_tokens=1, num_heads=128, topk=512, num_sms=132, kernel="portable") == 1
    assert plan(num_tokens=64, num_heads=64, topk=512, num_sms=132, kernel="portable") == 2
    assert plan(num_tokens=1, num_heads=96, topk=512, num_sms=132, kernel="hopper") == 1


def test_planner_prefers_larger_tiles_with_more_tokens():
    assert plan(num_tokens=1, num_heads=128, topk=512, num_sms=132, kernel="portable") == 1
    assert plan(num_tokens=100000, num_heads=128, topk=512, num_sms=132, kernel="portable") == 4
    for h in (16, 48, 80, 112):
        assert plan(num_tokens=100000, num_heads=h, topk=64, num_sms=132, kernel="portable") == 1


def test_plan_details_kernel_and_grid():
    """The Hopper kernel serves 64 heads per item on a persistent grid of min(items, SMs) CTAs; on
    Hopper every other call runs the small-heads kernel (below); the portable kernel launches one
    CTA per item."""
    hopper = details(num_tokens=1000, num_heads=128, topk=512, num_sms=132, kernel="hopper")
    assert hopper == {"head_tiles": 4, "num_ctas": 2000, "grid_size": 132, "kernel": "hopper"}
    assert details(num_tokens=50, num_heads=64, topk=512, num_sms=132, kernel="hopper")["grid_size"] == 50
    # 96 heads: the Hopper table picks 2 tiles, and the small-heads kernel runs the call (two units
    # of 48 heads a token).
    assert details(num_tokens=1000, num_heads=96, topk=512, num_sms=132, kernel="hopper") == \
        {"head_tiles": 2, "num_ctas": 3000, "grid_size": 132, "kernel": "hopper_small"}
    assert details(num_tokens=1000, num_heads=96, topk=512, num_sms=132, kernel="portable") == \
        {"head_tiles": 2, "num_ctas": 3000, "grid_size": 3000, "kernel": "portable"}
    assert details(num_tokens=1000, num_heads=128, topk=512, num_sms=132, kernel="portable") == \
        {"head_tiles": 4, "num_ctas": 2000, "grid_size": 2000, "kernel": "portable"}
    assert details(num_tokens=0, num_heads=128, topk=512, num_sms=132, kernel="hopper")["grid_size"] == 0
    explicit = details(num_tokens=1000, num_heads=128, topk=512, num_sms=132, kernel="hopper", head_tiles=2)
    assert explicit == {"head_tiles": 2, "num_ctas": 4000, "grid_size": 132, "kernel": "hopper_small"}
    explicit = details(num_tokens=1000, num_heads=128, topk=512, num_sms=132, kernel="portable", head_tiles=2)
    assert explicit == {"head_tiles": 2, "num_ctas": 4000, "grid_size": 4000, "kernel": "portable"}


def test_plan_details_small_heads_on_hopper():
    """The Hopper family plans every call the 64-head kernel does not serve on the small-heads
    kernel (measured faster than the portable kernel at every shape, docs/hopper_small_kernel.md):
    a persistent grid over its own units (a token and G = 32 or 16 heads, the largest that
    divides the heads it runs), whatever head_tiles says; with H = 48 and 112 the 64-head kernel
    runs every head in blocks of 64, the last padded (ceil(H / 64) items a token); with H = 80 and
    96 it runs heads 0..63 in a grid of its own and the small-heads kernel the rest (one unit a
    token each: the grid is min(T, SMs)); the table is the Hopper one. kernel="hopper_small" names
    the same family."""
    small = dict(topk=512, num_sms=132, kernel="hopper")
    for num_tokens, num_heads, head_tiles, grid in (
            (1000, 16, 1, 132), (100, 16, 1, 100), (1000, 32, 2, 132), (50, 32, 1, 50), (100, 48, 1, 100),
            (200, 48, 1, 132), (40, 96, 2, 40), (40, 80, 1, 40), (30, 112, 1, 60), (8, 112, 1, 16), (0, 48, 1, 0),
            (1, 16, 1, 1), (200, 112, 1, 132)):
        assert details(num_tokens=num_tokens, num_heads=num_heads, **small) == \
            {"head_tiles": head_tiles, "num_ctas": num_tokens * num_heads // (16 * head_tiles), "grid_size": grid,
             "kernel": "hopper_small"}, (num_tokens, num_heads)
    # Head tiles do not change its units (T = 50, H = 32: 50 units of 32 heads either way).
    for head_tiles in (1, 2):
        assert details(num_tokens=50, num_heads=32, head_tiles=head_tiles, **small) == \
            {"head_tiles": head_tiles, "num_ctas": 100 // head_tiles, "grid_size": 50, "kernel": "hopper_small"}
    assert details(num_tokens=3, num_heads=64, head_tiles=2, **small) == \
        {"head_tiles": 2, "num_ctas": 6, "grid_size": 6, "kernel": "hopper_small"}
    # What the 64-head kernel serves stays there.
    for num_heads in (64, 128):
        assert details(num_tokens=1000, num_heads=num_heads, **small)["kernel"] == "hopper"
    # "hopper_small" is a second name of the Hopper family: the same plan everywhere.
    for num_tokens, num_heads in itertools.product((0, 1, 50, 1000), range(16, 129, 16)):
        for head_tiles in (None,) + choices(num_heads):
            assert details(num_tokens=num_tokens, num_heads=num_heads, head_tiles=head_tiles, **small) == \
                details(num_tokens=num_tokens, num_heads=num_heads, topk=512, num_sms=132, kernel="hopper_small",
                        head_tiles=head_tiles), (num_tokens, num_heads, head_tiles)
    assert _C.prefill_plan_table("hopper_small") == _C.prefill_plan_table("hopper")
    # The planner's step cache keeps the families apart.
    assert _C.prefill_plan_steps(48, None, num_sms=132, kernel="hopper")[-1][1:] == (1, "hopper_small", 3, 0, 132)
    assert _C.prefill_plan_steps(48, None, num_sms=132, kernel="hopper_small")[-1][1:] == (1, "hopper_small", 3, 0, 132)
    assert _C.prefill_plan_steps(48, None, num_sms=132, kernel="portable")[-1][1:] == (1, "portable", 3, 3, 0)


@pytest.mark.parametrize("kernel", ["portable", "hopper", "cpu", "hopper_small"])
def test_steps_reproduce_the_plan_at_every_token_count(kernel):
    """The API reads its plan off the planner's steps (so that it traces with a symbolic token
    count); at every T they give what the planner gives for that T."""
    tokens = sorted({0, 1, 2, 3, 31, 32, 33, 63, 64, 65, 127, 128, 129, 131, 132, 133, 263, 264, 265, 527, 528, 529,
                     1000, 4096, 10**6})
    for num_heads, num_sms in itertools.product(range(16, 129, 16), (1, 2, 66, 78, 114, 132, 170)):
        for head_tiles in (None,) + choices(num_heads):
            steps = _C.prefill_plan_steps(num_heads, head_tiles, num_sms=num_sms, kernel=kernel)
            assert steps[0][0] == 0 and [s[0] for s in steps] == sorted({s[0] for s in steps})
            for num_tokens in tokens:
                expected = details(num_tokens=num_tokens, num_heads=num_heads, topk=512, num_sms=num_sms,
                                   kernel=kernel, head_tiles=head_tiles)
                assert plan_for_tokens(steps, num_tokens) == expected, (num_heads, num_sms, head_tiles, num_tokens)
                assert expected["head_tiles"] in choices(num_heads)


def _call(device, num_tokens, num_heads, head_tiles=None, seed=0):
    problem = make_problem(num_tokens=num_tokens, num_heads=num_heads, topk=20, main=CacheSpec(2, 16), device=device,
                           seed=seed, sink=1.0)
    output, out_lse, result = problem.run(head_tiles)
    return problem, output, out_lse, result


def _device_kernel(device, num_heads, head_tiles):
    """The kernel the op's choice (csrc/cuda/prefill_kernel_choice.h) gives a call on `device`."""
    if device == "cpu":
        return "cpu"
    props = torch.cuda.get_device_properties(device)
    return _C.prefill_kernel_for(props.major, props.shared_memory_per_block_optin, num_heads, head_tiles)


@pytest.mark.parametrize("device", DEVICES)
def test_api_returns_the_planners_plan_for_its_device(device, num_threads):
    """What the API returns is what the planner says for the tensors' device, planned or given, and
    its kernel is the device's choice (on Hopper: "hopper" for 64 heads an item, "hopper_small"
    for every other call)."""
    if device == "cpu":
        num_threads(4)
    for num_tokens, num_heads in itertools.product((0, 1, 2, 3, 5, 9, 33, 200), (16, 32, 48, 64, 96, 112, 128)):
        _, _, _, result = _call(device, num_tokens, num_heads)
        assert result == details(num_tokens=num_tokens, num_heads=num_heads, topk=20, device=device), \
            (num_tokens, num_heads)
        assert result["kernel"] == _device_kernel(device, num_heads, result["head_tiles"]), (num_tokens, num_heads)
        for head_tiles in choices(num_heads):
            _, _, _, result = _call(device, num_tokens, num_heads, head_tiles)
            assert result == details(num_tokens=num_tokens, num_heads=num_heads, topk=20, device=device,
                                     head_tiles=head_tiles)
            assert result["head_tiles"] == head_tiles
            assert result["kernel"] == _device_kernel(device, num_heads, head_tiles)
    problem, output, out_lse, result = _call(device, 9, 64, seed=3)
    assert_matches_reference(output, out_lse, *problem.reference())


def test_cpu_plan_follows_the_intra_op_threads(num_threads):
    """On the CPU an "SM" is an intra-op thread, as the C++ op counts them."""
    for threads, expected in ((1, 4), (64, 1)):
        num_threads(threads)
        assert plan(num_tokens=1, num_heads=64, topk=64, device="cpu") == expected
        assert details(num_tokens=1, num_heads=64, topk=64, kernel="cpu")["head_tiles"] == expected
        assert _call("cpu", 1, 64)[3]["head_tiles"] == expected


def test_device_and_kernel_keywords(num_threads):
    num_threads(2)
    on_cpu = details(num_tokens=3, num_heads=64, topk=64, device="cpu")
    assert on_cpu == {"head_tiles": 4, "num_ctas": 3, "grid_size": 3, "kernel": "cpu"}
    assert details(num_tokens=3, num_heads=64, topk=64, device=torch.device("cpu")) == on_cpu
    assert details(num_tokens=3, num_heads=64, topk=64, kernel="cpu") == on_cpu
    assert details(num_tokens=3, num_heads=64, topk=64, device="cpu", kernel="cpu") == on_cpu
    # An explicit num_sms replaces the device's.
    assert details(num_tokens=3, num_heads=64, topk=64, device="cpu", num_sms=100)["head_tiles"] == 1
    # No device: the current CUDA device, else the CPU.
    default = "cuda" if HAS_CUDA else "cpu"
    assert details(num_tokens=3, num_heads=64, topk=64) == details(num_tokens=3, num_heads=64, topk=64, device=default)


def test_num_sms_required_without_a_device():
    for kernel in ("portable", "hopper", "hopper_small"):
        with pytest.raises(ValueError, match="num_sms: required"):
            plan(num_tokens=1, num_heads=64, topk=64, kernel=kernel)


@pytest.mark.parametrize("kwargs,message", [
    (dict(kernel="sm100", num_sms=1), "kernel: expected"),
    (dict(kernel="Hopper", num_sms=1), "kernel: expected"),
    (dict(device="gpu"), "device: expected"),
    (dict(device=3), "device: expected"),
    (dict(device="meta"), "device: expected"),
    (dict(device="cpu", kernel="hopper"), "kernel: 'hopper' does not run on cpu"),
    (dict(device="cpu", kernel="hopper_small"), "kernel: 'hopper_small' does not run on cpu"),
    (dict(device="cpu", kernel="portable"), "kernel: 'portable' does not run on cpu"),
    (dict(device="cuda:64"), "device"),
    (dict(num_tokens=1, num_heads=8, topk=1, num_sms=1), "num_heads"),
    (dict(num_tokens=-1, num_heads=16, topk=1, num_sms=1), "num_tokens"),
    (dict(num_tokens=1, num_heads=16, topk=0, num_sms=1), "topk"),
    (dict(num_tokens=1, num_heads=16, topk=1, extra_topk=-1, num_sms=1), "extra_topk"),
    (dict(num_tokens=1, num_heads=16, topk=1000, extra_topk=20, num_sms=1), "topk/extra_topk"),
    (dict(num_tokens=1, num_heads=16, topk=1, num_sms=0), "num_sms"),
    (dict(num_tokens=1, num_heads=16, topk=1, device="cpu", num_sms=-2), "num_sms"),
])
def test_planner_errors(kwargs, message):
    kwargs = dict(dict(num_tokens=1, num_heads=64, topk=1), **kwargs)
    with pytest.raises(ValueError, match=message):
        plan(**kwargs)


@pytest.mark.parametrize("head_tiles,message", [(3, r"head_tiles: expected one of \[1, 2\] for H = 32"),
                                                (4, r"head_tiles: expected one of \[1, 2\]")])
def test_planner_checks_explicit_head_tiles_like_the_op(head_tiles, message):
    with pytest.raises(ValueError, match=message):
        details(num_tokens=1, num_heads=32, topk=1, device="cpu", head_tiles=head_tiles)


def test_shared_memory_caps_head_tiles():
    """Hopper (227 KB) and A100 (163 KB) run every head tile; ~100 KB parts (sm_120) only 1."""
    assert _C.prefill_max_head_tiles(232448) == 4
    assert _C.prefill_max_head_tiles(166912) == 4
    assert _C.prefill_max_head_tiles(101376) == 1
    assert _C.prefill_max_head_tiles(1024) == 0


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_api_returns_the_planners_plan(device):
    """Under torch.compile with a symbolic token count the API's plan is still the planner's."""
    torch._dynamo.reset()

    def api(problem, output, out_lse):
        result = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(problem.q, problem.kv_cache, problem.indices,
                                                                    output, out_lse, problem.sm_scale)
        return result["head_tiles"], result["num_ctas"], result["grid_size"], result["kernel"]

    compiled = torch.compile(api, fullgraph=True, dynamic=True)
    for num_tokens in (5, 9, 2, 300):
        problem = make_problem(num_tokens=num_tokens, num_heads=64, topk=20, main=CacheSpec(2, 16), device=device,
                               seed=num_tokens)
        output = torch.empty(num_tokens, 64, 512, dtype=torch.bfloat16, device=device)
        out_lse = torch.empty(num_tokens, 64, device=device)
        expected = details(num_tokens=num_tokens, num_heads=64, topk=20, device=device)
        assert compiled(problem, output, out_lse) == tuple(expected.values())


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_plan_follows_the_device_kernel_table():
    device = torch.device("cuda")
    result = _call(device, 64, 64)[3]
    family = _C.plan_prefill(64, 64, 20, device="cuda")["kernel"]
    assert result == details(num_tokens=64, num_heads=64, topk=20, device=device)
    with torch_ops.prefill_kernel_override(kernel="portable"):
        portable = _call(device, 64, 64)[3]
        assert portable == details(num_tokens=64, num_heads=64, topk=20, device=device)
        assert portable["kernel"] == "portable" and portable["grid_size"] == portable["num_ctas"]
    if family == "hopper":
        # T = 64 is below the portable table's threshold for 4 tiles, not the Hopper table's.
        props = torch.cuda.get_device_properties(device)
        num_sms = props.multi_processor_count
        assert result == {"head_tiles": 4, "num_ctas": 64, "grid_size": min(64, num_sms), "kernel": "hopper"}
        assert portable["head_tiles"] == plan(num_tokens=64, num_heads=64, topk=20, num_sms=num_sms, kernel="portable")
        assert details(num_tokens=64, num_heads=64, topk=20, device=device, kernel="portable") == portable
        # The calls the 64-head kernel does not serve run the small-heads kernel (every sm_90 part
        # has the shared memory for it), unless the override keeps the GPU on the portable kernel.
        assert _C.device_runs_hopper_small_prefill(props.major, props.shared_memory_per_block_optin)
        small = _call(device, 64, 48)[3]
        assert small == {"head_tiles": 1, "num_ctas": 192, "grid_size": min(64, num_sms), "kernel": "hopper_small"}
        assert details(num_tokens=64, num_heads=48, topk=20, device=device, kernel="hopper_small") == small
        assert details(num_tokens=64, num_heads=48, topk=20, device=device, kernel="portable")["kernel"] == "portable"
        with torch_ops.prefill_kernel_override(kernel="portable"):
            assert _call(device, 64, 48)[3]["kernel"] == "portable"
    else:
        with pytest.raises(ValueError, match="kernel"):
            details(num_tokens=64, num_heads=64, topk=20, device=device, kernel="hopper")
    with pytest.raises(ValueError, match="kernel"):
        details(num_tokens=64, num_heads=64, topk=20, device=device, kernel="cpu")
