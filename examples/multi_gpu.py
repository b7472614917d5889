"""The prefill under torch.distributed: tensor parallelism (heads split over ranks) or data-parallel
attention (tokens split over ranks), checked against one call on the whole problem.

    torchrun --standalone --nproc_per_node=2 examples/multi_gpu.py --mode tp
    torchrun --standalone --nproc_per_node=2 examples/multi_gpu.py --mode dp --tokens 1024 --json dp.json
    torchrun --standalone --nproc_per_node=2 examples/multi_gpu.py --mode tp --device cpu   # no GPU needed

Every head of a token reads the same latent rows, so the NVFP4 cache is replicated: each rank
writes the same rows into its own cache with the append writer (one seeded generator, so the rows
and their slots are identical everywhere). Heads are independent and so are tokens, so a rank
runs the op on its share alone:

- tp: heads [r * H / N, (r + 1) * H / N) of every token, with those heads' sinks; H / N must be a
  head count the op accepts (16, 32, ..., 128).
- dp: tokens [r * T / N, (r + 1) * T / N) with their candidate lists, all heads.

The outputs and LSEs are then all-gathered (concatenated along the head axis for tp, the token axis
for dp) and rank 0 compares them with one single-process call on the full problem, within the
precision bounds of docs/contract.md section 11. In a model the tp output would feed a row-parallel
output projection instead of being gathered; the gather here checks the result and times a
collective of the output's size.

Backend: nccl with one GPU per rank (cuda:LOCAL_RANK), gloo on the CPU. Rank 0 prints, per rank,
the median time of the op and of the all-gathers (CUDA events on the GPU, the L2 cache flushed
before each timed op; perf_counter on the CPU) after warm-up runs; --json writes them.
"""
import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import time
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist

import torch_ops

# all_gather_single is the newer name of all_gather_into_tensor (deprecated in recent torch).
_all_gather_into = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


@dataclass
class Problem:
    """One prefill: q [T, H, 512] bf16, the cache, per-token candidates, per-head sinks."""
    q: torch.Tensor
    kv_cache: torch.Tensor
    indices: torch.Tensor      # [T, topk] int32 slots
    topk_length: torch.Tensor  # [T] int32
    attn_sink: torch.Tensor    # [H] float32
    sm_scale: float


