"""The decode's split ranges in 32 bits (csrc/common/decode_splits.h, decode_split_first_chunk_u32,
which the Hopper kernels' split instances use) against the 64-bit division that the CPU kernel,
the planner and the portable CUDA kernel use: every split's first chunk equal,
for every split count the CUDA decode allows (up to 65535, where s * (C % n) comes nearest to
2^32) and chunk counts up to 2^25 (int32 list widths), by a small C++ program built with the host
compiler."""
import os
import random
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = r"""
#include <cstdint>
#include <cstdio>
#include "common/decode_splits.h"

int main() {
  unsigned long long cases = 0, wrong = 0;
  long long n, chunks;
  while (std::scanf("%lld %lld", &n, &chunks) == 2) {
    const uint32_t quotient = uint32_t(chunks / n), remainder = uint32_t(chunks % n);
    // every split's first chunk and the end of the last one
    for (long long split = 0; split <= n; ++split) {
      const long long wide = cake::decode_split_first_chunk(split, n, chunks);
      const long long narrow = cake::decode_split_first_chunk_u32(uint32_t(split), uint32_t(n), quotient, remainder);
      ++cases;
      if (wide != narrow) {
        if (++wrong <= 5) std::printf("n %lld chunks %lld split %lld: %lld != %lld\n", n, chunks, split, wide, narrow);
      }
    }
  }
  std::printf("%llu cases, %llu wrong\n", cases, wrong);
  return wrong != 0;
}
"""


def _shapes():
    rng = random.Random(20261206)
    shapes = [(n, c) for n in range(1, 40) for c in range(n, 3 * n + 70, 7)]
    # the largest split counts, where split * (C % n) nears 2^32, with C % n at its largest
    for n in (65535, 65534, 46341, 40000, 4097):
        for c in (n, n + n - 1, 7 * n + n - 1, (1 << 25) - 1, (1 << 25) // n * n + n - 1):
            shapes.append((n, c))
    for _ in range(40):
        n = rng.randint(1, 65535)
        shapes.append((n, rng.randint(n, 1 << 25)))
    return [(n, c) for n, c in shapes if n <= c < (1 << 25) + 65535]


def test_split_first_chunk_in_32_bits_matches_the_division(tmp_path):
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    source = tmp_path / "splits.cpp"
    source.write_text(PROGRAM)
    binary = tmp_path / "splits"
    build = subprocess.run([compiler, "-std=c++17", "-O2", f"-I{os.path.join(ROOT, 'csrc')}", str(source), "-o",
                            str(binary)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    shapes = _shapes()
    run = subprocess.run([str(binary)], input="".join(f"{n} {c}\n" for n, c in shapes), capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:]
    expected = sum(n + 1 for n, _ in shapes)
    assert run.stdout.strip().endswith(f"{expected} cases, 0 wrong"), run.stdout[-3000:]
