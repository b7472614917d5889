"""The prefill split over processes with torch.distributed (examples/multi_gpu.py): heads over
ranks (tp) and tokens over ranks (dp), all-gathered.

Two ranks run both splits; the parent process then checks that every rank's gathered result
holds, at each rank's place, exactly the bits of a single-process call on that rank's shard, and
that it meets the precision contract (docs/contract.md section 11) against the float64 reference
on the whole problem. On the CPU with gloo always; with nccl on two GPUs when there are two."""
import importlib.util
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from helpers import assert_matches_reference
from torch_ops.reference import sparse_mla_prefill_reference

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "multi_gpu.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("cake_multi_gpu_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


multi_gpu = _load_example()

MODES = ("tp", "dp")
# Small enough for the CPU kernel on a 2-core machine: 32 heads or 4 tokens per rank, a cache that
# is not a whole number of pages of written rows, candidate lists of two 64-slot chunks.
CPU_SHAPE = dict(tokens=8, heads=64, topk=70, page_size=64, pool=300, seed=1)
GPU_SHAPE = dict(tokens=256, heads=128, topk=512, page_size=64, pool=8192, seed=2)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, device_type: str, shape: dict, out_dir: str) -> None:
    """One rank, as torchrun would start it: the example's own setup, split and gather."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world_size), CAKE_DIST_TIMEOUT_S="60")
    torch.set_num_threads(1)
    device = multi_gpu.init_distributed(device_type)
    try:
        problem = multi_gpu.make_problem(**shape, device=device)
        for mode in MODES:
            shard = multi_gpu.shard_problem(problem, mode, world_size=world_size, rank=rank)
            output, out_lse, plan = multi_gpu.run_prefill(shard)
            full_output, full_lse = multi_gpu.gather_result(output, out_lse, mode, world_size)
            torch.save(dict(full_output=full_output.cpu(), full_lse=full_lse.cpu(), head_tiles=plan["head_tiles"]),
                       os.path.join(out_dir, f"{mode}_rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _spawn(world_size: int, device_type: str, shape: dict, out_dir: pathlib.Path, timeout_s: float) -> None:
    """Run _worker on `world_size` processes; fail (and stop them) if one fails or they overrun."""
    context = mp.start_processes(_worker, args=(world_size, _free_port(), device_type, shape, str(out_dir)),
                                 nprocs=world_size, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    try:
        while not context.join(timeout=1.0):  # raises if a process failed
            if time.monotonic() > deadline:
                pytest.fail(f"{world_size} ranks did not finish within {timeout_s} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.terminate()
        for process in context.processes:
            process.join(10)
            if process.is_alive():
                process.kill()
                process.join()


def _check_gathered(out_dir: pathlib.Path, shape: dict, world_size: int, device: torch.device) -> None:
    problem = multi_gpu.make_problem(**shape, device=device)
    ref_output, ref_lse = sparse_mla_prefill_reference(problem.q, problem.kv_cache, problem.indices, problem.sm_scale,
                                                       topk_length=problem.topk_length, attn_sink=problem.attn_sink)
    for mode in MODES:
        saved = [torch.load(out_dir / f"{mode}_rank{rank}.pt") for rank in range(world_size)]
        for rank in range(world_size):
            shard = multi_gpu.shard_problem(problem, mode, world_size=world_size, rank=rank)
            output, out_lse, _ = multi_gpu.run_prefill(shard, head_tiles=saved[rank]["head_tiles"])
            first, end = multi_gpu.shard_bounds(mode, tokens=shape["tokens"], heads=shape["heads"],
                                                world_size=world_size, rank=rank)
            place = (slice(None), slice(first, end)) if mode == "tp" else (slice(first, end),)
            for gathered in saved:  # every rank holds the whole result
                assert gathered["full_output"].shape == (shape["tokens"], shape["heads"], 512)
                assert torch.equal(gathered["full_output"][place], output.cpu()), f"{mode}: rank {rank}'s output"
                assert torch.equal(gathered["full_lse"][place], out_lse.cpu()), f"{mode}: rank {rank}'s LSE"
        assert_matches_reference(saved[0]["full_output"], saved[0]["full_lse"], ref_output, ref_lse)


def test_shard_bounds():
    assert multi_gpu.shard_bounds("tp", tokens=8, heads=128, world_size=2, rank=1) == (64, 128)
    assert multi_gpu.shard_bounds("tp", tokens=8, heads=128, world_size=8, rank=3) == (48, 64)
    assert multi_gpu.shard_bounds("dp", tokens=8, heads=48, world_size=4, rank=2) == (4, 6)
    with pytest.raises(ValueError, match="^heads"):
        multi_gpu.shard_bounds("tp", tokens=8, heads=48, world_size=2, rank=0)  # 24 heads per rank
    with pytest.raises(ValueError, match="^heads"):
        multi_gpu.shard_bounds("tp", tokens=8, heads=64, world_size=3, rank=0)
    with pytest.raises(ValueError, match="^tokens"):
        multi_gpu.shard_bounds("dp", tokens=9, heads=64, world_size=2, rank=0)
    with pytest.raises(ValueError, match="^mode"):
        multi_gpu.shard_bounds("pp", tokens=8, heads=64, world_size=2, rank=0)


def test_two_ranks_cpu_gloo(tmp_path):
    _spawn(2, "cpu", CPU_SHAPE, tmp_path, timeout_s=180)
    _check_gathered(tmp_path, CPU_SHAPE, 2, torch.device("cpu"))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_two_ranks_cuda_nccl(tmp_path):
    _spawn(2, "cuda", GPU_SHAPE, tmp_path, timeout_s=300)
    _check_gathered(tmp_path, GPU_SHAPE, 2, torch.device("cuda", 0))


def test_example_command_line(tmp_path):
    """The script itself under the launcher, on the CPU: it checks its result and writes the timings."""
    json_path = tmp_path / "timings.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(EXAMPLE),
               "--device", "cpu", "--mode", "dp", "--tokens", "8", "--heads", "32", "--topk", "70", "--pool", "300",
               "--warmup", "1", "--repeats", "2", "--json", str(json_path)]
    # Its own session, so that on a timeout the launcher and both ranks can be stopped together.
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               cwd=ROOT, start_new_session=True, env=dict(os.environ, CAKE_DIST_TIMEOUT_S="60"))
    try:
        log, _ = process.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail("the example did not finish within 180 s")
    assert process.returncode == 0, log
    assert "\nOK\n" in log, log
    recorded = json.loads(json_path.read_text())
    meta, rows = recorded["meta"], recorded["rows"]
    assert (meta["world_size"], meta["mode"], meta["backend"], meta["tokens"], meta["heads"]) == (2, "dp", "gloo", 8, 32)
    assert meta["max_row_rel_error"] <= 1e-2 and meta["max_lse_error"] <= 1e-3
    assert [row["rank"] for row in rows] == [0, 1]
    assert all(row["op_us"] > 0 and row["collective_us"] > 0 and row["tokens"] == 4 for row in rows)