def make_problem(*, tokens: int, heads: int, topk: int, page_size: int, pool: int, seed: int,
                 device: torch.device) -> Problem:
    """The same problem on every rank: all random draws come from one CPU generator seeded with
    `seed`, and are moved to `device` afterwards."""
    g = torch.Generator().manual_seed(seed)
    pages = math.ceil(pool / page_size)
    # The latent cache: `pool` rows appended at scattered slots, as a serving engine would.
    latent_rows = torch.randn(pool, 512, generator=g).to(torch.bfloat16)
    slot_mapping = torch.randperm(pages * page_size, generator=g)[:pool]
    kv_cache = torch.zeros(pages, 1, page_size, 384, dtype=torch.uint8, device=device)
    torch_ops.nvfp4_quantize_append_sparse_mla_cache(latent_rows.to(device), slot_mapping.to(device), kv_cache)

    q = torch.randn(tokens, heads, 512, generator=g, dtype=torch.bfloat16)
    indices = slot_mapping[torch.randint(0, pool, (tokens, topk), generator=g)].to(torch.int32)
    topk_length = torch.randint(topk // 2, topk + 1, (tokens,), generator=g, dtype=torch.int32)
    attn_sink = torch.randn(heads, generator=g)
    return Problem(q.to(device), kv_cache, indices.to(device), topk_length.to(device), attn_sink.to(device),
                   1.0 / math.sqrt(512))


def shard_bounds(mode: str, *, tokens: int, heads: int, world_size: int, rank: int) -> tuple:
    """(first, end) of this rank's heads (tp) or tokens (dp)."""
    if mode == "tp":
        per_rank = heads // world_size
        if heads % world_size or not torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill_head_tiles(per_rank):
            raise ValueError(f"heads: {heads} heads over {world_size} ranks do not give every rank a head count "
                             f"the op accepts (16, 32, ..., 128)")
    elif mode == "dp":
        per_rank = tokens // world_size
        if tokens % world_size:
            raise ValueError(f"tokens: {tokens} tokens do not split evenly over {world_size} ranks")
    else:
        raise ValueError(f"mode: expected 'tp' or 'dp', got {mode!r}")
    return rank * per_rank, (rank + 1) * per_rank


def shard_problem(problem: Problem, mode: str, *, world_size: int, rank: int) -> Problem:
    """This rank's share: its heads of every token (tp) or its tokens with all heads (dp).
    The cache is replicated, so it is the same tensor either way."""
    tokens, heads = problem.q.shape[0], problem.q.shape[1]
    first, end = shard_bounds(mode, tokens=tokens, heads=heads, world_size=world_size, rank=rank)
    if mode == "tp":
        return Problem(problem.q[:, first:end].contiguous(), problem.kv_cache, problem.indices,
                       problem.topk_length, problem.attn_sink[first:end].contiguous(), problem.sm_scale)
    return Problem(problem.q[first:end].contiguous(), problem.kv_cache, problem.indices[first:end].contiguous(),
                   problem.topk_length[first:end].contiguous(), problem.attn_sink, problem.sm_scale)


def run_prefill(problem: Problem, output: Optional[torch.Tensor] = None, out_lse: Optional[torch.Tensor] = None,
                head_tiles: Optional[int] = None):
    """One call of the op; returns (output [T, H, 512], out_lse [T, H], plan)."""
    tokens, heads = problem.q.shape[0], problem.q.shape[1]
    if output is None:
        output = torch.empty(tokens, heads, 512, dtype=torch.bfloat16, device=problem.q.device)
        out_lse = torch.empty(tokens, heads, dtype=torch.float32, device=problem.q.device)
    plan = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(
        problem.q, problem.kv_cache, problem.indices, output, out_lse, problem.sm_scale,
        topk_length=problem.topk_length, attn_sink=problem.attn_sink, head_tiles=head_tiles)
    return output, out_lse, plan


def all_gather_shards(output: torch.Tensor, out_lse: torch.Tensor, gathered_output: torch.Tensor,
                      gathered_lse: torch.Tensor) -> None:
    """The collectives alone: every rank's shard, stacked along a new leading rank axis
    (gathered_output [world_size, *output.shape], gathered_lse [world_size, *out_lse.shape]).
    They are passed in the concatenated form [world_size * rows, ...], which gloo accepts too."""
    _all_gather_into(gathered_output.flatten(0, 1), output)
    _all_gather_into(gathered_lse.flatten(0, 1), out_lse)


def concat_shards(gathered_output: torch.Tensor, gathered_lse: torch.Tensor, mode: str):
    """[world_size, ...] stacks -> the full [T, H, 512] output and [T, H] LSE: shards side by side
    along the head axis (tp, a copy) or one after another along the token axis (dp, a view)."""
    if mode == "tp":
        world_size, tokens, heads_per_rank = gathered_lse.shape
        return (gathered_output.movedim(0, 1).reshape(tokens, world_size * heads_per_rank, 512),
                gathered_lse.movedim(0, 1).reshape(tokens, world_size * heads_per_rank))
    return gathered_output.flatten(0, 1), gathered_lse.flatten(0, 1)


def gather_result(output: torch.Tensor, out_lse: torch.Tensor, mode: str, world_size: int):
    """All-gather every rank's shard and assemble the full output and LSE (on every rank)."""
    gathered_output = output.new_empty(world_size, *output.shape)
    gathered_lse = out_lse.new_empty(world_size, *out_lse.shape)
    all_gather_shards(output, out_lse, gathered_output, gathered_lse)
    return concat_shards(gathered_output, gathered_lse, mode)


def contract_errors(output, out_lse, ref_output, ref_lse):
    """(largest per-row relative error, largest LSE error / max(1, |ref|)): the two quantities that
    docs/contract.md section 11 bounds by 1e-2 and 1e-3. NaN if any row is NaN."""
    output, ref_output = output.double(), ref_output.double()
    out_lse, ref_lse = out_lse.double(), ref_lse.double()
    row_rel = (output - ref_output).norm(dim=-1) / ref_output.norm(dim=-1).clamp(min=1e-30)
    lse_err = (out_lse - ref_lse).abs() / ref_lse.abs().clamp(min=1.0)
    has_nan = bool(torch.isnan(output).any() or torch.isnan(out_lse).any())
    return (math.nan, math.nan) if has_nan else (row_rel.max().item(), lse_err.max().item())


def median_us(fn, device: torch.device, *, warmup: int, repeats: int, before=None) -> float:
    """Median wall time of fn() in microseconds; `before` runs untimed ahead of every timed call."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        else:
            start_s = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start_s) * 1e6)
    return statistics.median(times)


def init_distributed(device_type: str) -> torch.device:
    """Join the process group that torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*):
    nccl with this rank's own GPU, or gloo on the CPU."""
    timeout = datetime.timedelta(seconds=int(os.environ.get("CAKE_DIST_TIMEOUT_S", "300")))
    if device_type == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if local_rank >= torch.cuda.device_count():
            raise ValueError(f"LOCAL_RANK: {local_rank} but only {torch.cuda.device_count()} CUDA devices are visible")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", timeout=timeout, device_id=device)
    elif device_type == "cpu":
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=timeout)
    else:
        raise ValueError(f"device: expected 'cuda' or 'cpu', got {device_type!r}")
    return device


def git_commit() -> str:
    if os.environ.get("CAKE_COMMIT"):
        return os.environ["CAKE_COMMIT"]
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True, stderr=subprocess.DEVNULL,
                                       cwd=os.path.dirname(os.path.abspath(__file__))).strip()
    except Exception:
        return "unknown"


