"""The one nvcc command that compiles a translation unit of this repository into an sm_90a cubin
outside the extension build (no GPU needed): the library's CUDA flags and the include folders of the
installed torch. tests/test_kernel_build.py reads ptxas' report of it, benchmarks/sass_roles.py the
SASS; each adds its own flags (-Xptxas -v, -lineinfo)."""
import glob
import os
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def find_nvcc():
    """CUDA_HOME's nvcc (default /usr/local/cuda), else the one on PATH; None where there is none."""
    path = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
    return path if os.path.exists(path) else shutil.which("nvcc")


def include_flags():
    """torch's headers, the CUDA library headers a pip CUDA build of torch ships beside it (which its
    own headers include), and csrc/."""
    import torch
    torch_dir = os.path.dirname(torch.__file__)
    dirs = [os.path.join(torch_dir, "include"), os.path.join(torch_dir, "include", "torch", "csrc", "api", "include")]
    dirs += glob.glob(os.path.join(os.path.dirname(torch_dir), "nvidia", "cu*", "include"))
    return [f"-I{d}" for d in dirs] + [f"-I{os.path.join(ROOT, 'csrc')}"]


def cubin_command(nvcc, source, out, flags=()):
    """nvcc's arguments that compile `source` (a path) into the sm_90a cubin `out`, `flags` last
    before the includes (development defines, report or line-information flags)."""
    return [nvcc, "-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr", "-gencode=arch=compute_90a,code=sm_90a",
            "-DCAKE_WITH_CUDA", "-DCAKE_WITH_SM90A", *flags, *include_flags(), "-cubin", "-o", str(out), str(source)]
