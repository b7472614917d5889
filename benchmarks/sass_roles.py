"""A kernel's SASS instructions counted by the call in the kernel's own source that each one is
inlined under (a warp-specialised kernel's role calls: which role's code a short split fetches),
and within each call by the source file the instruction comes from (list and cursor arithmetic,
the NVFP4 decode, the primitives ...). No GPU needed: nvcc compiles the translation unit for
sm_90a with line information, nvdisasm prints each instruction's inlining chain.

    python3 benchmarks/sass_roles.py csrc/cuda/hopper_small/prefill_small.cu --kernel Li16ELb1ELNS1_7UnitEndE1ELb0E
    python3 benchmarks/sass_roles.py csrc/cuda/hopper/prefill_hopper.cu --kernel Lb1E --flags -DCAKE_HOPPER_TRACE

--kernel picks the kernel whose mangled name contains the text (the first such kernel; the names
are listed when none matches); --kernel-file names the file whose lines count as the calls
(default: the one nvdisasm names outermost most often). --cubin reads an existing cubin (built
with -lineinfo) instead of compiling. The counts are of code, not of what runs: an instruction
in a loop counts once.
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

import sm90a_cubin

ROOT = sm90a_cubin.ROOT

_SECTION = re.compile(r"^\s*\.section\s+\.text\.(\S+?),")
_FRAME = re.compile(r'^\s*//## File "([^"]+)", line (\d+)')
_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(\S.*?)\s*;")


def parse_nvdisasm(text):
    """{kernel: [(address, instruction, frames)]} from `nvdisasm -gi` output; frames innermost
    first, each (path, line), as the `//## File` lines before an instruction give them (an
    instruction without its own lines keeps the previous one's)."""
    kernels = {}
    current = None
    pending = []
    frames = ()
    for line in text.splitlines():
        section = _SECTION.match(line)
        if section:
            current = kernels.setdefault(section.group(1), [])
            pending, frames = [], ()
            continue
        frame = _FRAME.match(line)
        if frame:
            pending.append((frame.group(1), int(frame.group(2))))
            continue
        instruction = _INSTRUCTION.search(line)
        if instruction and current is not None:
            if pending:
                frames, pending = tuple(pending), []
            current.append((int(instruction.group(1), 16), instruction.group(2), frames))
    return kernels


def attribute(instructions, kernel_file=None):
    """(kernel_file, {call: count}, {call: Counter(inner file)}): each instruction given to the
    outermost frame in `kernel_file` (its call), and to the file of its innermost frame."""
    if kernel_file is None:
        outermost = collections.Counter(os.path.basename(f[-1][0]) for _, _, f in instructions if f)
        kernel_file = outermost.most_common(1)[0][0] if outermost else None
    calls = collections.Counter()
    inner = collections.defaultdict(collections.Counter)
    for _, _, frames in instructions:
        in_kernel = [frame for frame in frames if os.path.basename(frame[0]) == kernel_file]
        call = in_kernel[-1] if in_kernel else ("(outside the kernel file)", 0)
        calls[call] += 1
        inner[call][os.path.basename(frames[0][0]) if frames else "(no line)"] += 1
    return kernel_file, calls, inner


def _tool(name):
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    candidates = [os.path.join(home, "bin", name), shutil.which(name)]
    try:
        import triton  # the torch wheels' triton ships nvdisasm and cuobjdump
        candidates.append(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name))
    except ImportError:
        pass
    for path in candidates:
        if path and os.path.exists(path):
            return path
    sys.exit(f"no {name} found (CUDA_HOME/bin, PATH, triton's bundled tools)")


def compile_cubin(source, flags, out):
    nvcc = sm90a_cubin.find_nvcc() or sys.exit("no nvcc found (CUDA_HOME/bin, PATH)")
    subprocess.run(sm90a_cubin.cubin_command(nvcc, source, out, ["-lineinfo", *flags]), check=True)


def source_line(path, line):
    try:
        with open(path) as f:
            return f.read().splitlines()[line - 1].strip()
    except (OSError, IndexError):
        return ""


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", help="the .cu file (relative to the repository root or absolute)")
    parser.add_argument("--kernel", required=True, help="text the kernel's mangled name contains")
    parser.add_argument("--kernel-file", default=None, help="file whose lines count as the calls (basename)")
    parser.add_argument("--flags", nargs="*", default=[], help="extra nvcc flags, e.g. -DCAKE_SMALL_TRACE")
    parser.add_argument("--cubin", default=None, help="an existing cubin (with -lineinfo) instead of compiling")
    parser.add_argument("--top", type=int, default=6, help="inner files listed a call")
    args = parser.parse_args()
    source = args.source if os.path.isabs(args.source) else os.path.join(ROOT, args.source)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = args.cubin or os.path.join(tmp, "kernel.cubin")
        if args.cubin is None:
            compile_cubin(source, args.flags, cubin)
        text = subprocess.run([_tool("nvdisasm"), "-gi", "-c", cubin], check=True, capture_output=True,
                              text=True).stdout
    kernels = parse_nvdisasm(text)
    names = [name for name in kernels if args.kernel in name]
    if not names:
        sys.exit("no kernel name contains that; the kernels:\n" + "\n".join(kernels))
    instructions = kernels[names[0]]
    kernel_file, calls, inner = attribute(instructions, args.kernel_file)
    paths = {os.path.basename(f[0]): f[0] for _, _, frames in instructions for f in frames}
    print(f"{names[0]}: {len(instructions)} instructions; calls in {kernel_file}\n")
    print("| call (line: source) | instructions | from (file: instructions) |\n|---|---|---|")
    for call, count in calls.most_common():
        text = source_line(paths.get(kernel_file, ""), call[1]) if call[1] else ""
        files = ", ".join(f"{name} {n}" for name, n in inner[call].most_common(args.top))
        print(f"| {call[1]}: `{text}` | {count} | {files} |")


if __name__ == "__main__":
    main()
