"""Build the cake sparse-MLA NVFP4 extension (torch_ops._C).

CUDA kernels are built when a CUDA toolkit is found (CUDA_HOME, default /usr/local/cuda), unless
CAKE_BUILD_CUDA=0. The architectures come from CAKE_CUDA_ARCHS (default "80;90a;120a"); for a
quick device iteration build use CAKE_CUDA_ARCHS=90a.
"""
import glob
import os
import sys

if "CUDA_HOME" not in os.environ and os.path.isdir("/usr/local/cuda"):
    # torch's auto-detection takes the folder of the nvcc on PATH, which may be a wrapper.
    os.environ["CUDA_HOME"] = "/usr/local/cuda"

from setuptools import setup  # noqa: E402
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension  # noqa: E402

ROOT = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CUDA_ARCHS = "80;90a;120a"


def _cuda_requested() -> bool:
    flag = os.environ.get("CAKE_BUILD_CUDA", "auto").lower()
    if flag in ("0", "false", "no"):
        return False
    have_nvcc = CUDA_HOME is not None and os.path.exists(os.path.join(CUDA_HOME, "bin", "nvcc"))
    if flag in ("1", "true", "yes") and not have_nvcc:
        sys.exit("CAKE_BUILD_CUDA=1 but no nvcc under CUDA_HOME")
    return have_nvcc


def _gencode_flags() -> list:
    flags = []
    for arch in os.environ.get("CAKE_CUDA_ARCHS", DEFAULT_CUDA_ARCHS).replace(",", ";").split(";"):
        arch = arch.strip()
        if arch:
            flags.append(f"-gencode=arch=compute_{arch},code=sm_{arch}")
    return flags


def _cuda_wheel_includes() -> list:
    # torch's headers include CUDA library headers (cusparse.h, ...) that a pip CUDA build ships
    # in nvidia/cu13/include rather than in the toolkit.
    try:
        import nvidia  # noqa: F401
    except ImportError:
        return []
    dirs = []
    for base in nvidia.__path__:
        dirs += [d for d in glob.glob(os.path.join(base, "cu*", "include")) if os.path.isdir(d)]
    return dirs


def _sources(pattern: str) -> list:
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern), recursive=True))


cxx_flags = ["-O3", "-DNDEBUG"]
sources = _sources("csrc/registration.cpp") + _sources("csrc/ops/*.cpp") + _sources("csrc/cpu/*.cpp")
if _cuda_requested():
    cuda_defines = ["-DCAKE_WITH_CUDA"]
    if any("sm_90a" in flag for flag in _gencode_flags()):
        cuda_defines.append("-DCAKE_WITH_SM90A")  # the Hopper kernel has an sm_90a image
    sources += _sources("csrc/cuda/*.cpp") + _sources("csrc/cuda/**/*.cu")
    # Development builds (docs/hopper_kernel.md, "Development builds"): CAKE_NVCC_EXTRA's flags go to
    # nvcc, and its -D defines to the host compiler as well, so that the headers both compile (the
    # kernels' shared-memory layouts, which the host sizes launches and checks devices by) agree.
    nvcc_extra = os.environ.get("CAKE_NVCC_EXTRA", "").split()
    extension = CUDAExtension(
        "torch_ops._C",
        sources,
        include_dirs=_cuda_wheel_includes(),
        extra_compile_args={
            "cxx": cxx_flags + cuda_defines + [flag for flag in nvcc_extra if flag.startswith("-D")],
            "nvcc": ["-O3", "-DNDEBUG", "--expt-relaxed-constexpr", "-lineinfo"] + cuda_defines + _gencode_flags()
                + nvcc_extra,
        },
    )
else:
    extension = CppExtension("torch_ops._C", sources, extra_compile_args={"cxx": cxx_flags})

setup(
    packages=["torch_ops", "torch_ops.meta"],
    package_dir={"torch_ops": "torch_ops", "torch_ops.meta": "meta"},
    ext_modules=[extension],
    cmdclass={"build_ext": BuildExtension},
)
