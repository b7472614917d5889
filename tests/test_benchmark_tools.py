"""The benchmarks' GPU-free paths: the prefill benchmark's plot from the recorded H200 run, the
decode benchmark's command line, its kernel names and its forced split counts, the item / block
cost fit, the item trace summary, the accuracy script on the CPU; on a GPU, the decode benchmark's CUDA-graph replay."""
import gzip
import importlib
import json
import math
import os
import pathlib
import random
import statistics
import subprocess
import sys
import tarfile

import pytest
import torch

import torch_ops
from helpers import import_benchmark

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_plot_from_recorded_json(tmp_path):
    recorded = ROOT / "docs" / "data" / "bench_h200_7baff22.json"
    rows = json.loads(recorded.read_text())["rows"]
    assert {r["H"] for r in rows} == {16, 64, 128}
    out = tmp_path / "plot.png"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_prefill.py"), "--from-json", str(recorded),
                    "--plot", str(out)], check=True)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 10_000


def test_decode_benchmark_command_line():
    """The decode benchmark imports (it reuses bench_prefill's helpers) and lists its rows."""
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_decode.py"), "--help"], check=True,
                            capture_output=True, text=True, cwd=ROOT / "benchmarks")
    assert "--grid" in result.stdout and "128x128x2048" in result.stdout and "64x8x4096" in result.stdout
    assert "--head-tiles" in result.stdout


def test_decode_benchmark_refuses_a_malformed_row():
    """A row that is not three positive integers joined by x is refused, naming --rows, before the
    benchmark needs a GPU."""
    for row, message in (("1x64", "--rows: expected TxHxCANDIDATES"), ("1x0x2048", "--rows: every part must be positive")):
        result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_decode.py"), "--rows", row],
                                capture_output=True, text=True, cwd=ROOT / "benchmarks")
        assert result.returncode == 2 and message in result.stderr, (row, result.returncode, result.stderr[-400:])


def test_accuracy_script_on_the_cpu(tmp_path, monkeypatch, capsys):
    """benchmarks/accuracy.py on the CPU kernels: every row written, errors within the contract, the
    JSON's rows one per shape and scale, the decode too (a split-K plan); then prefills that leave a
    row unwritten, are 5% off, return -inf LSEs or LSEs 1.0 off are each reported and fail the run."""
    accuracy = import_benchmark("accuracy")
    out = tmp_path / "acc.json"
    small = ["--device", "cpu", "--tokens", "3", "--heads", "16", "--topk", "64", "--pool", "256", "--json", str(out)]
    assert accuracy.main(small + ["--scales", "1", "4"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("passed: 2 shapes, worst row error ")
    recorded = json.loads(out.read_text())
    assert [(r["T"], r["H"], r["topk"], r["scale"]) for r in recorded["rows"]] == [(3, 16, 64, 1.0), (3, 16, 64, 4.0)]
    for row in recorded["rows"]:
        assert row["rows"] == 3 * 16 and row["nan_rows"] == 0 and row["lse_inf_mismatch"] == 0
        assert 0 < row["max"] <= 1e-2 and row["median"] <= row["p99"] <= row["max"] and row["lse_max"] <= 1e-3
    assert recorded["meta"]["commit"] and recorded["meta"]["pool"] == 256 and recorded["meta"]["op"] == "prefill"
    assert "--scales 1 4" in recorded["meta"]["command"]
    # A row's inputs depend on its shape and scale only: scale 4 alone gives the same errors.
    assert accuracy.main(small + ["--scales", "4"]) == 0
    assert json.loads(out.read_text())["rows"][0] == recorded["rows"][1]
    # The decode at its planned split count (one token, 8 heads: a split-K plan on the CPU).
    assert accuracy.main(["--op", "decode", "--device", "cpu", "--tokens", "1", "--heads", "8", "--topk", "256",
                          "--scales", "1", "--pool", "512", "--json", str(out)]) == 0
    row = json.loads(out.read_text())["rows"][0]
    assert row["op"] == "decode" and row["plan"]["num_splits"] > 1 and row["rows"] == 8 and row["nan_rows"] == 0
    assert 0 < row["max"] <= 1e-2 and row["kernel"] == f"cpu, {row['plan']['num_splits']} splits"

    real = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill

    def spoiled(spoil):
        def prefill(q, cache, indices, output, out_lse, *args, **kwargs):
            plan = real(q, cache, indices, output, out_lse, *args, **kwargs)
            spoil(output, out_lse)
            return plan
        return prefill

    cases = [(lambda o, lse: o[1, 2].fill_(float("nan")), lambda r: r["nan_rows"] == 1, "1 NaN rows"),
             (lambda o, lse: o.mul_(1.05), lambda r: r["max"] > 1e-2, "row error"),
             (lambda o, lse: lse.fill_(-math.inf), lambda r: r["lse_inf_mismatch"] == 3 * 16, "-inf LSE"),
             (lambda o, lse: lse.add_(1.0), lambda r: r["lse_max"] > 1e-3, "LSE error")]
    for spoil, seen, reason in cases:
        monkeypatch.setattr(torch_ops, "cake_sparse_mla_sm120_dsv4_nvfp4_prefill", spoiled(spoil))
        assert accuracy.main(small + ["--scales", "1"]) == 1
        lines = capsys.readouterr().out.splitlines()
        assert lines[-1].startswith("FAILED: 1 shapes") and reason in lines[-2], lines[-2:]
        assert seen(json.loads(out.read_text())["rows"][0])


def test_host_path_benchmark_command_line():
    """The host-path benchmark imports (bench_prefill's helpers, the decode planner) and lists its
    layers and rows."""
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "host_path.py"), "--help"], check=True,
                            capture_output=True, text=True, cwd=ROOT / "benchmarks")
    assert "--rows" in result.stdout and "--repeats" in result.stdout


def test_pool_reach_command_line():
    """The pool-size benchmark imports (bench_prefill's helpers), lists its pools, and refuses a
    pool larger than the benchmark's before it needs a GPU."""
    script = str(ROOT / "benchmarks" / "pool_reach.py")
    result = subprocess.run([sys.executable, script, "--help"], check=True, capture_output=True, text=True,
                            cwd=ROOT / "benchmarks")
    assert "--pools" in result.stdout
    bad = subprocess.run([sys.executable, script, "--pools", "65537"], capture_output=True, text=True,
                         cwd=ROOT / "benchmarks")
    assert bad.returncode != 0 and "--pools: 65537" in bad.stderr


def test_mode_probe_command_line_and_verdicts():
    """mode_probe.py refuses a malformed shape or a single placement before it needs a GPU, and its
    summary tells times that follow the placement (each placement's passes agree, the placements
    differ) from times that follow the time (a mode change inside a pass, or the second pass
    moved as a whole) and from neither."""
    script = str(ROOT / "benchmarks" / "mode_probe.py")
    for argv, message in ((["--shape", "4096x64"], "--shape: expected TxHxTOPK"),
                          (["--shape", "4096x0x512"], "--shape: every part must be positive"),
                          (["--placements", "1"], "--placements: expected 2 or more"),
                          (["--idle-ms", "-1"], "--idle-ms: expected a finite value of 0 or more, got -1.0")):
        bad = subprocess.run([sys.executable, script, *argv], capture_output=True, text=True, cwd=ROOT / "benchmarks")
        assert bad.returncode != 0 and message in bad.stderr, bad.stderr
    mode_probe = import_benchmark("mode_probe")
    fast, slow = 650.0, 668.0
    by_place = mode_probe.summarise([fast, slow, fast + 1, slow + 1], [fast + 0.5, slow - 0.5, fast, slow + 1.5])
    assert by_place["verdict"] == "placement" and by_place["between"] > 0.02 and by_place["within"] < 0.003
    assert mode_probe.summarise([fast] * 4, [slow] * 4)["verdict"] == "time"
    # A switch after two placements of the first pass: a change in time, not two kinds of placement.
    switched = mode_probe.summarise([fast, fast] + [slow] * 6, [slow] * 8)
    assert switched["verdict"] == "time" and switched["within"] > 0.02
    late = mode_probe.summarise([fast] * 8, [slow, slow] + [fast] * 6)
    assert late["verdict"] == "time"
    assert mode_probe.summarise([fast, fast + 1], [fast + 1, fast])["verdict"] == "neither"
    with pytest.raises(ValueError, match="two or more placements"):
        mode_probe.summarise([fast], [slow])
    offsets = [mode_probe.page_offset(k) for k in range(10)]
    assert len(set(offsets)) == 10 and offsets[0] == 0 and all(o % 16 == 0 for o in offsets)


def test_drift_probe_command_line_and_statistics():
    """drift_probe.py (and bench_prefill.py's --idle-ms) refuse malformed arguments before they need
    a GPU; drift_probe's correlation is Pearson's."""
    script = str(ROOT / "benchmarks" / "drift_probe.py")
    for argv, message in ((["--shape", "4096x64"], "--shape: expected TxHxTOPK"),
                          (["--block", "0"], "--block: expected 1..--calls (2000), got 0"),
                          (["--calls", "10", "--block", "11"], "--block: expected 1..--calls (10), got 11"),
                          (["--calls", "0"], "--calls: expected 1 or more, got 0"),
                          (["--spin-cycles", "-1"], "--spin-cycles: expected 0 or more, got -1"),
                          (["--idle-ms", "nan"], "--idle-ms: expected a finite value of 0 or more, got nan")):
        bad = subprocess.run([sys.executable, script, *argv], capture_output=True, text=True, cwd=ROOT / "benchmarks")
        assert bad.returncode != 0 and message in bad.stderr, bad.stderr
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_prefill.py"), "--idle-ms", "inf"],
                         capture_output=True, text=True, cwd=ROOT / "benchmarks")
    assert bad.returncode != 0 and "--idle-ms: expected a finite value of 0 or more, got inf" in bad.stderr
    drift_probe = import_benchmark("drift_probe")
    rng = random.Random(7)
    xs = [rng.gauss(0, 1) for _ in range(200)]
    assert drift_probe.correlation(xs, [2 * x + 3 for x in xs]) == pytest.approx(1.0)
    assert drift_probe.correlation(xs, [-x for x in xs]) == pytest.approx(-1.0)
    ys = [rng.gauss(0, 1) for _ in range(200)]
    expected = statistics.correlation(xs, ys)
    assert drift_probe.correlation(xs, ys) == pytest.approx(expected) and abs(expected) < 0.3
    assert drift_probe.correlation(xs, [1.0] * 200) == 0.0


def test_drift_probe_runs_and_records_on_the_cpu(tmp_path, monkeypatch):
    """drift_probe.py's whole path with its GPU pieces replaced: the CPU prefill on a small shape,
    events that report fixed times and a spin that runs nothing. Its JSON holds the blocks with
    of_matmul, the summary (the spin's clock where it spins) and run_meta's provenance, which
    needs no --repeats (drift_probe has none)."""
    drift_probe = import_benchmark("drift_probe")
    bench_prefill = sys.modules["bench_prefill"]
    latent = torch.randn(4, 64, 512).to(torch.bfloat16)
    cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent, kv_layout="HND")
    flush = torch.empty(1024, dtype=torch.uint8)
    monkeypatch.setattr(drift_probe, "prepare_run", lambda: (flush, 5e14, "a CPU", latent, cache))

    def cpu_inputs(num_tokens, num_heads, topk):
        indices = torch.stack([torch.randperm(256)[:topk] for _ in range(num_tokens)]).to(torch.int32)
        return dict(q=torch.randn(num_tokens, num_heads, 512).to(torch.bfloat16), indices=indices,
                    sink=torch.randn(num_heads), output=torch.empty(num_tokens, num_heads, 512, dtype=torch.bfloat16),
                    out_lse=torch.empty(num_tokens, num_heads))

    monkeypatch.setattr(drift_probe, "prefill_inputs", cpu_inputs)
    monkeypatch.setattr(bench_prefill, "matmul_ceiling", lambda flush: 5e14)
    clock = iter(range(10**6))

    class Event:  # each record() a millisecond after the last, so every interval reads 1000 us
        def __init__(self, enable_timing):
            pass

        def record(self):
            self.at = next(clock)

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return float(end.at - self.at)

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: None)
    for spin in (0, 100000):
        path = tmp_path / f"drift_{spin}.json"
        monkeypatch.setattr(sys, "argv", ["drift_probe.py", "--shape", "2x16x64", "--calls", "7", "--block", "3",
                                          "--warmup", "1", "--spin-cycles", str(spin), "--json", str(path)])
        drift_probe.main()
        run = json.loads(path.read_text())
        assert [row["first_call"] for row in run["rows"]] == [0, 3]  # the short last block dropped
        flops = 4 * 2 * 16 * 64 * 512
        for row in run["rows"]:
            assert row["prefill_us"] == row["flush_us"] == 1000.0
            assert row["of_matmul"] == pytest.approx(flops / 1e-3 / 5e14)
            assert ("spin_clock_mhz" in row) == bool(spin)
        assert len(run["prefill_us"]) == len(run["flush_us"]) == len(run["spin_us"]) == 7
        assert run["summary"]["prefill_us_median"] == 1000.0
        assert ("r_prefill_spin" in run["summary"]) == bool(spin)
        meta = run["meta"]
        assert (meta["calls"], meta["block"], meta["spin_cycles"], meta["idle_ms"]) == (7, 3, spin, 0.0)
        assert meta["repeats"] is None and meta["device"] == "a CPU" and "drift_probe.py" in meta["command"]


