"""Shared test helpers: cache views with padded page strides, random problems, the precision
contract check (docs/contract.md section 11)."""
import importlib
import math
import pathlib
import sys
from dataclasses import dataclass, field
from typing import Optional

import pytest
import torch

import torch_ops
from torch_ops.reference import sparse_mla_prefill_reference

HAS_CUDA = torch.cuda.is_available()
ROOT = pathlib.Path(__file__).resolve().parents[1]
HOPPER_SMEM = 232448  # H100/H200 shared memory per block (opt-in)
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device"))]
PREFILL_HEADS = [16, 32, 48, 64, 80, 96, 112, 128]
VIEWS = ["3d", "HND", "NHD"]


def import_benchmark(name):
    """benchmarks/<name>.py as a module (the benchmarks import each other from their own folder)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


def random_latent(num_rows: int, generator: torch.Generator, device="cpu") -> torch.Tensor:
    """bf16 rows [num_rows, 512] whose 16-value groups span several magnitudes (exercises the
    block scales) and never all zero."""
    base = torch.randn(num_rows, 512, generator=generator)
    group_scale = torch.exp(torch.randn(num_rows, 32, generator=generator)).repeat_interleave(16, dim=1)
    return (base * group_scale).to(torch.bfloat16).to(device)


def cache_view(packed_hnd: torch.Tensor, view: str, pad_bytes: int, generator: torch.Generator,
               extra_tail: int = 0) -> torch.Tensor:
    """Place a packed HND cache [P, 1, page_size, 384] into a new allocation whose pages are
    `pad_bytes` apart beyond their payload (padding filled with random bytes), returned in the
    requested view. `extra_tail` bytes after the last page (0: the cache ends exactly there)."""
    pages, page_size = packed_hnd.shape[0], packed_hnd.shape[2]
    payload = page_size * 384
    page_stride = payload + pad_bytes
    total = pages * page_stride + extra_tail
    storage = torch.randint(0, 256, (max(total, 16),), dtype=torch.uint8, generator=generator).to(packed_hnd.device)
    if pad_bytes == 0:
        pages_2d = storage[: pages * payload].view(pages, payload)
    else:
        pages_2d = storage[: pages * page_stride].view(pages, page_stride)[:, :payload]
    pages_2d.copy_(packed_hnd.reshape(pages, payload))
    if view == "3d":
        return pages_2d.view(pages, page_size, 384)
    if view == "HND":
        return pages_2d.view(pages, 1, page_size, 384)
    return pages_2d.view(pages, page_size, 1, 384)


@dataclass
class CacheSpec:
    pages: int
    page_size: int
    view: str = "HND"
    pad_bytes: int = 0


@dataclass
class Problem:
    q: torch.Tensor
    kv_cache: torch.Tensor
    indices: torch.Tensor
    sm_scale: float
    kwargs: dict = field(default_factory=dict)

    def run(self, head_tiles: Optional[int] = None):
        num_tokens, num_heads = self.q.shape[0], self.q.shape[1]
        output = torch.full((num_tokens, num_heads, 512), float("nan"), dtype=torch.bfloat16, device=self.q.device)
        out_lse = torch.full((num_tokens, num_heads), float("nan"), dtype=torch.float32, device=self.q.device)
        plan = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(
            self.q, self.kv_cache, self.indices, output, out_lse, self.sm_scale, head_tiles=head_tiles, **self.kwargs)
        return output, out_lse, plan

    def decode_buffers(self, scratch_splits: Optional[int] = None):
        """NaN-filled (output, out_lse, mid_out, mid_lse) for a decode of this problem, the scratch of
        `scratch_splits` splits (default: enough for every plan; 0: none)."""
        num_tokens, num_heads = self.q.shape[0], self.q.shape[1]
        device = self.q.device
        output = torch.full((num_tokens, num_heads, 512), float("nan"), dtype=torch.bfloat16, device=device)
        out_lse = torch.full((num_tokens, num_heads), float("nan"), dtype=torch.float32, device=device)
        topk = self.indices.shape[-1]
        extra = self.kwargs.get("extra_indices")
        extra_topk = 0 if extra is None else extra.shape[-1]
        if scratch_splits is None:
            scratch_splits = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_num_chunks(topk, extra_topk)
        mid_out = mid_lse = None
        if scratch_splits:
            mid_out = torch.full((scratch_splits, num_tokens, num_heads, 512), float("nan"), device=device)
            mid_lse = torch.full((scratch_splits, num_tokens, num_heads), float("nan"), device=device)
        return output, out_lse, mid_out, mid_lse

    def run_decode(self, num_splits: Optional[int] = None, max_splits: int = 16, head_tiles: Optional[int] = None,
                   scratch_splits: Optional[int] = None):
        """The decode into decode_buffers(scratch_splits). Returns (output, out_lse, plan, mid_out,
        mid_lse)."""
        output, out_lse, mid_out, mid_lse = self.decode_buffers(scratch_splits)
        plan = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_decode(
            self.q, self.kv_cache, self.indices, output, out_lse, self.sm_scale, mid_out=mid_out, mid_lse=mid_lse,
            num_splits=num_splits, max_splits=max_splits, head_tiles=head_tiles, **self.kwargs)
        return output, out_lse, plan, mid_out, mid_lse

    def run_decode_op(self, num_splits: int, head_tiles: int):
        """The registered op torch.ops.cake.sparse_mla_decode called directly (no planner in front of
        it) into decode_buffers(). Returns (output, out_lse)."""
        output, out_lse, mid_out, mid_lse = self.decode_buffers()
        torch.ops.cake.sparse_mla_decode(self.q, self.kv_cache, self.indices, output, out_lse, self.sm_scale,
                                         mid_out=mid_out, mid_lse=mid_lse, num_splits=num_splits,
                                         head_tiles=head_tiles, **self.kwargs)
        return output, out_lse

    def reference(self):
        return sparse_mla_prefill_reference(self.q, self.kv_cache, self.indices, self.sm_scale, **self.kwargs)


def make_cache(spec: CacheSpec, generator: torch.Generator, device) -> torch.Tensor:
    latent = random_latent(spec.pages * spec.page_size, generator).view(spec.pages, spec.page_size, 512)
    packed = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent.to(device), kv_layout="HND")
    # The padding bytes come from their own generator, so the view and padding of a cache do not
    # change the random draws of the rest of the problem.
    return cache_view(packed, spec.view, spec.pad_bytes, torch.Generator().manual_seed(spec.pad_bytes))


def random_indices(num_tokens: int, width: int, num_slots: int, generator: torch.Generator,
                   invalid_fraction: float = 0.1) -> torch.Tensor:
    """Slots with duplicates, -1 masks, other negatives and out-of-range values mixed in."""
    idx = torch.randint(0, max(num_slots, 1), (num_tokens, width), generator=generator)
    kind = torch.rand(num_tokens, width, generator=generator)
    idx = torch.where(kind < invalid_fraction / 3, torch.full_like(idx, -1), idx)
    idx = torch.where((kind >= invalid_fraction / 3) & (kind < 2 * invalid_fraction / 3),
                      -torch.randint(2, 1000, idx.shape, generator=generator), idx)
    idx = torch.where((kind >= 2 * invalid_fraction / 3) & (kind < invalid_fraction),
                      num_slots + torch.randint(0, 1000, idx.shape, generator=generator), idx)
    return idx.to(torch.int32)


def make_problem(*, num_tokens, num_heads, topk, main: CacheSpec, device, seed, extra: Optional[CacheSpec] = None,
                 extra_topk=0, lengths=None, extra_lengths=None, sink=None, lse_scale=1.0,
                 invalid_fraction=0.1, sm_scale=None, indices_3d=False) -> Problem:
    """lengths / extra_lengths: None, or "random" (0, partial, > width, negative mixed)."""
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(num_tokens, num_heads, 512, generator=g)).to(torch.bfloat16).to(device)
    cache = make_cache(main, g, device)
    indices = random_indices(num_tokens, topk, main.pages * main.page_size, g, invalid_fraction)
    if indices_3d:
        indices = indices.view(num_tokens, 1, topk)
    kwargs = {"lse_scale": lse_scale}

    def random_lengths(width):
        return torch.randint(-3, width + 4, (num_tokens + 2,), generator=g).to(torch.int32).to(device)

    if lengths == "random":
        kwargs["topk_length"] = random_lengths(topk)
    if sink is not None:
        kwargs["attn_sink"] = (sink * torch.randn(num_heads + 3, generator=g)).to(torch.float32).to(device)
    if extra is not None:
        kwargs["extra_kv_cache"] = make_cache(extra, g, device)
        kwargs["extra_indices"] = random_indices(num_tokens, extra_topk, extra.pages * extra.page_size, g,
                                                 invalid_fraction).to(device)
        if extra_lengths == "random":
            kwargs["extra_topk_length"] = random_lengths(extra_topk)
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(512)
    return Problem(q, cache, indices.to(device), sm_scale, kwargs)


def case_problem(case: tuple, seed: int, num_tokens: int = 37) -> Problem:
    """The CUDA problem of a kernel test case (heads, topk, main cache, extra cache, extra topk,
    lengths, sink): the same lengths draw for both lists, lse_scale 0.75."""
    heads, topk, main, extra, extra_topk, lengths, sink = case
    return make_problem(num_tokens=num_tokens, num_heads=heads, topk=topk, main=main, device="cuda", seed=seed,
                        extra=extra, extra_topk=extra_topk, lengths=lengths, extra_lengths=lengths, sink=sink,
                        lse_scale=0.75)


def assert_matches_reference(output: torch.Tensor, out_lse: torch.Tensor, ref_out: torch.Tensor,
                             ref_lse: torch.Tensor) -> None:
    """docs/contract.md section 11: every element written, per-row relative error <= 1e-2 where the
    reference row is non-zero (rows whose magnitude is below bf16's normal range are compared
    in absolute terms), |lse - ref| <= 1e-3 * max(1, |ref|), -inf exactly where the reference."""
    output = output.detach().cpu().to(torch.float64)
    out_lse = out_lse.detach().cpu().to(torch.float64)
    assert not torch.isnan(output).any(), "output has NaN: an element was not written (or NaN leaked)"
    assert not torch.isnan(out_lse).any(), "out_lse has NaN: an element was not written (or NaN leaked)"
    ref_norm = ref_out.norm(dim=-1)
    err_norm = (output - ref_out).norm(dim=-1)
    tiny = ref_norm < 1e-30
    rel = torch.where(tiny, torch.zeros_like(ref_norm), err_norm / torch.where(tiny, torch.ones_like(ref_norm), ref_norm))
    worst = rel.max().item() if rel.numel() else 0.0
    assert worst <= 1e-2, f"output relative error {worst:.3e} > 1e-2 at row {divmod(int(rel.argmax()), rel.shape[1])}"
    if tiny.any():
        assert output.norm(dim=-1)[tiny].max() <= 1e-30, "output non-zero where the reference row is (near) zero"
    ref_inf = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(out_lse), ref_inf), "out_lse -inf pattern differs from the reference"
    assert torch.equal(out_lse[ref_inf], ref_lse[ref_inf]), "out_lse infinities have the wrong sign"
    finite = ~ref_inf
    if finite.any():
        lse_err = ((out_lse - ref_lse).abs() / ref_lse.abs().clamp(min=1.0))[finite].max().item()
        assert lse_err <= 1e-3, f"out_lse error {lse_err:.3e} > 1e-3"


def assert_matches_reference_with_nan(output: torch.Tensor, out_lse: torch.Tensor, ref_out: torch.Tensor,
                                      ref_lse: torch.Tensor) -> None:
    """docs/contract.md sections 8 and 11, where the reference may hold NaN: the output is NaN in
    exactly the elements where the reference's is (a whole row for a NaN or +inf logit, single
    dims where a zero weight meets an infinite value), the lse exactly where the reference's is;
    every other element meets ``assert_matches_reference``."""
    output = output.detach().cpu().to(torch.float64)
    out_lse = out_lse.detach().cpu().to(torch.float64)
    ref_nan = torch.isnan(ref_out)
    nan = torch.isnan(output)
    assert torch.equal(nan, ref_nan), (
        f"NaN output elements at {(nan != ref_nan).nonzero()[:8].tolist()} (first 8) differ from the reference's")
    ref_nan_lse = torch.isnan(ref_lse)
    assert torch.equal(torch.isnan(out_lse), ref_nan_lse), (
        f"NaN lse at {torch.isnan(out_lse).nonzero().tolist()} != reference {ref_nan_lse.nonzero().tolist()}")
    zero = torch.zeros((), dtype=torch.float64)
    assert_matches_reference(torch.where(nan, zero, output), torch.where(ref_nan_lse, 0.0, out_lse),
                             torch.where(ref_nan, zero, ref_out), torch.where(ref_nan_lse, 0.0, ref_lse))


def capture_graph(call) -> "torch.cuda.CUDAGraph":
    """`call` captured in a CUDA graph, after a warm-up on a side stream (module load, planner)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return graph


