"""Head-tile choices and the planner: one table, the same plan from Python and the C++ op."""
import itertools

import pytest
import torch

import torch_ops
from torch_ops import _C
from torch_ops.planner import plan_head_tiles

plan = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill
choices = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill_head_tiles


def test_head_tile_choices():
    assert choices(16) == (1,) and choices(48) == (1,) and choices(80) == (1,) and choices(112) == (1,)
    assert choices(32) == (1, 2) and choices(96) == (1, 2)
    assert choices(64) == (1, 2, 4) and choices(128) == (1, 2, 4)
    for bad in (0, 8, 24, 144, 256, -16):
        assert choices(bad) == ()


@pytest.mark.parametrize("kernel", ["portable", "hopper"])
def test_python_and_cpp_plans_agree(kernel):
    tokens = sorted({0, 1, 2, 3, 31, 32, 33, 63, 64, 65, 127, 128, 129, 263, 264, 265, 527, 528, 529, 1000, 4096, 10**6})
    for num_tokens, num_heads, num_sms in itertools.product(tokens, range(16, 129, 16), (1, 2, 66, 78, 114, 132, 170)):
        expected = _C.plan_prefill_head_tiles(num_tokens, num_heads, num_sms, kernel == "hopper")
        got = plan(num_tokens=num_tokens, num_heads=num_heads, topk=512, num_sms=num_sms, kernel=kernel)
        assert got == expected == plan_head_tiles(num_tokens, num_heads, num_sms, kernel)
        assert got in choices(num_heads)


def test_hopper_table_takes_four_tiles_at_any_size():
    """Measured on the H200 (docs/planner.md): the Hopper kernel with 4 tiles beats the portable
    kernel's 1 and 2 tiles from T = 64 up, so its plan is 4 whenever H % 64 == 0."""
    for num_tokens in (1, 64, 4096):
        assert plan(num_tokens=num_tokens, num_heads=64, topk=512, num_sms=132, kernel="hopper") == 4
        assert plan(num_tokens=num_tokens, num_heads=128, topk=512, num_sms=132, kernel="hopper") == 4
    assert plan(num_tokens=1, num_heads=128, topk=512, num_sms=132) == 1  # the portable table differs
    assert plan(num_tokens=1, num_heads=96, topk=512, num_sms=132, kernel="hopper") == 1
    with pytest.raises(ValueError, match="kernel"):
        plan(num_tokens=1, num_heads=64, topk=1, num_sms=1, kernel="sm100")


def test_planner_prefers_larger_tiles_with_more_tokens():
    assert plan(num_tokens=1, num_heads=128, topk=512, num_sms=132) == 1
    assert plan(num_tokens=100000, num_heads=128, topk=512, num_sms=132) == 4
    for h in (16, 48, 80, 112):
        assert plan(num_tokens=100000, num_heads=h, topk=64, num_sms=132) == 1


def test_op_uses_the_planner_when_head_tiles_is_none():
    """The CPU op resolves the plan with torch.get_num_threads() SMs; the API reports it."""
    q = torch.randn(600, 128, 512).to(torch.bfloat16)
    cache = torch.zeros(1, 64, 384, dtype=torch.uint8)
    idx = torch.full((600, 1), -1, dtype=torch.int32)
    out, lse = torch.empty(600, 128, 512, dtype=torch.bfloat16), torch.empty(600, 128)
    result = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(q, cache, idx, out, lse, 0.1)
    assert result["head_tiles"] == plan(num_tokens=600, num_heads=128, topk=1, num_sms=torch.get_num_threads())
    assert result["num_ctas"] == 600 * 128 // (16 * result["head_tiles"])


@pytest.mark.parametrize("kwargs,message", [
    (dict(num_tokens=1, num_heads=8, topk=1, num_sms=1), "num_heads"),
    (dict(num_tokens=-1, num_heads=16, topk=1, num_sms=1), "num_tokens"),
    (dict(num_tokens=1, num_heads=16, topk=0, num_sms=1), "topk"),
    (dict(num_tokens=1, num_heads=16, topk=1, extra_topk=-1, num_sms=1), "extra_topk"),
    (dict(num_tokens=1, num_heads=16, topk=1000, extra_topk=20, num_sms=1), "topk/extra_topk"),
    (dict(num_tokens=1, num_heads=16, topk=1, num_sms=0), "num_sms"),
])
def test_planner_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        plan(**kwargs)


def test_shared_memory_caps_head_tiles():
    """Hopper (227 KB) and A100 (163 KB) run every head tile; ~100 KB parts (sm_120) only 1."""
    assert _C.prefill_max_head_tiles(232448) == 4
    assert _C.prefill_max_head_tiles(166912) == 4
    assert _C.prefill_max_head_tiles(101376) == 1
    assert _C.prefill_max_head_tiles(1024) == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_plan_follows_the_device_kernel_table():
    from torch_ops.planner import device_num_sms, device_prefill_kernel
    device = torch.device("cuda")
    q = torch.randn(64, 64, 512, device=device).to(torch.bfloat16)
    cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(torch.randn(2, 64, 512, device=device).to(torch.bfloat16))
    idx = torch.randint(0, 128, (64, 32), dtype=torch.int32, device=device)
    out, lse = torch.empty(64, 64, 512, dtype=torch.bfloat16, device=device), torch.empty(64, 64, device=device)
    result = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(q, cache, idx, out, lse, 0.1)
    kernel = device_prefill_kernel(device)
    assert result["head_tiles"] == plan(num_tokens=64, num_heads=64, topk=32, num_sms=device_num_sms(device),
                                        kernel=kernel)
    if kernel == "hopper":
        assert result["head_tiles"] == 4  # T = 64 is below the portable table's threshold for 4 tiles
