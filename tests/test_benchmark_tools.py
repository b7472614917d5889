"""The benchmark's plotting path, on the recorded H200 run (no GPU needed)."""
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