@pytest.mark.parametrize("num_heads", [8, 16, 24, 32, 48, 64, 96, 128])
def test_decode_benchmark_head_tiles_are_what_the_decode_plans(num_heads):
    """--head-tiles times the head tiles decode_head_tiles(H) allows: the decode's planner takes
    each of them as given (and refuses one H does not allow, naming head_tiles)."""
    allowed = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_decode_head_tiles(num_heads)
    assert 1 in allowed
    for tiles in (1, 2, 4):
        kwargs = dict(num_tokens=1, num_heads=num_heads, topk=2048, num_sms=132, device="cpu", head_tiles=tiles)
        if tiles in allowed:
            assert torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode(**kwargs)["head_tiles"] == tiles
        else:
            with pytest.raises(ValueError, match="head_tiles"):
                torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode(**kwargs)


def test_decode_benchmark_kernel_names():
    """--kernels names each kernel by its function, without namespaces, template arguments or
    parameters (an anonymous namespace included)."""
    bench_decode = import_benchmark("bench_decode")
    name = bench_decode.short_kernel_name
    assert name("void cake::cuda::hopper::sparse_mla_attention_hopper_kernel<true>(cake::cuda::DecodeParams)") == \
        "sparse_mla_attention_hopper_kernel"
    assert name("void cake::cuda::(anonymous namespace)::decode_merge_kernel(cake::cuda::DecodeParams)") == \
        "decode_merge_kernel"
    assert name("sparse_mla_decode_split_kernel") == "sparse_mla_decode_split_kernel"


def test_decode_benchmark_split_range_is_what_the_decode_accepts():
    """--splits times only the split counts the decode accepts: every count in split_range plans,
    one below and one above raise."""
    bench_decode = import_benchmark("bench_decode")
    for candidates in (1, 64, 100, 512, 1000, 2048, 4096):
        for max_splits in (1, 4, 16):
            accepted = bench_decode.split_range(candidates, max_splits)
            if len(accepted) == 0:  # more than 16 x max_splits chunks: the op refuses the call
                with pytest.raises(ValueError):
                    torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode(num_tokens=4, num_heads=64, topk=candidates, num_sms=132, device="cpu",
                                                         max_splits=max_splits)
                continue
            for num_splits in accepted:
                plan = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode(num_tokens=4, num_heads=64, topk=candidates, num_sms=132, device="cpu",
                                                            max_splits=max_splits, num_splits=num_splits)
                assert plan["num_splits"] == num_splits
            for outside in (accepted[0] - 1, accepted[-1] + 1):
                with pytest.raises(ValueError, match="num_splits"):
                    torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_decode(num_tokens=4, num_heads=64, topk=candidates, num_sms=132, device="cpu",
                                                         max_splits=max_splits, num_splits=outside)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_decode_benchmark_graph_replays_the_decode():
    """--graph times replays of the graph capture_graph makes: they rerun the split kernel and the
    merge on the inputs as they are at replay time (changed in place) and repeat bit for bit."""
    bench_decode = import_benchmark("bench_decode")
    from helpers import assert_replays_follow_inplace_changes
    from test_decode_cuda import graph_problem
    problem = graph_problem(1)
    output = torch.empty(3, 64, 512, device="cuda", dtype=torch.bfloat16)
    out_lse = torch.empty(3, 64, device="cuda")
    mid_out, mid_lse = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch(3, 64, 800, 100,
                                                                                         device="cuda")

    def decode():  # 6 splits: the split kernel and the merge both run
        torch_ops.sparse_mla_decode(problem.q, problem.kv_cache, problem.indices, output, out_lse, problem.sm_scale,
                                    mid_out=mid_out, mid_lse=mid_lse, num_splits=6, **problem.kwargs)

    assert_replays_follow_inplace_changes(bench_decode.capture_graph(decode), problem, graph_problem, output, out_lse)


def test_item_cost_fit_recovers_the_split():
    """Rows made from a known cost per item and per block give those costs back; rows of other
    kernels, dual-cache rows and grids of fewer than two items an SM are left out."""
    item_cost = import_benchmark("item_cost")
    item_us, block_us, sms = 6.25, 2.5, 100
    rows = []
    for topk in (100, 512, 1000):
        blocks = -(-topk // 64)
        for num_tokens, num_heads in ((800, 64), (400, 128)):
            items_per_sm = num_tokens * num_heads / 64 / sms
            rows.append(dict(T=num_tokens, H=num_heads, topk=topk, kernel="hopper",
                             us=(item_us + block_us * blocks) * items_per_sm))
    rows.append(dict(T=800, H=64, topk=256, kernel="portable", us=1.0))
    rows.append(dict(T=800, H=64, topk=256, kernel="hopper", dual=True, us=1.0))
    rows += [dict(T=100, H=64, topk=topk, kernel="hopper", us=50.0 + topk) for topk in (128, 512)]  # 1 item an SM
    fits = item_cost.fit_item_cost(rows, sms)
    assert set(fits) == {(800, 64), (400, 128)}
    for fitted_item, fitted_block, shares in fits.values():
        assert fitted_item == pytest.approx(item_us) and fitted_block == pytest.approx(block_us)
        assert [topk for topk, _, _ in shares] == [100, 512, 1000]
        assert shares[0][2] == pytest.approx(item_us / (item_us + 2 * block_us))


def test_item_cost_of_the_recorded_run():
    """The command line on the recorded 86f428e run: a row per (T, H) with positive costs."""
    recorded = ROOT / "docs" / "data" / "bench_h200_86f428e.json"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "item_cost.py"), str(recorded)], check=True,
                            capture_output=True, text=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith("| 4096 |")]
    assert len(lines) == 2
    for line in lines:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert float(cells[2]) > 0 and float(cells[3]) > 0


def synthetic_trace(parts_per_item, start=1000):
    """A trace build's output for items of two blocks, the leader's clocks made from known parts
    (pair, entry, sums, q, next_q, stored, to_next): a `LAUNCH 0` line of junk, then `LAUNCH 1`."""
    lines = ["LAUNCH 0", "TRACE 0 0 1 2 3 4 5 6 0 0", "LAUNCH 1"]
    t = start
    rows = {}
    for i, (pair, entry, sums, q, next_q, stored, to_next) in enumerate(parts_per_item):
        g = 2 * i
        rows[g] = [t, t + 10, t + 20, t + 30, t + 40, t + pair, 0, 0]
        e0 = t + pair + entry
        rows[g + 1] = [e0, e0 + sums, e0 + sums + q, e0 + sums + q + next_q, e0 + sums + q + next_q + stored,
                       0, t + 5, t + 6]
        t = rows[g + 1][4] + to_next
    rows[2 * len(parts_per_item)] = [t, t + 10, t + 20, t + 30, t + 40, t + 50, 0, 0]
    lines += [f"TRACE 0 {row} " + " ".join(str(c) for c in clocks) for row, clocks in sorted(rows.items())]
    lines += ["TRACE 2 0 7 8 9 10 11 0 0 0", "some other output"]
    return "\n".join(lines) + "\n"


def test_trace_small_recovers_the_steps(tmp_path):
    """Chunk steps written into a synthetic small-heads timeline (units of three chunks) come back
    from the last launch, CTA 0's first unit left out; periods and the three hand-overs follow from
    the points, with their chunk offsets; each role's chunks that a unit boundary touches (the
    attend's last of a unit, the converters' first two) are summarised apart; a cut line is left
    out; the command line prints both tables, and a log without STRACE lines is an error."""
    trace_small = import_benchmark("trace_small")
    attend_steps, converter_steps = [100, 200, 30, 40, 500, 60], [10, 20, 1000, 5, 7]

    def start(chunk):  # the attend's chunk start: a unit's end adds 300 cycles to its period
        return 10000 + 2000 * chunk + 300 * (chunk // 3)

    def top(chunk, role):  # a converter's chunk top: a unit's first chunk adds 400 (its Q)
        return 8500 + 2000 * chunk + 400 * ((chunk + 2) // 3) + 3 * role

    lines = ["PROBLEM 4096 16 192", "LAUNCH 0", "STRACE 0 0 1 2 3 4 5 6 7 0", "LAUNCH 1"]
    for chunk in range(9):
        attend = [start(chunk)]
        for step in attend_steps:
            attend.append(attend[-1] + step)
        lines.append(f"STRACE 0 {chunk} " + " ".join(str(c) for c in attend + [0]))
        for role in (1, 2):
            clocks = [top(chunk, role)]
            for step in converter_steps:
                clocks.append(clocks[-1] + step)
            inside = [clocks[2] + 300, clocks[2] + 700] if role == 1 else [0, 0]  # converter 0's points 6, 7
            lines.append(f"STRACE {role} {chunk} " + " ".join(str(c) for c in clocks + inside))
    lines += ["STRACE 0 9 1 2", "other output"]
    text = "\n".join(lines) + "\n"
    launches = trace_small.parse_launches(text)
    assert len(launches) == 2 and trace_small.problem_of(text) == (4096, 16, 192)
    assert 9 not in launches[-1][0]
    rows = trace_small.chunk_parts(launches[-1], 3)
    assert [row["chunk"] for row in rows] == [3, 4, 5, 6, 7, 8]
    for row in rows:
        c = row["chunk"]
        assert [row[name] for name, *_ in trace_small.ATTEND_STEPS] == attend_steps
        assert [row[f"C1_{name}"] for name, *_ in trace_small.CONVERTER_STEPS] == converter_steps
        assert [row[f"C0_{name}"] for name, *_ in trace_small.CONVERT_PARTS] == [300, 400, 300]
        assert all(f"C1_{name}" not in row for name, *_ in trace_small.CONVERT_PARTS)  # not recorded
        assert row["k_full_seen"] == start(c) + 100 - (top(c, 2) + sum(converter_steps))
        assert row["k_empty_seen"] == top(c, 1) + 30 - (start(c - 2) + sum(attend_steps[:5]))
        assert row["s_empty_seen"] == top(c, 1) + 1035 - (start(c - 1) + 300)
        assert row["A_boundary"] == (c % 3 == 2) and row["C_boundary"] == (c % 3 in (0, 1))
        if c < 8:
            assert row["A_period"] == start(c + 1) - start(c) and row["C0_period"] == top(c + 1, 1) - top(c, 1)
    medians = trace_small.summary(rows)
    assert medians["steady"]["A_pv"] == 500 and medians["steady"]["A_period"] == 2000
    assert medians["boundary"]["A_period"] == 2300
    assert medians["steady"]["C0_period"] == 2000 and medians["boundary"]["C0_period"] == 2200
    log = tmp_path / "small.log"
    log.write_text(text)
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "trace_small.py"), str(log)], check=True,
                            capture_output=True, text=True)
    assert "steady chunks" in result.stdout and "boundary chunks" in result.stdout
    assert "(3 chunks a unit)" in result.stdout
    log.write_text("no trace here\n")
    assert subprocess.run([sys.executable, str(ROOT / "benchmarks" / "trace_small.py"), str(log)],
                          capture_output=True, text=True).returncode == 2


