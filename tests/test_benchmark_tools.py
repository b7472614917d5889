"""The benchmarks' GPU-free paths: the prefill benchmark's plot from the recorded H200 run, the
decode benchmark's command line and its kernel names."""
import json
import pathlib
import subprocess
import sys

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


def test_decode_benchmark_kernel_names():
    """--kernels names each kernel by its function, without namespaces, template arguments or
    parameters (an anonymous namespace included)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_decode
    finally:
        sys.path.pop(0)
    name = bench_decode.short_kernel_name
    assert name("void cake::cuda::hopper::sparse_mla_attention_hopper_kernel<true>(cake::cuda::DecodeParams)") == \
        "sparse_mla_attention_hopper_kernel"
    assert name("void cake::cuda::(anonymous namespace)::decode_merge_kernel(cake::cuda::DecodeParams)") == \
        "decode_merge_kernel"
    assert name("sparse_mla_decode_split_kernel") == "sparse_mla_decode_split_kernel"
