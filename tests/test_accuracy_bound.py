"""The kernels' accuracy on the benchmarks' kind of inputs (benchmarks/accuracy.py's draw: a pool
whose 16-value groups span several magnitudes, distinct random candidates, a sink): every row
within the contract (docs/contract.md section 11), and the median row error at most 3e-3, the
figure the kernels have held against float64 (a change that rounds more, such as another
normaliser, shows here before it reaches the contract's 1e-2). On CUDA, the kernel each call
plans (the 64-head Hopper kernel at 64 and 128 heads on an sm_90 GPU, the small-heads one at 16,
the portable one elsewhere), the prefill and the decode; on the CPU, the CPU kernels on small
shapes."""
import argparse

import pytest

from helpers import HAS_CUDA, import_benchmark

MEDIAN_BOUND = 3e-3


def check_shape(op, device, num_tokens, num_heads, topk, scale, pool):
    accuracy = import_benchmark("accuracy")
    args = argparse.Namespace(op=op, device=device, pool=pool, seed=0)
    row = accuracy.measure(num_tokens, num_heads, topk, scale, args)
    assert accuracy.failures(row, 1e-2, 1e-3) == [], row
    assert row["rows"] == num_tokens * num_heads, row
    assert row["median"] <= MEDIAN_BOUND, row


@pytest.mark.parametrize("op", ["prefill", "decode"])
@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_cpu_kernels_median_row_error(op, scale):
    check_shape(op, "cpu", 3, 16, 128, scale, 512)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("num_heads", [16, 64, 128])
@pytest.mark.parametrize("topk", [512, 1024])
@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_cuda_prefill_median_row_error(num_heads, topk, scale):
    check_shape("prefill", "cuda", 32, num_heads, topk, scale, 8192)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("num_tokens, num_heads", [(1, 64), (8, 16), (4, 128), (16, 8)])
def test_cuda_decode_median_row_error(num_tokens, num_heads):
    check_shape("decode", "cuda", num_tokens, num_heads, 2048, 1.0, 8192)