def test_trace_items_recovers_the_parts(tmp_path):
    """Item parts written into a synthetic timeline come back per item, from the last launch; the
    median leaves the first item out; the command line prints a row per item."""
    trace_items = import_benchmark("trace_items")
    parts = [(9000, 50, 150, 100, 3500, 7000, 1500), (6800, 60, 160, 90, 3600, 6900, 1600),
             (6700, 70, 170, 95, 3700, 6800, 1700), (6900, 80, 180, 99, 3650, 7100, 1400)]
    text = synthetic_trace(parts)
    launches = trace_items.parse_launches(text)
    assert len(launches) == 2
    items = trace_items.item_parts(launches[-1])
    assert len(items) == len(parts)
    for item, (pair, entry, sums, q, next_q, stored, to_next) in zip(items, parts):
        assert (item["pair"], item["sums_exchanged"], item["q_confirmed"], item["epilogue_a"],
                item["epilogue_b"], item["to_next_pair"]) == (pair, sums, q, next_q, stored, to_next)
        assert item["period"] == pair + entry + sums + q + next_q + stored + to_next
    medians = trace_items.summary(items)
    assert medians["pair"] == 6800 and medians["epilogue_b"] == 6900
    log = tmp_path / "trace.log"
    log.write_text(text)
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "trace_items.py"), str(log)], check=True,
                            capture_output=True, text=True)
    assert len([line for line in result.stdout.splitlines() if line.startswith("| ") and line[2].isdigit()]) == 4
    empty = tmp_path / "empty.log"
    empty.write_text("no trace here\n")
    assert subprocess.run([sys.executable, str(ROOT / "benchmarks" / "trace_items.py"), str(empty)],
                          capture_output=True, text=True).returncode != 0


def run_trace_summary(log, text):
    """trace_items.py's summary of `text`, written to `log`."""
    log.write_text(text)
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "trace_items.py"), str(log)], check=True,
                          capture_output=True, text=True)


def multi_pair_trace(num_items=3, blocks_per_item=8, top_points=False, first_pair_scores=0, softmax_points=False,
                     scores_points=False, high_point=False):
    """A `PROBLEM 4096 64 512` trace of items of `blocks_per_item` blocks. Every pair's leader and
    follower steps, gaps and the dequant's block steps are fixed numbers, except in the first item
    (the kernel's start), whose are ten times longer. top_points: the dequant rows carry the block
    top's points 5 and 6 (3 and 3 + 5 cycles after the top), as logs from 2026-12-01 on do.
    first_pair_scores: cycles added to the follower's scores step in each item's first pair.
    softmax_points: the consumers' pair rows carry points 6 and 7 (logs from 2026-12-05 on): the
    leader's 120 and 170 cycles after its point 1 (its softmax step, 200 cycles, split 120 / 50 /
    30), the follower's 200 and 260 after its point 2 (350 cycles: 200 / 60 / 90).
    scores_points: every row carries 10 points (logs from `d8d664e` on), the follower's pair rows
    its points 8 and 9 70 and 100 cycles after its start (its scores step, 150 cycles, split
    70 / 30 / 50); high_point: and an 11th, its point 10, 40 cycles after its start."""
    lines = ["PROBLEM 4096 64 512", "LAUNCH 0", "TRACE 0 0 1 2 3 4 5 6 0 0", "LAUNCH 1"]
    leader_steps, follower_steps = (100, 200, 300, 400, 500), (150, 250, 350, 450, 550)
    rows = {0: {}, 1: {}, 2: {}}
    t = 10000
    for item in range(num_items):
        slow = 10 if item == 0 else 1
        g = item * blocks_per_item
        for row in range(g, g + blocks_per_item, 2):
            for role, steps in ((0, leader_steps), (1, follower_steps)):
                if role == 1 and row == g:
                    steps = (steps[0] + first_pair_scores,) + steps[1:]
                clocks = [t]
                for step in steps:
                    clocks.append(clocks[-1] + slow * step)
                rows[role][row] = clocks + [0, 0]
                if softmax_points:
                    base, (a, b) = (clocks[1], (120, 170)) if role == 0 else (clocks[2], (200, 260))
                    rows[role][row][6:8] = [base + slow * a, base + slow * b]
                if scores_points:
                    rows[role][row] += [clocks[0] + slow * d for d in (70, 100)] if role == 1 else [0, 0]
                if high_point:
                    rows[role][row] += [clocks[0] + slow * 40] if role == 1 else [0]
            t = rows[0][row][5] + slow * 70  # to the next pair
        e0 = t
        rows[0][g + blocks_per_item - 1] = [e0, e0 + 10, e0 + 20, e0 + 30, e0 + 40, 0, 0, 0]
        t = e0 + 40 + 900
        for block in range(g, g + blocks_per_item):
            top = 5000 + 1000 * block
            # events: 0 top, 1 low free, 3 low written, 4 high free, 2 high written
            low_free, low_done = top + slow * 11, top + slow * 11 + slow * 22
            high_free, high_done = low_done + slow * 33, low_done + slow * 33 + slow * 44
            top_points_at = [top + slow * 3, top + slow * 8] if top_points else [0, 0]
            rows[2][block] = [top, low_free, high_done, low_done, high_free, *top_points_at, 0]
    rows[0][num_items * blocks_per_item] = [t, t + 1, t + 2, t + 3, t + 4, t + 5, 0, 0]
    for role in (0, 1, 2):
        for clocks in rows[role].values():
            clocks += [0] * ((11 if high_point else 10 if scores_points else 8) - len(clocks))
        lines += [f"TRACE {role} {row} " + " ".join(str(c) for c in clocks) for row, clocks in sorted(rows[role].items())]
    return "\n".join(lines) + "\n"


def fused_trace(num_items=3, blocks_per_item=4, item_gap=0, pv_softmax=False):
    """A fused-kernel trace (`PROBLEM 4096 64 256`): block g's converter (role 2 + g % 2) records
    top 1000 g (+ item_gap at each item start), then its steps 10 / 500 / 50 / 200 / 300 cycles
    apart; PV warpgroup 0 waits 40 and runs 150 a block; each item's first block has the
    item-start points 100 apart in both converters' rows, and its last block PV's end points 7 /
    60 apart. With pv_softmax, PV warpgroup 0 also records point 6 (its weights written) 90 cycles
    after its wait."""
    rows = {role: {} for role in range(4)}
    for g in range(num_items * blocks_per_item):
        top = 1000 * g + item_gap * (g // blocks_per_item) + 1
        clocks = [top, top + 10, top + 510, top + 560, top + 760, top + 1060, 0, 0]
        rows[2 + g % 2][g] = clocks
        rows[0][g] = [top + 1100, top + 1140, top + 1290, 0, 0, 0, top + 1230 if pv_softmax else 0, 0]
        if g % blocks_per_item == 0:
            for role in (2, 3):
                row = rows[role].setdefault(g, [0] * 8)
                row[6], row[7] = top - 200, top - 100
        if g % blocks_per_item == blocks_per_item - 1:
            rows[0][g][3:6] = [top + 1300, top + 1307, top + 1367]
    lines = ["PROBLEM 4096 64 256", "LAUNCH 1"]
    lines += [f"TRACE {role} {row} " + " ".join(map(str, clocks)) for role in rows for row, clocks in sorted(rows[role].items())]
    return "\n".join(lines) + "\n"


def test_trace_items_splits_the_softmax_steps(tmp_path):
    """With the consumers' points 6 and 7 in its pair rows the summary splits the leader's and the
    follower's softmax steps (medians over the items after the first, the slow first item left
    out); a log without them has no such columns."""
    trace_items = import_benchmark("trace_items")
    pairs = trace_items.pair_parts(trace_items.parse_launches(multi_pair_trace(softmax_points=True))[-1], 8)
    assert pairs and all((p["L_ref_weights"], p["L_store_pv_issue"], p["L_fence_hand_over"]) == (120, 50, 30) for p in pairs)
    assert all((p["F_softmax_math"], p["F_store_fence"], p["F_publish_wait"]) == (200, 60, 90) for p in pairs)
    assert all(p["L_ref_weights"] + p["L_store_pv_issue"] + p["L_fence_hand_over"] == p["L_softmax"] for p in pairs)
    out = run_trace_summary(tmp_path / "split.log", multi_pair_trace(softmax_points=True)).stdout
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| pair |"))  # the first pair table
    names = [name.strip() for name in lines[header].strip("|").split("|")]
    row = dict(zip(names, [value.strip() for value in lines[header + 2].strip("|").split("|")]))
    assert (row["L_ref_weights"], row["F_store_fence"], row["F_publish_wait"]) == ("120", "60", "90")
    plain = run_trace_summary(tmp_path / "plain.log", multi_pair_trace()).stdout
    assert "L_ref_weights" not in plain and "F_softmax_math" not in plain


def test_trace_items_times_the_pairs_blocks_against_the_pair(tmp_path):
    """Each pair's blocks against the leader's start of the pair (items after the first): the
    second block's top, bookkeeping, halves free and written, the first block's high half written,
    the follower's QK^T done and the pair's end, as clocks minus that start; a log without the
    bookkeeping's points leaves that column out."""
    trace_items = import_benchmark("trace_items")
    text = multi_pair_trace(top_points=True)
    launch = trace_items.parse_launches(text)[-1]
    rows = trace_items.second_block_timeline(launch, 8)
    assert [row["row"] for row in rows] == [8, 10, 12, 14, 16, 18, 20, 22]
    for row in rows:
        start = launch[0][row["row"]][0]
        top = 5000 + 1000 * (row["row"] + 1)
        assert row["D2_top"] == top - start and row["D2_book_done"] == top + 8 - start
        assert (row["D2_low_free"], row["D2_low_written"]) == (top + 11 - start, top + 33 - start)
        assert (row["D2_high_free"], row["D2_high_written"]) == (top + 66 - start, top + 110 - start)
        assert row["D1_high_written"] == top - 1000 + 110 - start
        assert (row["F_scores_done"], row["L_pair_done"]) == (150, 1500)
    out = run_trace_summary(tmp_path / "timeline.log", text).stdout
    assert "8 pairs of the items after the first: the pair's blocks against the leader's start" in out
    # The items' first pairs (rows 8 and 16) apart: their second block's tile held the O.
    first = out[out.index("2 first pairs of those items: the same"):]
    header = first.splitlines()[1]
    names = [name.strip() for name in header.strip("|").split("|")]
    values = [int(v) for v in first.splitlines()[3].strip("|").split("|")]
    expected = trace_items.medians([row for row in rows if row["row"] in (8, 16)], names)
    assert dict(zip(names, values)) == {name: round(expected[name]) for name in names}
    plain = run_trace_summary(tmp_path / "plain.log", multi_pair_trace()).stdout
    header = next(line for line in plain.splitlines() if line.startswith("| D1_high_written"))
    assert "D2_book_done" not in header and "D2_top" in header and "D2_high_written_wg3" not in header
    assert all(row["D2_high_last_warp"] is None for row in rows)  # point 7 of these logs is 0
    # The other dequant warpgroup (role 3): its rows' high half written, 25 cycles after role 2's;
    # with point 7, each warpgroup's last warp 40 / 60 cycles after its thread 0.
    lines = []
    for line in text.splitlines():
        if line.startswith("TRACE 2 "):
            row, clocks = line.split()[2], line.split()[3:]
            high = int(clocks[2])
            clocks[7] = str(high + 40) if high else "0"
            lines.append("TRACE 2 " + row + " " + " ".join(clocks))
            clocks[2], clocks[7] = (str(high + 25), str(high + 25 + 60)) if high else ("0", "0")
            lines.append("TRACE 3 " + row + " " + " ".join(clocks))
        else:
            lines.append(line)
    both = "\n".join(lines) + "\n"
    rows = trace_items.second_block_timeline(trace_items.parse_launches(both)[-1], 8)
    assert rows and all(row["D2_high_written_wg3"] == row["D2_high_written"] + 25 for row in rows)
    assert all((row["D2_high_last_warp"], row["D2_high_last_warp_wg3"]) ==
               (row["D2_high_written"] + 40, row["D2_high_written"] + 85) for row in rows)
    assert ("| D2_high_written | D2_high_written_wg3 | D2_high_last_warp | D2_high_last_warp_wg3 |"
            in run_trace_summary(tmp_path / "both.log", both).stdout)


def test_trace_items_splits_the_followers_scores_step(tmp_path):
    """A log of 10 points a row: the follower's scores step split by its points 8 and 9 (its QK^T
    issued, the leader's reference seen, retired), in the pair table and, against the leader's
    start, in the pair's timeline; F_own_high (a 9-point log's point 8) stays out; logs of 8
    points leave the split out."""
    trace_items = import_benchmark("trace_items")
    text = multi_pair_trace(top_points=True, scores_points=True)
    launch = trace_items.parse_launches(text)[-1]
    pairs = trace_items.pair_parts(launch, 8)
    split = ["F_issue_wait", "F_reference_wait", "F_retire"]
    assert trace_items.medians(pairs, split + ["F_scores"]) == {
        "F_issue_wait": 70, "F_reference_wait": 30, "F_retire": 50, "F_scores": 150}
    assert all(p["F_own_high"] is None for p in pairs)
    rows = trace_items.second_block_timeline(launch, 8)
    assert {(row["F_issued"], row["F_reference_seen"]) for row in rows} == {(70, 100)}
    out = run_trace_summary(tmp_path / "scores.log", text).stdout
    assert "| F_issue_wait | F_reference_wait | F_retire |" in out
    assert "F_own_high" not in out
    assert "| D2_high_written | F_issued | F_reference_seen | F_scores_done |" in out
    plain = multi_pair_trace(top_points=True)
    assert all(p["F_retire"] is None for p in trace_items.pair_parts(trace_items.parse_launches(plain)[-1], 8))
    out = run_trace_summary(tmp_path / "plain.log", plain).stdout
    assert "F_retire" not in out and "F_issued" not in out
    assert "F_high" not in run_trace_summary(tmp_path / "scores.log", text).stdout
    # An 11th point: the follower's block's high half seen splits F_issue_wait in two.
    high = multi_pair_trace(top_points=True, scores_points=True, high_point=True)
    pairs = trace_items.pair_parts(trace_items.parse_launches(high)[-1], 8)
    assert trace_items.medians(pairs, ["F_high_wait", "F_high_issue", "F_issue_wait"]) == {
        "F_high_wait": 40, "F_high_issue": 30, "F_issue_wait": 70}
    out = run_trace_summary(tmp_path / "high.log", high).stdout
    assert "| F_issue_wait | F_high_wait | F_high_issue | F_reference_wait | F_retire |" in out
    assert "| D2_high_written | F_high_seen | F_issued |" in out


def test_trace_items_fused_steps(tmp_path):
    """--fused reads the fused kernel's points: each converter block's steps and the top-to-top
    period of its converter's blocks, PV's wait and MMA a block, the item starts of both
    converters and PV's item ends, over the items after the first."""
    log = tmp_path / "fused.log"
    log.write_text(fused_trace())
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "trace_items.py"), "--fused", str(log)],
                            check=True, capture_output=True, text=True)
    out = result.stdout
    assert "8 blocks of the items after the first" in out
    assert "| 10 | 500 | 50 | 200 | 300 | 1060 | 2000 | 40 | 150 |" in out
    assert "4 item starts after the first" in out and "| 100 |" in out
    assert "2 item ends after the first" in out and "| 7 | 60 |" in out