def assert_replays_follow_inplace_changes(graph, problem: "Problem", new_problem, output, out_lse) -> None:
    """For each seed's problem from `new_problem(seed)`: q, the lists, the lengths and the caches
    of `problem` changed in place, the outputs poisoned with NaN, a replay that meets the contract
    against the new inputs and a second replay that repeats it bit for bit."""
    for seed in (2, 3):
        new = new_problem(seed)
        problem.q.copy_(new.q)
        problem.indices.copy_(new.indices)
        problem.kv_cache.copy_(new.kv_cache)
        for key in ("topk_length", "extra_indices", "extra_topk_length", "extra_kv_cache"):
            problem.kwargs[key].copy_(new.kwargs[key])
        output.fill_(float("nan"))
        out_lse.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_matches_reference(output, out_lse, *problem.reference())
        first = (output.clone(), out_lse.clone())
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(output.view(torch.int16), first[0].view(torch.int16)) and torch.equal(out_lse, first[1])


def persistent_walk_problem(num_heads: int) -> "Problem":
    """More work items than SMs (3 * SMs + 5 tokens), about half of them empty (zero lengths), both
    lists: a persistent CTA walks several items, some without candidates."""
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    num_tokens = 3 * num_sms + 5
    problem = make_problem(num_tokens=num_tokens, num_heads=num_heads, topk=100, main=CacheSpec(8, 64), device="cuda",
                           seed=808, extra=CacheSpec(5, 2), extra_topk=30, sink=1.0)
    lengths = torch.randint(0, 101, (num_tokens,), generator=torch.Generator().manual_seed(1))
    lengths[torch.rand(num_tokens, generator=torch.Generator().manual_seed(2)) < 0.5] = 0
    problem.kwargs["topk_length"] = lengths.to(torch.int32).cuda()
    extra_lengths = torch.where(lengths > 0, torch.randint(0, 31, (num_tokens,)), torch.zeros_like(lengths))
    problem.kwargs["extra_topk_length"] = extra_lengths.to(torch.int32).cuda()
    return problem


