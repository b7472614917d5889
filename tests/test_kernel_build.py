"""Build hygiene of the sm_90a kernels, checked without a GPU: each translation unit that issues
wgmma is compiled for sm_90a with ptxas' report on, and the report must not say that the wgmmas
are serialised. The 64-head kernel is also compiled under each development switch that leaves part
of its work out, so that the ablation builds keep building. The kernels as shipped and their
trace builds must also compile without spills (NO_SPILL_SOURCES).

ptxas serialises wgmma (each one waits for the previous to retire; ptxas info C7520) when it
cannot prove that the code around them is warp-uniform, or when it lacks the registers to keep
several in flight. The kernel still computes the right result, only slower (a development branch
once lost most of its tensor throughput this way), so no numerical test can catch it.

Skipped where no nvcc is found, where torch is a CPU-only build, or where nvcc cannot build for
sm_90a. Also: a development build's defines (CAKE_NVCC_EXTRA) reach the host compiler too."""
import json
import os
import re
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import sm90a_cubin  # noqa: E402  (the compile command benchmarks/sass_roles.py uses too)
sys.path.pop(0)

# (source, extra nvcc flags): the two kernels, the 64-head kernel under each development switch
# that leaves part of its work out (docs/hopper_kernel.md, "Development builds"), which must keep
# compiling for the ablation runs, with the leader's QK^T in groups (drained between them) and with
# the rounded row sums made by the leader's PV (alone and in the trace build) or not made at all, the
# small-heads kernel's trace build and its development builds
# (the row table written by a converter at 16 heads, two QK^T groups in flight a converter, the
# ablation without PV, code added on the converters' path, the table writer's first two indices
# loaded together, and loaded before the lengths; docs/hopper_small_kernel.md,
# "To run on an H200"), the fused 64-head development kernel (docs/hopper_kernel.md, "Development
# builds"), and the probes that time wgmma (operand path, converter stream, small-heads roles,
# wgmma rate: a serialised wgmma there would time the wrong thing).
WGMMA_SOURCES = [("csrc/cuda/hopper/prefill_hopper.cu", ()), ("csrc/cuda/hopper_small/prefill_small.cu", ())] + [
    ("csrc/cuda/hopper/prefill_hopper.cu", (switch,))
    for switch in ("-DCAKE_HOPPER_NO_TILE_STORES", "-DCAKE_HOPPER_NO_CONVERSION", "-DCAKE_HOPPER_NO_MMA",
                   "-DCAKE_HOPPER_HALF_CONVERSION_BOUND",
                   "-DCAKE_HOPPER_WRITER_FENCE=2", "-DCAKE_HOPPER_QK_RECHECK")] + [
    ("csrc/cuda/hopper/prefill_hopper.cu", ("-DCAKE_HOPPER_TRACE",)),
    ("csrc/cuda/hopper/prefill_hopper.cu", ("-DCAKE_HOPPER_LEADER_QK_GROUP=2",)),
    ("csrc/cuda/hopper/prefill_hopper.cu", ("-DCAKE_HOPPER_MMA_ROW_SUMS",)),
    ("csrc/cuda/hopper/prefill_hopper.cu", ("-DCAKE_HOPPER_MMA_ROW_SUMS", "-DCAKE_HOPPER_TRACE")),
    ("csrc/cuda/hopper/prefill_hopper.cu", ("-DCAKE_HOPPER_EXACT_NORMALISER",)),
    ("csrc/cuda/hopper_small/prefill_small.cu", ("-DCAKE_SMALL_TRACE",)),
    ("csrc/cuda/hopper_small/prefill_small.cu", ("-DCAKE_SMALL_TABLE_BY_CONVERTER",)),
    ("csrc/cuda/hopper_small/prefill_small.cu", ("-DCAKE_SMALL_CONVERT_GROUPS_IN_FLIGHT=2",)),
    ("csrc/cuda/hopper_small/prefill_small.cu", ("-DCAKE_SMALL_NO_PV",)),
    ("csrc/cuda/hopper_small/prefill_small.cu", ("-DCAKE_SMALL_CODE_PAD=512",)),
    ("csrc/cuda/hopper_fused/fused.cu", ("-DCAKE_HOPPER_FUSED",)),
    ("benchmarks/operand_path_probe.cu", ()),
    ("benchmarks/converter_stream_probe.cu", ()),
    ("benchmarks/small_roles_probe.cu", ()),
    ("benchmarks/wgmma_rate_probe.cu", ()),
    ("benchmarks/contention_probe.cu", ())]

# Builds that must not spill (ptxas, CUDA 13.0): the two kernels as shipped, whose register budgets
# (setmaxnreg) were measured without spills, the 64-head kernel with the leader's QK^T in groups
# (timed against the default: docs/hopper_kernel.md, "Work split and roles", step 2) and with the
# rounded row sums made by its PV's MMAs (a candidate default: "Development builds"), and their trace
# builds, whose timelines are only faithful without them (a spilling trace build of the 64-head
# kernel overstated its dequant by ~15%: docs/benchmarks.md, "Half the dequant's conversion (a
# bound, timing only), ...").
NO_SPILL_SOURCES = [("csrc/cuda/hopper/prefill_hopper.cu", ()), ("csrc/cuda/hopper_small/prefill_small.cu", ()),
                    ("csrc/cuda/hopper/prefill_hopper.cu", ("-DCAKE_HOPPER_LEADER_QK_GROUP=2",)),
                    ("csrc/cuda/hopper/prefill_hopper.cu", ("-DCAKE_HOPPER_TRACE",)),
                    ("csrc/cuda/hopper/prefill_hopper.cu", ("-DCAKE_HOPPER_MMA_ROW_SUMS",)),
                    ("csrc/cuda/hopper/prefill_hopper.cu", ("-DCAKE_HOPPER_MMA_ROW_SUMS", "-DCAKE_HOPPER_TRACE")),
                    ("csrc/cuda/hopper_small/prefill_small.cu", ("-DCAKE_SMALL_TRACE",))]