def test_trace_items_fused_softmax_on_pv(tmp_path):
    """A trace of the form with the softmax on the PV warpgroups (PV records point 6) is read with
    that form's step names: the converters' s_wait / logits and PV's softmax (1 to 6) and pv (6 to
    2); the other form's trace keeps its own."""
    log = tmp_path / "fused.log"
    log.write_text(fused_trace(pv_softmax=True))
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "trace_items.py"), "--fused", str(log)],
                         check=True, capture_output=True, text=True).stdout
    assert "the softmax on the PV warpgroups" in out
    assert "| tile_wait | nope | rope | s_wait | logits | block | period | block_wait | softmax | pv |" in out
    assert "| 10 | 500 | 50 | 200 | 300 | 1060 | 2000 | 40 | 90 | 60 |" in out
    trace_items = import_benchmark("trace_items")
    assert not trace_items.softmax_on_pv(trace_items.parse_launches(fused_trace())[-1])


def test_trace_items_fused_item_boundaries(tmp_path):
    """--fused also gives each converter's items whole and its block periods within an item apart
    from those across an item's end: 700 cycles more at each item start show in the item's length
    and in the boundary periods only."""
    trace_items = import_benchmark("trace_items")
    launch = trace_items.parse_launches(fused_trace(num_items=4, item_gap=700))[-1]
    items, periods = trace_items.fused_item_periods(launch, 4)
    assert sorted(i["item"] for i in items) == [4700] * 4  # items 1, 2 of both converters
    steady = [p["steady_period"] for p in periods if "steady_period" in p]
    boundary = [p["boundary_period"] for p in periods if "boundary_period" in p]
    assert steady == [2000] * 6 and sorted(boundary) == [2700] * 4
    log = tmp_path / "fused.log"
    log.write_text(fused_trace(num_items=4, item_gap=700))
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "trace_items.py"), "--fused", str(log)],
                         check=True, capture_output=True, text=True).stdout
    assert "4 items after the first (each converter, whole)" in out and "| 4700 |" in out
    assert "| steady_period | boundary_period |" in out and "| 2000 | 2700 |" in out


def test_trace_items_pairs_of_long_items(tmp_path):
    """A topk-512 trace (8 blocks an item, from its PROBLEM line): the item's pair time runs from
    its first pair's start to its last pair's end, the epilogue is read from its last block's row,
    and the steady-state pair and dequant-block medians leave the first item out."""
    trace_items = import_benchmark("trace_items")
    text = multi_pair_trace()
    assert trace_items.problem_of(text) == (4096, 64, 512)
    launch = trace_items.parse_launches(text)[-1]
    items = trace_items.item_parts(launch, 8)
    assert len(items) == 3
    assert items[1]["pair"] == 4 * 1500 + 3 * 70 and items[1]["epilogue_b"] == 10
    assert items[1]["to_next_pair"] == 900 and items[1]["period"] == 4 * 1500 + 4 * 70 + 40 + 900
    pairs = trace_items.pair_parts(launch, 8)
    assert len(pairs) == 8 and min(p["row"] for p in pairs) == 8
    steady = trace_items.medians(pairs, ["pair", "L_scores", "L_wait_follower", "F_own_pv", "to_next"])
    assert steady == {"pair": 1500, "L_scores": 100, "L_wait_follower": 400, "F_own_pv": 550, "to_next": 70}
    assert [p["to_next"] for p in pairs[:4]] == [70, 70, 70, None]
    blocks = trace_items.block_parts(launch, 8)
    assert len(blocks) == 16
    assert trace_items.medians(blocks, ["D_wait_low", "D_convert_low", "D_wait_high", "D_convert_high"]) == {
        "D_wait_low": 11, "D_convert_low": 22, "D_wait_high": 33, "D_convert_high": 44}
    result = run_trace_summary(tmp_path / "trace512.log", text)
    assert "8 pairs of the items after the first" in result.stdout
    assert "2 first pairs of those items" in result.stdout and "6 other pairs of those items" in result.stdout
    assert "| 1500 | 100 | 200 | 300 | 400 | 500 | 150 | 250 | 350 | 450 | 550 | 70 |" in result.stdout
    assert "| 11 | 22 | 33 | 44 |" in result.stdout
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "trace_items.py"), "--run", "--topk", "96"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--topk" in bad.stderr



def test_trace_items_first_pairs_apart(tmp_path):
    """Items of several pairs: the summary also gives an item's first pairs and its other pairs
    apart (the first ones start beside the previous item's end), each with its own medians."""
    trace_items = import_benchmark("trace_items")
    launch = trace_items.parse_launches(multi_pair_trace(first_pair_scores=1000))[-1]
    pairs = trace_items.pair_parts(launch, 8)
    first = [p for p in pairs if p["row"] % 8 == 0]
    assert len(first) == 2 and {p["F_scores"] for p in first} == {1150}
    assert {p["F_scores"] for p in pairs if p["row"] % 8 != 0} == {150}
    result = run_trace_summary(tmp_path / "first.log", multi_pair_trace(first_pair_scores=1000))
    tables = result.stdout.split("pairs of those items")
    assert "| 1500 | 100 | 200 | 300 | 400 | 500 | 1150 | 250 | 350 | 450 | 550 | 70 |" in tables[1]
    assert "| 1500 | 100 | 200 | 300 | 400 | 500 | 150 | 250 | 350 | 450 | 550 | 70 |" in tables[2]


def test_trace_items_dequant_block_top(tmp_path):
    """With the bookkeeping's points (5: the next row source known, 6: the bookkeeping done) the
    dequant tables give its two parts, timed from the block's top when it is there and from the
    high half written when it comes after the conversion, and split the blocks into the first and
    the second of each pair."""
    trace_items = import_benchmark("trace_items")
    text = multi_pair_trace(top_points=True)
    blocks = trace_items.block_parts(trace_items.parse_launches(text)[-1], 8)
    assert trace_items.medians(blocks, ["D_wait_low", "D_book_source", "D_book_cursor", "D_convert_low"]) == {
        "D_wait_low": 11, "D_book_source": 3, "D_book_cursor": 5, "D_convert_low": 22}
    assert [block["second"] for block in blocks[:4]] == [False, True, False, True]
    result = run_trace_summary(tmp_path / "trace_top.log", text)
    assert ("| D_wait_low | D_convert_low | D_wait_high | D_convert_high | D_book_source | D_book_cursor "
            "| D_wait_after_book | to_next_top |") in result.stdout
    assert "the first of a pair" in result.stdout and "the second of a pair" in result.stdout
    # The low half's wait after the bookkeeping: low free at top + 11, bookkeeping done at top + 8.
    assert result.stdout.count("| 11 | 22 | 33 | 44 | 3 | 5 | 3 |") == 2
    assert result.stdout.count("D_wait_after_book over those blocks: min 3, median 3, max 3") == 2
    # The bookkeeping after the conversion (a pair's second block on some builds): timed from point 2.
    launch = trace_items.parse_launches(text)[-1]
    clocks = launch[2][9]
    launch[2][9] = clocks[:5] + [clocks[2] + 7, clocks[2] + 7 + 4, 0]
    after = {block["row"]: block for block in trace_items.block_parts(launch, 8)}[9]
    assert after["D_book_source"] == 7 and after["D_book_cursor"] == 4


def test_trace_items_follower_own_high_half(tmp_path):
    """A log of the removed CAKE_HOPPER_FOLLOWER_HIGH build (docs/data): the follower's point 8
    (its own block's high half written) gives F_own_high, from the follower's start; logs without
    the point (8 values a row, or a zero there) leave the column out."""
    trace_items = import_benchmark("trace_items")
    text = multi_pair_trace()
    launch = trace_items.parse_launches(text)[-1]
    assert all(p["F_own_high"] is None for p in trace_items.pair_parts(launch, 8))
    assert "F_own_high" not in run_trace_summary(tmp_path / "plain.log", text).stdout
    lines = []
    for line in text.splitlines():
        words = line.split()
        if words[:2] == ["TRACE", "1"]:
            clocks = [int(w) for w in words[3:]]
            line += f" {clocks[0] + 60}"  # point 8: 60 cycles after the follower's start
        elif words[:1] == ["TRACE"]:
            line += " 0"
        lines.append(line)
    own = "\n".join(lines) + "\n"
    pairs = trace_items.pair_parts(trace_items.parse_launches(own)[-1], 8)
    assert {p["F_own_high"] for p in pairs} == {60}
    result = run_trace_summary(tmp_path / "own.log", own)
    assert "| to_next | F_own_high |" in result.stdout
    assert "| 1500 | 100 | 200 | 300 | 400 | 500 | 150 | 250 | 350 | 450 | 550 | 70 | 60 |" in result.stdout