# Defaults that depend on the device: (on CUDA, on the CPU).
DEFAULTS = dict(tokens=(4096, 16), heads=(128, 64), topk=(1024, 128), pool=(65536, 4096),
                warmup=(3, 1), repeats=(20, 5))


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["tp", "dp"], required=True, help="tp: split the heads; dp: split the tokens")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tokens", type=int, help="T of the whole problem (4096 on CUDA, 16 on the CPU)")
    parser.add_argument("--heads", type=int, help="H of the whole problem (128 on CUDA, 64 on the CPU)")
    parser.add_argument("--topk", type=int, help="candidates per token (1024 on CUDA, 128 on the CPU)")
    parser.add_argument("--page-size", type=int, default=64)
    parser.add_argument("--pool", type=int, help="latent rows written to the cache (65536 on CUDA, 4096 on the CPU)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, help="untimed runs first (3 on CUDA, 1 on the CPU)")
    parser.add_argument("--repeats", type=int, help="timed runs; the median is reported (20 on CUDA, 5 on the CPU)")
    parser.add_argument("--json", metavar="PATH", help="rank 0 writes the timings here")
    args = parser.parse_args()
    for name, (on_cuda, on_cpu) in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, on_cuda if args.device == "cuda" else on_cpu)
    return args


def main() -> None:
    args = parse_args()
    device = init_distributed(args.device)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    try:
        # Check the split before any work, so that every rank fails alike.
        shard_bounds(args.mode, tokens=args.tokens, heads=args.heads, world_size=world_size, rank=rank)
        problem = make_problem(tokens=args.tokens, heads=args.heads, topk=args.topk, page_size=args.page_size,
                               pool=args.pool, seed=args.seed, device=device)
        shard = shard_problem(problem, args.mode, world_size=world_size, rank=rank)

        # The sharded run and the gather, checked on rank 0 against one call on the full problem.
        output, out_lse, plan = run_prefill(shard)
        full_output, full_lse = gather_result(output, out_lse, args.mode, world_size)
        if rank == 0:
            ref_output, ref_lse, _ = run_prefill(problem)
            row_err, lse_err = contract_errors(full_output, full_lse, ref_output, ref_lse)
            bitwise = torch.equal(full_output, ref_output) and torch.equal(full_lse, ref_lse)
            del ref_output, ref_lse

        # Timings: the op on this rank's share, with the GPU's L2 cache flushed before each call (a
        # 512 MB memset; nothing on the CPU); then the all-gathers, with all ranks lined up first.
        l2_flush = torch.empty(512 << 20 if device.type == "cuda" else 0, dtype=torch.uint8, device=device)
        op_us = median_us(lambda: run_prefill(shard, output, out_lse), device, warmup=args.warmup,
                          repeats=args.repeats, before=l2_flush.zero_)
        gathered_output = output.new_empty(world_size, *output.shape)
        gathered_lse = out_lse.new_empty(world_size, *out_lse.shape)

        def line_up():
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            dist.barrier()

        collective_us = median_us(lambda: all_gather_shards(output, out_lse, gathered_output, gathered_lse), device,
                                  warmup=args.warmup, repeats=args.repeats, before=line_up)
        per_rank = [None] * world_size
        dist.all_gather_object(per_rank, dict(rank=rank, op_us=op_us, collective_us=collective_us,
                                              tokens=shard.q.shape[0], heads=shard.q.shape[1],
                                              head_tiles=plan["head_tiles"], kernel=plan["kernel"]))

        if rank == 0:
            device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
            print(f"{args.mode} over {world_size} rank(s) on {device_name} ({dist.get_backend()}): T={args.tokens} "
                  f"H={args.heads} topk={args.topk}, per rank T={shard.q.shape[0]} H={shard.q.shape[1]}")
            print(f"median of {args.repeats} after {args.warmup} warm-up runs:")
            for row in per_rank:
                print(f"  rank {row['rank']}: op {row['op_us']:.1f} us (ht={row['head_tiles']} {row['kernel']}), "
                      f"all-gather of output and LSE {row['collective_us']:.1f} us")
            print(f"gathered vs one call on the full problem: max row rel error {row_err:.2e}, "
                  f"max LSE error {lse_err:.2e}{' (bitwise equal)' if bitwise else ''}")
            if args.json:
                meta = dict(device=device_name, world_size=world_size, mode=args.mode, commit=git_commit(),
                            date=datetime.date.today().isoformat(), torch=torch.__version__,
                            backend=dist.get_backend(), tokens=args.tokens, heads=args.heads, topk=args.topk,
                            page_size=args.page_size, pool=args.pool, warmup=args.warmup, repeats=args.repeats,
                            max_row_rel_error=row_err, max_lse_error=lse_err, bitwise_equal_to_full_call=bitwise)
                with open(args.json, "w") as f:
                    json.dump(dict(meta=meta, rows=per_rank), f, indent=1)
            if not (row_err <= 1e-2 and lse_err <= 1e-3):
                raise SystemExit("FAILED: the gathered result is outside the precision contract")
            print("OK")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