def _ptxas_report(source, flags, tmp_path):
    nvcc = sm90a_cubin.find_nvcc()
    if nvcc is None:
        pytest.skip("no nvcc")
    if torch.version.cuda is None:
        pytest.skip("a CPU-only torch build has no CUDA headers to compile against")
    cmd = sm90a_cubin.cubin_command(nvcc, os.path.join(ROOT, source), tmp_path / "kernel.cubin", ["-Xptxas", "-v", *flags])
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    report = result.stdout + result.stderr
    if result.returncode != 0 and ("sm_90a" in report and "not defined" in report or "Unsupported gpu" in report):
        pytest.skip("this nvcc cannot build for sm_90a")
    assert result.returncode == 0, f"nvcc failed on {source}:\n{report[-4000:]}"
    return report


@pytest.mark.parametrize("source,flags", WGMMA_SOURCES)
def test_wgmma_not_serialised(source, flags, tmp_path):
    report = _ptxas_report(source, flags, tmp_path)
    # The report names each kernel it compiled: an empty image would pass the check below vacuously.
    assert "Compiling entry function" in report and "Used" in report, report[-2000:]
    serialised = [line for line in report.splitlines() if "C7520" in line or "are serialized" in line]
    assert not serialised, f"ptxas serialises the wgmmas of {source} {' '.join(flags)}:\n" + "\n".join(serialised)
    if (source, tuple(flags)) in NO_SPILL_SOURCES:
        spill_lines = [line for line in report.splitlines() if "spill stores" in line]
        assert spill_lines, report[-2000:]  # one line a kernel instance
        spills = [line.strip() for line in spill_lines if not re.search(r"\b0 bytes spill stores, 0 bytes spill loads", line)]
        assert not spills, f"ptxas spills in {source} {' '.join(flags)}:\n" + "\n".join(spills)


def test_development_defines_reach_both_compilers(tmp_path):
    """CAKE_NVCC_EXTRA's -D defines go to the host compiler as well as to nvcc (headers both compile,
    such as the kernels' shared-memory layouts, must agree); its other flags to nvcc only. setup.py
    is run with setuptools.setup replaced, so nothing is built."""
    if sm90a_cubin.find_nvcc() is None:
        pytest.skip("no nvcc: setup.py builds no CUDA extension")
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import json, runpy, sys, setuptools\n"
        "captured = {}\n"
        "setuptools.setup = lambda **kwargs: captured.update(kwargs)\n"
        "sys.argv = ['setup.py', '--version']\n"
        f"runpy.run_path({os.path.join(ROOT, 'setup.py')!r})\n"
        "print(json.dumps(captured['ext_modules'][0].extra_compile_args))\n")
    env = dict(os.environ, CAKE_NVCC_EXTRA="-DCAKE_PROBE_DEFINE=3 -Xptxas -v", CAKE_BUILD_CUDA="1",
               CUDA_HOME=os.path.dirname(os.path.dirname(sm90a_cubin.find_nvcc())))
    result = subprocess.run([sys.executable, str(probe)], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    args = json.loads(result.stdout.strip().splitlines()[-1])
    assert "-DCAKE_PROBE_DEFINE=3" in args["cxx"] and "-DCAKE_PROBE_DEFINE=3" in args["nvcc"]
    assert "-Xptxas" in args["nvcc"] and "-Xptxas" not in args["cxx"] and "-v" not in args["cxx"]


def test_eight_head_probe_builds_and_its_warp_form_keeps_o_in_registers(tmp_path):
    """benchmarks/eight_head_register_probe.cu builds for sm_90a, and its form where a warp owns
    O^T (128 registers of it a thread, the rest of the 255 for the two decodes) compiles without a
    spill: its recorded cycles a chunk (docs/benchmarks.md, "An eight-head decode with O in
    registers (a probe), ...") were measured that way. The pair form may spill a few bytes."""
    report = _ptxas_report("benchmarks/eight_head_register_probe.cu", (), tmp_path)
    function, spills = None, {}
    for line in report.splitlines():
        entry = re.search(r"Compiling entry function '(\w+)'", line)
        if entry:
            function = entry.group(1)
        elif "spill stores" in line and function is not None:
            spills[function] = line.strip()
    # Mangled names: the kernel's name follows its length (the file's name is in every one).
    warp_forms = {name: line for name, line in spills.items() if "19eight_head_register" in name}
    assert len(warp_forms) == 2 and any("16eight_head_pairs" in name for name in spills), report[-2000:]
    spilling = [line for line in warp_forms.values()
                if not re.search(r"\b0 bytes spill stores, 0 bytes spill loads", line)]
    assert not spilling, "\n".join(spilling)
    # The slice form's in-order instances at three CTAs an SM (copies 2, 4 and 6 steps ahead, two
    # bit placements) were timed without a spill too; its four-CTA instance may spill a few bytes.
    slice_forms = {name: line for name, line in spills.items()
                   if "17eight_head_slices" in name and "ELi3ELb0E" in name}
    assert len(slice_forms) == 4, report[-2000:]
    spilling = [line for line in slice_forms.values()
                if not re.search(r"\b0 bytes spill stores, 0 bytes spill loads", line)]
    assert not spilling, "\n".join(spilling)