def test_trace_items_dequant_load(tmp_path):
    """The dequant's load over the steady pairs (an item's third pair on, not its last, items after
    the first): its two blocks top to top, its waits for the consumers in them (each low half's
    from the bookkeeping's end where the log has its points, else from the top), the leader's
    period and its start after the pair's first block is written."""
    trace_items = import_benchmark("trace_items")
    for top_points, low_wait in ((True, 11 - 8), (False, 11)):
        text = multi_pair_trace(top_points=top_points)
        launch = trace_items.parse_launches(text)[-1]
        load = trace_items.dequant_load(launch, 8)
        # Two items after the first, each with one pair (blocks 4, 5 of 8) whose successor is inside it.
        assert load["pairs"] == 2
        assert load["dequant"] == 2000 and load["leader"] == 1500 + 70
        assert load["waiting"] == 2 * (low_wait + 33)
        row = 8 + 4
        assert load["leader_after_block"] == statistics.median(
            launch[0][r][0] - launch[2][r][2] for r in (row, row + 8))
    result = run_trace_summary(tmp_path / "load.log", multi_pair_trace(top_points=True))
    assert "dequant load over 2 pairs" in result.stdout and "two blocks 2000 cycles top to top, 72 of them" in result.stdout


def test_trace_items_reads_the_life_points(tmp_path):
    """LIFE lines give each role's points from the earliest entry of any role, the dequant's missing
    epilogue as '-'; a decode-sized launch (one item of two blocks) prints the life table and no
    item table, without failing."""
    trace_items = import_benchmark("trace_items")
    text = "\n".join(["LAUNCH 0", "LIFE 0 5 6 7 8", "LAUNCH 1",
                      "LIFE 0 1000 1400 9000 15000", "LIFE 1 1010 1400 9100 15100",
                      "LIFE 2 990 1400 0 12000", "LIFE 3 995 1401 0 12001",
                      "TRACE 0 0 2000 3000 0 0 0 8000 0 0", "TRACE 0 1 9000 9100 9200 9300 9400 0 0 0"]) + "\n"
    life = trace_items.life_parts(trace_items.parse_launches(text)[-1])
    assert life[0] == {"entry": 10, "set_up": 410, "first_epilogue": 8010, "exit": 14010}
    assert life[2] == {"entry": 0, "set_up": 410, "first_epilogue": None, "exit": 11010}
    result = run_trace_summary(tmp_path / "decode.log", text)
    assert "| 2 | 0 | 410 | - | 11010 |" in result.stdout
    assert "0 items" in result.stdout


def write_run(path, matmul, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": {"matmul_tflops": matmul}, "rows": rows}))


def test_ab_summary_medians_and_ratios(tmp_path):
    """The A/B table takes each tree's median over rounds per shape and divides by the first tree's;
    a shape one tree lacks shows '-', and every round's matmul is listed."""
    for label, times in (("base", [(100.0, 40.0), (110.0, 44.0), (90.0, 42.0)]), ("new", [(80.0, 41.0), (70.0, 40.0)])):
        for round_, (t512, t1024) in enumerate(times, 1):
            write_run(tmp_path / label / f"prefill_r{round_}.json", 800.0 + round_,
                      [dict(T=4096, H=64, topk=512, kernel="hopper", us=t512),
                       dict(T=4096, H=64, topk=1024, kernel="hopper", us=t1024)])
    write_run(tmp_path / "new" / "decode_r1.json", 790.0, [dict(T=1, H=64, candidates=2048, num_splits=16, us=20.0)])
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ab_summary.py"), str(tmp_path), "base", "new"],
                            check=True, capture_output=True, text=True)
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in result.stdout.splitlines()
            if line.startswith("| ") and line[2].isdigit()}
    assert rows["4096/64/512"] == ["100.0", "75.0", "0.750 |"]
    assert rows["4096/64/1024"] == ["42.0", "40.5", "0.964 |"]
    assert rows["1/64/2048"] == ["-", "20.0", "- |"]
    assert "base: 3 rounds, bf16 matmul 801, 802, 803 TFLOP/s" in result.stdout
    # Rounds that differ by more than 3% are listed, and so are unequal round counts.
    assert "spread 20.0% over rounds: base 4096/64/512: 100.0, 110.0, 90.0 us" in result.stdout
    assert "spread 13.3% over rounds: new 4096/64/512: 80.0, 70.0 us" in result.stdout
    assert "4096/64/1024: 41.0, 40.0" not in result.stdout  # 2.5%: not listed
    assert "unequal rounds" in result.stdout
    # The fastest rounds' ratios, beside the medians': 70 / 90 and 40 / 40 (the decode row, which
    # base lacks, is left out).
    assert "- fastest rounds, new / base: 4096/64/512 0.778, 4096/64/1024 1.000\n" in result.stdout


def test_ab_summary_keeps_forced_decode_plans_apart(tmp_path):
    """A decode row with a forced plan (bench_decode.py --splits) is its own row, not pooled with
    the planned row of the shape; two rows with one key in a round are refused."""
    for label, planned, forced in (("base", 15.0, 40.0), ("new", 14.0, 35.0)):
        write_run(tmp_path / label / "decode_r1.json", 800.0,
                  [dict(T=1, H=64, candidates=2048, num_splits=16, head_tiles=1, us=planned),
                   dict(T=1, H=64, candidates=2048, num_splits=2, head_tiles=1, forced=True, us=forced)])
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ab_summary.py"), str(tmp_path), "base", "new"],
                            check=True, capture_output=True, text=True)
    assert "| 1/64/2048 | 15.0 | 14.0 | 0.933 |" in result.stdout
    assert "| 1/64/2048/s2 ht1 | 40.0 | 35.0 | 0.875 |" in result.stdout
    write_run(tmp_path / "dup" / "decode_r1.json", 800.0, [dict(T=1, H=64, candidates=2048, us=1.0)] * 2)
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ab_summary.py"), str(tmp_path), "dup"],
                            capture_output=True, text=True)
    assert result.returncode != 0 and "two rows for (1, 64, 2048)" in result.stderr


def test_ab_summary_of_one_tree(tmp_path):
    """With one tree timed (the others failed their tests, or a lone run) the table has the shape
    and that tree's column only: header, rule and rows all two cells wide."""
    write_run(tmp_path / "solo" / "prefill_r1.json", 800.0, [dict(T=4096, H=64, topk=512, kernel="hopper", us=12.5)])
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ab_summary.py"), str(tmp_path), "solo"],
                            check=True, capture_output=True, text=True)
    table = [line for line in result.stdout.splitlines() if line.startswith("|")]
    assert table == ["| T/H/topk | solo |", "|---|---|", "| 4096/64/512 | 12.5 |"]


def test_ab_trees_rejects_bad_arguments(tmp_path):
    """The A/B script stops before it removes, copies or builds anything unless every argument is
    LABEL=DIR of a tree with distinct labels (a run in progress keeps its work folder)."""
    script = ROOT / "benchmarks" / "ab_trees.sh"
    work = tmp_path / "work"
    (work / "ab").mkdir(parents=True)
    (work / "ab" / "keep").write_text("a run in progress")
    env = dict(os.environ, OUT=str(tmp_path / "out"), AB_WORK=str(work))
    for args in ([], ["no-equals-sign"], [f"x={tmp_path}"], [f"={ROOT}"], [f"a={ROOT}", f"a={ROOT}"]):
        result = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, env=env)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
    assert (work / "ab" / "keep").read_text() == "a run in progress"
    assert not (work / "trees").exists() and not (tmp_path / "out").exists()