def assert_repeatable(first, second) -> None:
    """Two runs' (output, out_lse, ...) are the same bits."""
    assert torch.equal(first[0].view(torch.int16), second[0].view(torch.int16))
    assert torch.equal(first[1], second[1])


def assert_agrees_with_portable_and_repeatable(problem: "Problem", head_tiles=None) -> dict:
    """Three runs on the device's own kernel and one on the portable kernel (kernel override) all
    meet the contract; the three are the same bits; the two kernels differ by rounding only (fp32
    summation order, a weight rounded the other way in bf16, a lazy softmax reference, the bf16
    output): per row within the contract's bound, LSEs close. Returns the device kernel's plan."""
    reference = problem.reference()
    runs = [problem.run(head_tiles)[:2] for _ in range(3)]
    plan = problem.run(head_tiles)[2]
    with torch_ops.prefill_kernel_override(kernel="portable"):
        *portable, portable_plan = problem.run(head_tiles)
    assert portable_plan["kernel"] == "portable"
    for output, out_lse in runs + [portable]:
        assert_matches_reference(output, out_lse, *reference)
    for run in runs[1:]:
        assert_repeatable(runs[0], run)
    device_out, portable_out = runs[0][0].double(), portable[0].double()
    distance = (device_out - portable_out).norm(dim=-1) / portable_out.norm(dim=-1).clamp(min=1e-30)
    assert distance.max().item() <= 1e-2
    torch.testing.assert_close(runs[0][1], portable[1], rtol=1e-5, atol=1e-4)
    return plan