def test_device_suite_checks_its_steps_and_packs_its_logs(tmp_path):
    """device_suite.sh stops before running anything when a step is misspelt; its pack step leaves
    two files in $OUT (the device returns only a few): every log in one tarball, and a summary with
    the logs' pass / fail and sanitizer lines."""
    script = ROOT / "benchmarks" / "device_suite.sh"
    out = tmp_path / "out"
    (out / "nested").mkdir(parents=True)
    (out / "pytest.log").write_text("...\n7 passed, 1 skipped in 2.0s\n")
    (out / "memcheck.log").write_text("========= ERROR SUMMARY: 0 errors\n")
    (out / "nested" / "raw.json").write_text("{}")
    env = dict(os.environ, OUT=str(out))
    result = subprocess.run(["bash", str(script), "pack", "tset"], capture_output=True, text=True, env=env)
    assert result.returncode == 2 and "unknown step: tset" in result.stdout
    assert (out / "pytest.log").exists() and not (out / "device_suite.tar.gz").exists()
    result = subprocess.run(["bash", str(script), "pack"], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["device_suite.tar.gz", "summary.txt"]
    summary = (out / "summary.txt").read_text()
    assert "7 passed, 1 skipped" in summary and "ERROR SUMMARY: 0 errors" in summary
    with tarfile.open(out / "device_suite.tar.gz") as tar:
        names = sorted(name.lstrip("./") for name in tar.getnames())
        assert names == ["memcheck.log", "nested/raw.json", "pytest.log"]
        assert tar.extractfile("./pytest.log").read().decode().endswith("7 passed, 1 skipped in 2.0s\n")


def test_ab_trees_leaves_out_a_tree_whose_tests_fail_or_hang(tmp_path):
    """With AB_TEST_TIMEOUT each tree's tests are time-limited; a tree whose tests fail or run past
    it (a kernel that hangs) is left out of the digest and the timing, the others go on. Two fake
    trees whose "build" only writes an extension file: one test passes, the other sleeps."""
    script = ROOT / "benchmarks" / "ab_trees.sh"
    trees = {"fine": "def test_ok():\n    assert True\n",
             "stuck": "import time\n\ndef test_stuck():\n    time.sleep(120)\n"}
    for name, test in trees.items():
        (tmp_path / name / "torch_ops").mkdir(parents=True)
        (tmp_path / name / "tests").mkdir()
        (tmp_path / name / "setup.py").write_text('import pathlib\npathlib.Path("torch_ops/_C.fake.so").write_text("")\n')
        (tmp_path / name / "torch_ops" / "__init__.py").write_text("")
        (tmp_path / name / "tests" / "test_x.py").write_text(test)
    env = dict(os.environ, OUT=str(tmp_path / "out"), AB_WORK=str(tmp_path / "work"), AB_TESTS="tests/test_x.py",
               AB_TEST_TIMEOUT="5", PYTHON=sys.executable)
    result = subprocess.run(["bash", str(script), f"fine={tmp_path / 'fine'}", f"stuck={tmp_path / 'stuck'}"],
                            capture_output=True, text=True, env=env, timeout=100)
    assert "[fine] tests: 1 passed" in result.stdout, result.stdout + result.stderr
    assert "[stuck] tests failed or timed out, left out" in result.stdout, result.stdout
    assert (tmp_path / "out" / "summary.md").exists()


def test_ab_trees_times_a_timing_only_tree_without_its_tests(tmp_path):
    """A label in AB_TIMING_ONLY skips its tests (and the digest) but stays in the call: a tree whose
    tests would fail is then not left out; the other tree's tests still run."""
    script = ROOT / "benchmarks" / "ab_trees.sh"
    good = fake_tree(tmp_path / "good")
    bad = fake_tree(tmp_path / "bad")
    (bad / "tests" / "test_fake.py").write_text("def test_fake():\n    assert False\n")
    env = dict(os.environ, OUT=str(tmp_path / "out"), AB_WORK=str(tmp_path / "work"), PYTHON=sys.executable,
               AB_TESTS="tests/test_fake.py", AB_TIMING_ONLY="dev")
    result = subprocess.run(["bash", str(script), f"good={good}", f"dev={bad}@-DX=1"], capture_output=True, text=True,
                            env=env, timeout=120)
    assert "[good] tests: 1 passed" in result.stdout, result.stdout + result.stderr
    assert "[dev] timing only: no tests" in result.stdout and "left out" not in result.stdout, result.stdout
    result = subprocess.run(["bash", str(script), f"good={good}", f"dev={bad}@-DX=1"], capture_output=True, text=True,
                            env=dict(env, AB_TIMING_ONLY=""), timeout=120)
    assert "[dev] tests failed or timed out, left out" in result.stdout, result.stdout


def test_output_digest_compare(tmp_path):
    """--compare names every case of the later files as the same bits or DIFFERENT against the first
    file (output or LSE), and exits non-zero when any differs."""
    def run(cases):
        return {"meta": {}, "cases": [dict(name=n, output_sha256=o, lse_sha256=l, output_nan=0) for n, o, l in cases]}
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text(json.dumps(run([("x", "1", "2"), ("y", "3", "4")])))
    b.write_text(json.dumps(run([("x", "1", "2"), ("y", "3", "4")])))
    c.write_text(json.dumps(run([("x", "1", "2"), ("y", "3", "5")])))
    script = str(ROOT / "benchmarks" / "output_digest.py")
    # As ab_trees.sh runs it: from outside the tree, where the library need not be importable.
    away = dict(cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    same = subprocess.run([sys.executable, script, "--compare", str(a), str(b)], capture_output=True, text=True, **away)
    assert same.returncode == 0 and same.stdout.count("same bits") == 2, same.stderr
    differ = subprocess.run([sys.executable, script, "--compare", str(a), str(b), str(c)], capture_output=True, text=True,
                            **away)
    assert differ.returncode == 1
    assert f"{c}: y: DIFFERENT" in differ.stdout and f"{c}: x: same bits" in differ.stdout
    # A case missing from either side (a digest that stopped part-way) is a difference.
    short, longer = tmp_path / "short.json", tmp_path / "longer.json"
    short.write_text(json.dumps(run([("x", "1", "2")])))
    longer.write_text(json.dumps(run([("x", "1", "2"), ("y", "3", "4"), ("z", "5", "6")])))
    missing = subprocess.run([sys.executable, script, "--compare", str(a), str(short), str(longer)], capture_output=True,
                             text=True, **away)
    assert missing.returncode == 1
    assert f"{short}: y: MISSING (in {a} only)" in missing.stdout and f"{longer}: z: MISSING from {a}" in missing.stdout


def test_output_digest_runs_on_the_cpu_kernels(tmp_path):
    """The fingerprint cases run through the public API (here on the CPU kernels): every output is
    written, and two runs give the same fingerprints."""
    script = str(ROOT / "benchmarks" / "output_digest.py")
    paths = [tmp_path / "first.json", tmp_path / "second.json"]
    for path in paths:
        subprocess.run([sys.executable, script, "--device", "cpu", "--cases", "decode_t1_h64", "prefill_h16",
                        "--json", str(path)], check=True, capture_output=True, text=True)
    cases = json.loads(paths[0].read_text())["cases"]
    assert [case["name"] for case in cases] == ["prefill_h16_tk512", "decode_t1_h64_2048", "prefill_h16_tk512_dense",
                                                "decode_t1_h64_2048_dense"]
    assert all(case["output_nan"] == 0 for case in cases)
    same = subprocess.run([sys.executable, script, "--compare", *map(str, paths)], capture_output=True, text=True)
    assert same.returncode == 0 and same.stdout.count("same bits") == 4


def test_decode_benchmark_selection_misses():
    """The grid's criterion: a row counts when select_kernel's pick took more than 10% longer than
    the faster op. Each recorded grid's own rule (its `select` column) against its times: b744884
    missed at 6 shapes, abf6f3a at 2, a287762 at none, fef7ec9 (the ops faster since, the decode
    most) at 5; the rule now in the planner, set from the fef7ec9 grid, misses none of its shapes,
    nor of the 44fa309 grid (one-split decodes of 16 heads on the small-heads kernels since) or the
    89c2db8 grid (16-head units for the decode's few CTAs), whose recorded picks are the rule's.
    (Older grids' times are not the kernels' of today.)"""
    bench_decode = import_benchmark("bench_decode")

    def grid(commit):
        return json.loads((ROOT / "docs" / "data" / f"bench_decode_grid_h200_{commit}.json").read_text())["rows"]

    def missed(rows):
        return sorted((r["T"], r["H"], r["candidates"]) for r, _ in bench_decode.selection_misses(rows))

    assert missed(grid("b744884")) == [
        (16, 128, 512), (32, 64, 512), (64, 16, 512), (64, 16, 1024), (128, 16, 512), (128, 16, 1024)]
    assert all(ratio > 1.1 for _, ratio in bench_decode.selection_misses(grid("b744884")))
    assert missed(grid("abf6f3a")) == [(16, 128, 1024), (32, 64, 1024)]
    assert missed(grid("a287762")) == []
    rows = grid("fef7ec9")
    assert missed(rows) == [(16, 128, 512), (32, 64, 512), (32, 128, 1024), (64, 16, 1024), (64, 64, 1024)]
    now = [dict(row, select=torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_select_kernel(
        num_tokens=row["T"], num_heads=row["H"], topk=row["candidates"], num_sms=132)) for row in rows]
    assert bench_decode.selection_misses(now) == []
    for newest in (grid("44fa309"), grid("89c2db8")):
        assert len({(r["T"], r["H"], r["candidates"]) for r in newest if r.get("prefill_us") is not None}) == 48
        for row in newest:
            assert row["select"] == torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_select_kernel(
                num_tokens=row["T"], num_heads=row["H"], topk=row["candidates"], num_sms=132)
        assert missed(newest) == []
    # The 89c2db8 grid ran today's decode plans (16-head units for few CTAs at H = 64 and 128).
    for row in grid("89c2db8"):
        plan = torch_ops._C.plan_decode_on_device(row["T"], row["H"], row["candidates"], 0, 132, 16, kernel="hopper")
        assert (row["head_tiles"], row["num_splits"]) == (plan["head_tiles"], plan["num_splits"]), row
    assert bench_decode.selection_misses([dict(rows[0], forced=True, select="prefill", us=1.0, prefill_us=9.0)]) == []


def fake_tree(path, test_seconds=0):
    """A tree ab_trees.sh can "build" in no time: its setup.py only drops a torch_ops/_C*.so, its
    package imports, and its one test sleeps test_seconds."""
    (path / "torch_ops").mkdir(parents=True)
    (path / "torch_ops" / "__init__.py").write_text("")
    (path / "meta").mkdir()
    (path / "tests").mkdir()
    (path / "tests" / "test_fake.py").write_text(f"import time\n\ndef test_fake():\n    time.sleep({test_seconds})\n")
    (path / "setup.py").write_text("import pathlib\npathlib.Path(__file__).parent.joinpath('torch_ops', '_C.fake.so')"
                                   ".write_bytes(b'')\n")
    return path


def test_ab_trees_runs_tests_builds_only_and_keeps_its_deadline(tmp_path):
    """Each tree is copied and built; a build-only tree is not tested; the tests' results are
    reported; with AB_DEADLINE past, a step is skipped (a 60-second test does not run) and the
    summary and archive are still written."""
    script = ROOT / "benchmarks" / "ab_trees.sh"
    tree = fake_tree(tmp_path / "tree", test_seconds=60)
    env = dict(os.environ, OUT=str(tmp_path / "out"), AB_WORK=str(tmp_path / "work"), PYTHON=sys.executable,
               AB_TESTS="tests/test_fake.py")
    result = subprocess.run(["bash", str(script), f"a={tree}", f"b={tree}@-DX=1"], capture_output=True, text=True,
                            env=dict(env, AB_DEADLINE="1", AB_BUILD_ONLY="b"), timeout=50)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[b] built in" in result.stdout and "skipped (AB_DEADLINE)" in result.stdout
    assert (tmp_path / "out" / "summary.md").exists() and (tmp_path / "out" / "ab.tar.gz").exists()
    assert (tmp_path / "work" / "trees" / "b" / "torch_ops" / "_C.fake.so").exists()
    quick = fake_tree(tmp_path / "quick")
    result = subprocess.run(["bash", str(script), f"q={quick}"], capture_output=True, text=True, env=env, timeout=120)
    assert "[q] tests: 1 passed" in result.stdout, result.stdout + result.stderr
    # Only a build-only tree (device_suite.sh's trace step): nothing is timed, and the summary says so.
    result = subprocess.run(["bash", str(script), f"t={quick}@-DX=1"], capture_output=True, text=True,
                            env=dict(env, AB_BUILD_ONLY="t"), timeout=60)
    assert result.returncode == 0 and "[t] built in" in result.stdout, result.stdout + result.stderr
    assert (tmp_path / "out" / "summary.md").read_text().startswith("no tree timed")


def test_ab_trees_runs_the_accuracy_script_on_tested_trees(tmp_path):
    """AB_ACCURACY runs benchmarks/accuracy.py (this checkout's) in each tree that is not timing
    only, with the tree's package first on the path, its arguments passed on; its exit status and
    last line are reported (the summary line, or a crash's error) and the call goes on. Here the fake tree's torch_ops has none of
    the library, so the script fails at its first use of it; without AB_ACCURACY nothing runs."""
    script = ROOT / "benchmarks" / "ab_trees.sh"
    tree = fake_tree(tmp_path / "tree")
    env = dict(os.environ, OUT=str(tmp_path / "out"), AB_WORK=str(tmp_path / "work"), PYTHON=sys.executable,
               AB_ACCURACY="--device cpu --tokens 2 --heads 16 --topk 64 --scales 1 --pool 256", AB_TIMING_ONLY="dev")
    result = subprocess.run(["bash", str(script), f"a={tree}", f"dev={tree}@-DX=1"], capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[a] accuracy (exit 1): AttributeError:" in result.stdout, result.stdout
    assert "nvfp4_quantize_pack_sparse_mla_cache" in result.stdout
    assert "[dev] accuracy" not in result.stdout
    log = (tmp_path / "work" / "ab" / "a" / "accuracy.md").read_text()
    # The tree's label as its commit (in_tree's CAKE_COMMIT), and its torch_ops, not the library's.
    assert "commit a, op prefill, pool 256" in log and "module 'torch_ops' has no attribute" in log, log
    env.pop("AB_ACCURACY")
    result = subprocess.run(["bash", str(script), f"a={tree}"], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0 and "accuracy" not in result.stdout, result.stdout + result.stderr


def test_ab_trees_profiles_each_tree_from_its_own_tree(tmp_path):
    """AB_NCU runs the profiler once a timed tree, in the tree with its package first on the path,
    and keeps each tree's gzipped output in the archive (here a stand-in profiler that records
    where torch_ops imports from and the arguments it was given)."""
    script = ROOT / "benchmarks" / "ab_trees.sh"
    fake_ncu = tmp_path / "ncu"
    fake_ncu.write_text('#!/usr/bin/env bash\necho "args: $*"\n'
                        f'{sys.executable} -c "import torch_ops; print(\'from\', torch_ops.__file__)"\n')
    fake_ncu.chmod(0o755)
    trees = [fake_tree(tmp_path / name) for name in ("one", "two")]
    env = dict(os.environ, OUT=str(tmp_path / "out"), AB_WORK=str(tmp_path / "work"), PYTHON=sys.executable,
               AB_NCU="--tokens 4096 --heads 128 --topk 1024", NCU=str(fake_ncu))
    result = subprocess.run(["bash", str(script), f"a={trees[0]}", f"b={trees[1]}@-DX=1"], capture_output=True,
                            text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    with tarfile.open(tmp_path / "out" / "ab.tar.gz") as tar:
        for label in ("a", "b"):
            text = gzip.decompress(tar.extractfile(f"ab/{label}/ncu_source.csv.gz").read()).decode()
            assert f"from {tmp_path / 'work' / 'trees' / label / 'torch_ops'}" in text, text
            assert "--section SourceCounters" in text and "benchmarks/profile_one.py --tokens 4096 --heads 128" in text
    # A profiler that fails is reported, not fatal.
    result = subprocess.run(["bash", str(script), f"a={trees[0]}"], capture_output=True, text=True,
                            env=dict(env, NCU="false"), timeout=120)
    assert result.returncode == 0 and "[a] ncu failed" in result.stdout, result.stdout + result.stderr


def test_record_ab_writes_one_file_a_tree(tmp_path):
    """record_ab.py keeps every round's rows with the round's matmul and the row's fraction of it
    (computed where the run lacks it), and says in meta what ran: commit, variant, build flags,
    the command and each round's matmul; the file name carries prefix, device, label and commit."""
    ab = tmp_path / "ab"
    for round_, matmul in ((1, 800.0), (2, 810.0)):
        write_run(ab / "main" / f"prefill_r{round_}.json", matmul,
                  [dict(T=4096, H=64, topk=512, kernel="hopper", us=700.0 + round_, tflops=400.0)])
        write_run(ab / "vf" / f"prefill_r{round_}.json", matmul,
                  [dict(T=4096, H=64, topk=512, kernel="hopper", us=650.0, tflops=420.0, of_matmul=0.5)])
    for path in ab.glob("*/prefill_r*.json"):
        run = json.loads(path.read_text())
        run["meta"].update(device="NVIDIA H200", torch="2.11.0+cu130")
        path.write_text(json.dumps(run))
    out = tmp_path / "data"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "record_ab.py"), str(ab), "main=abc1234",
                             "vf=def5678=the vote branch: same bits@-DCAKE_X -DCAKE_Y", "--prefix", "hopper_ab99",
                             "--date", "2026-12-02", "--command", "bash the call", "--out", str(out)],
                            check=True, capture_output=True, text=True)
    assert result.stdout.count("2 rows over 2 rounds") == 2
    main_run = json.loads((out / "hopper_ab99_h200_main_abc1234.json").read_text())
    assert main_run["meta"] == {"device": "NVIDIA H200", "commit": "abc1234", "torch": "2.11.0+cu130",
                                "date": "2026-12-02", "label": "main", "variant": "main", "nvcc_extra": "",
                                "command": "bash the call", "matmul_tflops_by_round": [[1, 800.0], [2, 810.0]],
                                "run": {}}
    assert [(r["round"], r["us"], r["matmul_tflops"]) for r in main_run["rows"]] == [(1, 701.0, 800.0), (2, 702.0, 810.0)]
    assert [r["of_matmul"] for r in main_run["rows"]] == [400.0 / 800.0, 400.0 / 810.0]
    vf_run = json.loads((out / "hopper_ab99_h200_vf_def5678.json").read_text())
    assert vf_run["meta"]["variant"] == "the vote branch: same bits"
    assert vf_run["meta"]["nvcc_extra"] == "-DCAKE_X -DCAKE_Y"
    assert [r["of_matmul"] for r in vf_run["rows"]] == [0.5, 0.5]  # the run's own value kept
    # The files exist now: the same call again is refused (another prefix, or --force).
    again = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "record_ab.py"), str(ab), "main=abc1234",
                            "--prefix", "hopper_ab99", "--date", "d", "--command", "c", "--out", str(out)],
                           capture_output=True, text=True)
    assert again.returncode == 2 and "would overwrite" in again.stderr


def test_record_ab_checks_the_trees_flags_and_keeps_the_runs_meta(tmp_path):
    """Where the call wrote <label>/tree.txt, flags given after @ that the tree was not built with
    are refused, and the tree's record and the runs' own meta go into the file."""
    ab = tmp_path / "ab"
    write_run(ab / "new" / "prefill_r1.json", 800.0, [dict(T=4096, H=64, topk=512, us=650.0, tflops=420.0)])
    run = json.loads((ab / "new" / "prefill_r1.json").read_text())
    run["meta"].update(device="NVIDIA H200", repeats=10, warmup=3, matmul_tflops_end=790.0, command="python3 b.py")
    (ab / "new" / "prefill_r1.json").write_text(json.dumps(run))
    (ab / "new" / "tree.txt").write_text("label: new\nsource: .ab/x\ncommit: none\ntree flags: -DCAKE_A\n"
                                         "common flags: \nCAKE_CUDA_ARCHS: 90a\nsource hash: 0123456789abcdef\n")
    out = tmp_path / "data"

    def record(tree):
        return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "record_ab.py"), str(ab), tree, "--prefix",
                               "p", "--date", "d", "--command", "c", "--out", str(out)], capture_output=True, text=True)

    wrong = record("new=abc1234@-DCAKE_B")
    assert wrong.returncode == 2 and "built with '-DCAKE_A', not '-DCAKE_B'" in wrong.stderr
    plain = record("new=abc1234")  # a flagged build recorded as a plain one
    assert plain.returncode == 2 and "built with '-DCAKE_A', not ''" in plain.stderr
    assert record("new=abc1234@-DCAKE_A").returncode == 0
    meta = json.loads((out / "p_h200_new_abc1234.json").read_text())["meta"]
    assert meta["tree"]["source hash"] == "0123456789abcdef"
    assert meta["run"] == {"command": "python3 b.py", "repeats": 10, "warmup": 3, "matmul_tflops_end": 790.0}


def test_record_ab_refuses_a_tree_without_runs(tmp_path):
    """A label with no runs (a tree whose tests failed is not timed) stops the script before it
    writes any file, with a message naming the tree; so does a malformed tree argument."""
    write_run(tmp_path / "ab" / "main" / "prefill_r1.json", 800.0, [dict(T=4096, H=64, topk=512, us=700.0)])
    out = tmp_path / "data"
    for trees, message in ((["main=abc1234", "ast=fe1431f"], "'ast'"), (["main"], "LABEL=COMMIT")):
        result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "record_ab.py"), str(tmp_path / "ab"), *trees,
                                 "--prefix", "p", "--date", "d", "--command", "c", "--out", str(out)],
                                capture_output=True, text=True)
        assert result.returncode == 2
        assert message in result.stderr
        assert not out.exists()


def test_ncu_source_passes_the_kernel_filter(tmp_path):
    """ncu_source.sh gives ncu the filter in NCU_KERNEL (the decode's, which leaves the merge kernel
    out) or its default, and profile_one.py's arguments after the script."""
    fake_ncu = tmp_path / "ncu"
    fake_ncu.write_text('#!/usr/bin/env bash\necho "args: $*"\n')
    fake_ncu.chmod(0o755)
    out = tmp_path / "out.csv.gz"
    decode_filter = "regex:sparse_mla_(prefill_small|attention_hopper|decode_split)_kernel"
    for kernel, expected in ((None, "-k regex:sparse_mla --launch-skip 1"), (decode_filter, f"-k {decode_filter} ")):
        env = dict(os.environ, NCU=str(fake_ncu))
        if kernel is not None:
            env["NCU_KERNEL"] = kernel
        result = subprocess.run(["bash", str(ROOT / "benchmarks" / "ncu_source.sh"), str(out), "--decode", "--tokens", "8"],
                                capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
        assert result.returncode == 0, result.stderr
        text = gzip.decompress(out.read_bytes()).decode()
        assert expected in text and "benchmarks/profile_one.py --decode --tokens 8" in text, text


def test_profile_one_refuses_splits_without_the_decode():
    """--num-splits is the decode's: without --decode profile_one.py stops before touching a GPU."""
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_one.py"), "--num-splits", "2"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 2 and "--num-splits needs --decode" in result.stderr, result.stderr


def test_decode_code_warm_refuses_a_bad_shape():
    """decode_code_warm.py takes TxHxCANDIDATES shapes and stops on anything else before it touches a GPU."""
    for shape in ("8x16", "8x16xmany"):
        result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "decode_code_warm.py"), shape],
                                capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert result.returncode == 2 and "expected TxHxCANDIDATES" in result.stderr, result.stderr


def test_ncu_roles_splits_at_the_dequant_register_release(tmp_path):
    """The source-counter summary gives the rows before the first USETMAXREG.DEALLOC to the
    consumers and the rest to the dequant; stall shares leave out the not-issued columns (a subset
    of the others); opcodes drop predicates and modifiers; ncu's own lines and the program's output
    before the table are skipped; a gzipped file reads the same."""
    import gzip as gzip_module
    header = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed",
              "stall_short_sb", "stall_long_sb", "stall_short_sb (Not Issued)"]
    rows = [["0x0", "FMNMX R1, R2, R3, !PT", "30", "1000000", "30", "0", "30"],
            ["0x10", "@!P0 SHFL.BFLY PT, R1, R1, 0x1, 0x1f", "10", "500000", "0", "10", "10"],
            ["0x20", "USETMAXREG.DEALLOC.CTAPOOL 0x38", "0", "1000", "0", "0", "0"],
            ["0x30", "LOP3.LUT R4, R5, 0xff, RZ, 0xc0, !PT", "40", "3000000", "40", "0", "40"]]
    text = "==PROF== Connected to process 1\n{'kernel': 'hopper'}\n" + "\n".join(
        ",".join(f'"{cell}"' for cell in row) for row in [header] + rows) + "\n"
    plain = tmp_path / "source.csv"
    plain.write_text(text)
    packed = tmp_path / "source.csv.gz"
    with gzip_module.open(packed, "wt") as handle:
        handle.write(text)
    outputs = [subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ncu_roles.py"), str(path), "--top", "1"],
                              check=True, capture_output=True, text=True).stdout for path in (plain, packed)]
    assert outputs[0] == outputs[1]
    lines = outputs[0].splitlines()
    assert lines[0] == "## consumers and entry: 2 SASS rows, 40 samples, 1.5 M warp instructions"
    assert "   stall_short_sb: 30 (75.0%)" in lines and "   stall_long_sb: 10 (25.0%)" in lines
    assert any(line.startswith("   row 0: 30 samples  FMNMX") for line in lines)
    assert "   by opcode (M): FMNMX 1.0, SHFL 0.5" in lines
    dequant = lines[lines.index("## dequant: 2 SASS rows, 40 samples, 3.0 M warp instructions"):]
    assert "   stall_short_sb: 40 (100.0%)" in dequant
    assert any(line.startswith("   row 3: 40 samples  LOP3.LUT") for line in dequant)
    assert "   by opcode (M): LOP3 3.0, USETMAXREG 0.0" in dequant
    plain.write_text("no table here\n")
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ncu_roles.py"), str(plain)],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "no source table" in result.stderr


def test_ncu_roles_splits_the_small_kernel_at_its_register_instructions(tmp_path):
    """With --kernel small the rows before the first USETMAXREG are the entry's, each TRY_ALLOC
    starts the converters' rows and each DEALLOC the attend warpgroup's, a role's regions merged
    (its first row's index kept); a file without both instructions is an error naming them."""
    header = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed",
              "stall_long_sb", "stall_barrier"]
    rows = [["0x0", "S2R R0, SR_TID.X", "1", "100", "1", "0"],
            ["0x10", "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xc0", "0", "100", "0", "0"],
            ["0x20", "LDG.E.NA.64.CONSTANT R2, desc[UR4][R4.64]", "20", "2000000", "20", "0"],
            ["0x30", "USETMAXREG.DEALLOC.CTAPOOL 0x70", "0", "100", "0", "0"],
            ["0x40", "BAR.RED.OR.DEFER_BLOCKING 0x2, 0x80", "12", "500000", "0", "12"],
            ["0x50", "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xc0", "0", "100", "0", "0"],
            ["0x60", "HGMMA.64x16x16.F32.BF16 R24, R32, gdesc[UR12], RZ", "6", "1000000", "6", "0"]]
    path = tmp_path / "ncu_small_source.csv"
    path.write_text("\n".join(",".join(f'"{cell}"' for cell in row) for row in [header] + rows) + "\n")
    tool = [sys.executable, str(ROOT / "benchmarks" / "ncu_roles.py")]
    lines = subprocess.run(tool + [str(path), "--kernel", "small", "--top", "1"],
                           check=True, capture_output=True, text=True).stdout.splitlines()
    headings = [line for line in lines if line.startswith("## ")]
    assert headings == ["## entry: 1 SASS rows, 1 samples, 0.0 M warp instructions",
                        "## converters: 4 SASS rows, 26 samples, 3.0 M warp instructions",
                        "## attend: 2 SASS rows, 12 samples, 0.5 M warp instructions"]
    converters = lines[lines.index(headings[1]):lines.index(headings[2])]
    assert "   stall_long_sb: 26 (100.0%)" in converters
    assert any(line.startswith("   row 2: 20 samples  LDG") for line in converters)
    attend = lines[lines.index(headings[2]):]
    assert any(line.startswith("   row 4: 12 samples  BAR.RED.OR") for line in attend)
    # 32-head units: the attend warpgroup claims registers, the converters give theirs back.
    lines32 = subprocess.run(tool + [str(path), "--kernel", "small32", "--top", "1"],
                             check=True, capture_output=True, text=True).stdout.splitlines()
    assert [line for line in lines32 if line.startswith("## ")] == [
        "## entry: 1 SASS rows, 1 samples, 0.0 M warp instructions",
        "## converters: 2 SASS rows, 12 samples, 0.5 M warp instructions",
        "## attend: 4 SASS rows, 26 samples, 3.0 M warp instructions"]
    # The default split (the 64-head kernel's) reads the same file as two parts at the DEALLOC.
    default = subprocess.run(tool + [str(path)], check=True, capture_output=True, text=True).stdout
    assert "## consumers and entry: 3 SASS rows" in default and "## dequant: 4 SASS rows" in default
    path.write_text("\n".join(",".join(f'"{cell}"' for cell in row) for row in [header] + rows[3:5]) + "\n")
    result = subprocess.run(tool + [str(path), "--kernel", "small"], capture_output=True, text=True)
    assert result.returncode == 2 and "USETMAXREG.TRY_ALLOC" in result.stderr


def test_ncu_roles_sets_builds_side_by_side(tmp_path):
    """Given several source-counter files, each role's totals, stall reasons and samples by opcode
    are printed side by side, one column a file labelled by its name; an opcode or reason missing
    from one build reads 0 there."""
    header = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed",
              "stall_short_sb", "stall_barrier", "stall_short_sb (Not Issued)"]
    builds = {
        "ncu_sk1_source.csv": [["0x0", "FMNMX R1, R2, R3, !PT", "30", "1000000", "30", "0", "30"],
                               ["0x10", "USETMAXREG.DEALLOC.CTAPOOL 0x38", "0", "1000", "0", "0", "0"],
                               ["0x20", "STS.128 [R4], R8", "5", "2000000", "5", "0", "5"]],
        "ncu_lh1_source.csv": [["0x0", "FMNMX R1, R2, R3, !PT", "50", "1000000", "45", "5", "45"],
                               ["0x10", "@P0 BAR.SYNC.DEFER_BLOCKING 0x1, 0x100", "20", "10000", "0", "20", "0"],
                               ["0x20", "USETMAXREG.DEALLOC.CTAPOOL 0x38", "0", "1000", "0", "0", "0"]],
    }
    paths = []
    for name, rows in builds.items():
        path = tmp_path / name
        path.write_text("\n".join(",".join(f'"{cell}"' for cell in row) for row in [header] + rows) + "\n")
        paths.append(str(path))
    lines = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ncu_roles.py"), *paths],
                           check=True, capture_output=True, text=True).stdout.splitlines()
    consumers = lines[lines.index("## consumers and entry"):lines.index("## dequant")]
    assert "| | sk1 | lh1 |" in consumers
    assert "| samples | 30 | 70 |" in consumers
    assert "| stall_short_sb | 30 | 45 |" in consumers and "| stall_barrier | 0 | 25 |" in consumers
    assert "| samples at FMNMX | 30 | 50 |" in consumers and "| samples at BAR | 0 | 20 |" in consumers
    dequant = lines[lines.index("## dequant"):]
    assert "| samples | 5 | 0 |" in dequant and "| samples at STS | 5 | 0 |" in dequant


def test_clock_probe_reads_nvidia_smi_samples():
    """clock_probe.py's parsing of nvidia-smi's CSV samples and its summary after the settling part."""
    clock_probe = import_benchmark("clock_probe")
    text = "\n".join([
        "1980, 3201, 350.10, 40, 0x0000000000000000",
        "No devices were found",  # a driver message between samples is skipped
        "1500, 3201, 690.00, 55, 0x0000000000000004",
        "1485, 3201, 691.50, 56, 0x0000000000000004",
        "1515, 3201, 692.25, 57, 0x0000000000000004",
        "[N/A], 3201, 692.25, 57, 0x0000000000000004",  # a field nvidia-smi could not read
    ])
    samples = clock_probe.parse_samples(text)
    assert [s["sm_mhz"] for s in samples] == [1980.0, 1500.0, 1485.0, 1515.0]
    summary = clock_probe.summarise(samples, 0.25)  # the first of four samples is the settling part
    assert summary["samples"] == 3
    assert summary["sm_mhz_median"] == 1500.0 and summary["sm_mhz_min"] == 1485.0 and summary["sm_mhz_max"] == 1515.0
    assert summary["power_w_median"] == 691.5 and summary["temp_c_max"] == 57.0
    assert summary["event_reasons"] == {"0x0000000000000004": 3}


def test_clock_probe_fraction_is_of_the_same_forms_matmul():
    clock_probe = import_benchmark("clock_probe")
    rows = [dict(workload="matmul 8192^3 bf16", form="a", tflops=800.0),
            dict(workload="matmul 8192^3 bf16", form="b", tflops=600.0),
            dict(workload="prefill 4096x64x512", form="a", tflops=400.0),
            dict(workload="prefill 4096x64x512", form="b", tflops=400.0)]
    clock_probe.add_of_matmul(rows)
    assert [r["of_matmul"] for r in rows] == [1.0, 1.0, 0.5, 400.0 / 600.0]


def test_clock_probe_recorded_run_is_consistent():
    """The recorded sustained-load run: each row's fraction is its TFLOP/s over the same form's
    matmul, and its cycle count is its time at its median clock."""
    run = json.loads((ROOT / "docs" / "data" / "clock_probe_h200_8b0fece.json").read_text())
    matmul = {r["form"]: r["tflops"] for r in run["rows"] if r["workload"].startswith("matmul")}
    assert set(matmul) == {"back to back", "L2 flushed before each call"}
    for row in run["rows"]:
        assert row["of_matmul"] == pytest.approx(row["tflops"] / matmul[row["form"]])
        assert row["cycles_per_call_at_median_clock"] == pytest.approx(row["call_us"] * row["sm_mhz_median"])
        assert row["sm_mhz_min"] <= row["sm_mhz_median"] <= row["sm_mhz_max"]


def test_ab_trees_reverses_the_order_on_even_rounds_and_records_each_tree(tmp_path):
    """Round 1 times the trees in the order given, round 2 in reverse, round 3 as round 1; each
    tree's tree.txt says its source, flags and a hash of its files, and command.txt the AB_
    environment."""
    script = ROOT / "benchmarks" / "ab_trees.sh"
    log = tmp_path / "order.log"
    bench = ("import json, os, sys\n"
             "out = sys.argv[sys.argv.index('--json') + 1]\n"
             "open(os.environ['ORDER_LOG'], 'a').write(os.environ['CAKE_COMMIT'] + '\\n')\n"
             "json.dump({'meta': {'matmul_tflops': 800.0}, 'rows': [{'T': 1, 'H': 64, 'topk': 512, 'us': 1.0}]},"
             " open(out, 'w'))\n")
    trees = []
    for name in ("one", "two"):
        tree = fake_tree(tmp_path / name)
        (tree / "benchmarks").mkdir()
        (tree / "benchmarks" / "bench_prefill.py").write_text(bench)
        trees.append(tree)
    env = dict(os.environ, OUT=str(tmp_path / "out"), AB_WORK=str(tmp_path / "work"), PYTHON=sys.executable,
               AB_PREFILL="--fake", AB_ROUNDS="3", ORDER_LOG=str(log))
    result = subprocess.run(["bash", str(script), f"a={trees[0]}", f"b={trees[1]}@-DX=1 -DY"], capture_output=True,
                            text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert log.read_text().split() == ["a", "b", "b", "a", "a", "b"]
    work = tmp_path / "work" / "ab"
    tree_b = dict(line.split(": ", 1) for line in (work / "b" / "tree.txt").read_text().splitlines())
    assert tree_b["tree flags"] == "-DX=1 -DY" and tree_b["source"] == str(trees[1])
    assert tree_b["commit"].startswith("none") and len(tree_b["source hash"]) == 16
    tree_a = dict(line.split(": ", 1) for line in (work / "a" / "tree.txt").read_text().splitlines())
    assert tree_a["source hash"] == tree_b["source hash"]  # the same files (the flags are not files)
    assert "AB_ROUNDS=3" in (work / "command.txt").read_text()


def test_repeat_check_reports_the_runs_that_differ():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    repeat_check = importlib.import_module("repeat_check")
    g = torch.Generator().manual_seed(3)
    output = torch.randn(6, 4, 512, generator=g).to(torch.bfloat16)
    lse = torch.randn(6, 4, generator=g)
    changed = output.clone()
    changed[5, 2, 7] += 1.0  # token 5, head 2
    lines = repeat_check.report("case", [(output, lse), (changed, lse), (output.clone(), lse.clone())],
                                blocks=[1, 2, 3, 4, 5, 6], plan={"grid_size": 4})
    assert lines[0].startswith("case: 3 runs, 2 distinct results")
    assert lines[1].startswith("run 1: 1 rows differ in 1 tokens")
    assert lines[2] == ("  token 5: 1 heads (2..2), its item 6 blocks, the item before it in its CTA's walk "
                        "(token 1) 2 blocks")
    assert len(lines) == 3
    same = repeat_check.report("case", [(output, lse), (output.clone(), lse.clone())], blocks=[1] * 6, plan={})
    assert same == ["case: 2 runs, 1 distinct results {" + same[0].split("{", 1)[1]]
    assert len(same) == 1


def test_repeat_check_takes_prefill_cases_only():
    """A decode case or an unknown name stops the run before anything touches a GPU."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    repeat_check = importlib.import_module("repeat_check")
    for name in ("decode_t1_h64_2048", "no_such_case"):
        with pytest.raises(SystemExit, match=f"not a prefill case of output_digest.CASES: {name}"):
            repeat_check.main(["--case", "prefill_h64_tk512", name])


def test_repeat_check_runs_several_cases_in_one_process(capsys):
    """Each named case runs --runs times (here on the CPU kernels, deterministic by construction),
    an offset case into its misaligned output view, and reports one result each."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    repeat_check = importlib.import_module("repeat_check")
    repeat_check.main(["--device", "cpu", "--runs", "2", "--case", "prefill_h16_tk512", "prefill_h32_tk512_offset2"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["prefill_h16_tk512", "prefill_h32_tk512_offset2"]
    assert all(": 2 runs, 1 distinct results {" in line for line in lines)


# nvdisasm -gi output in the form sass_roles.py reads: each instruction after the inlining chain
# of its source line, innermost first (an instruction without its own lines keeps the last chain).
NVDISASM_TWO_ROLES = """
	.section	.text._Z6kernelILi16EEvv,"ax",@progbits
	//## File "/x/kernel.cuh", line 10
        /*0000*/                   LDC R1, c[0x0][0x28] ;
	//## File "/x/lists.cuh", line 5 inlined at "/x/role_a.cuh", line 7
	//## File "/x/role_a.cuh", line 7 inlined at "/x/kernel.cuh", line 20
	//## File "/x/kernel.cuh", line 20
        /*0010*/                   IMAD R2, R3, R4, RZ ;
        /*0020*/                   IADD3 R2, R2, 0x1, RZ ;
	//## File "/x/decode.cuh", line 9 inlined at "/x/kernel.cuh", line 22
	//## File "/x/kernel.cuh", line 22
        /*0030*/                   LOP3.LUT R5, R2, 0xf, RZ, 0xc0, !PT ;
	.section	.text._Z6kernelILi32EEvv,"ax",@progbits
	//## File "/x/kernel.cuh", line 10
        /*0000*/                   EXIT ;
"""


def test_sass_roles_gives_each_instruction_to_its_call_and_file():
    sass_roles = import_benchmark("sass_roles")
    kernels = sass_roles.parse_nvdisasm(NVDISASM_TWO_ROLES)
    assert sorted(kernels) == ["_Z6kernelILi16EEvv", "_Z6kernelILi32EEvv"]
    instructions = kernels["_Z6kernelILi16EEvv"]
    assert [address for address, _, _ in instructions] == [0x0, 0x10, 0x20, 0x30]
    assert instructions[2][1].startswith("IADD3") and instructions[2][2] == instructions[1][2]
    kernel_file, calls, inner = sass_roles.attribute(instructions)
    assert kernel_file == "kernel.cuh"
    assert calls == {("/x/kernel.cuh", 10): 1, ("/x/kernel.cuh", 20): 2, ("/x/kernel.cuh", 22): 1}
    assert inner[("/x/kernel.cuh", 20)] == {"lists.cuh": 2}
    assert inner[("/x/kernel.cuh", 22)] == {"decode.cuh": 1}
    assert len(kernels["_Z6kernelILi32EEvv"]) == 1
