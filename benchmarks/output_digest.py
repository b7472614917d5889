"""Bit-level fingerprints of the CUDA kernels' outputs on fixed inputs, to compare builds.

A change that keeps every kernel's arithmetic and its order (a new schedule, a new epilogue path)
must give the same bits: run this with each build and compare the files.

    python3 benchmarks/output_digest.py --json a.json          # on the GPU, with the build to fingerprint
    python3 benchmarks/output_digest.py --compare a.json b.json # anywhere: which cases differ

Every case draws its inputs from a fixed seed with the tests' problem maker (tests/helpers.py: q,
a random NVFP4 cache written by the library's own writer, candidate lists with masked and
out-of-range entries, random lengths, a sink), runs the prefill or the decode (its plan, or forced splits) into NaN-filled outputs, and
records the SHA-256 of the output's and the LSE's bytes, and how many output elements are NaN.
The cases cover the Hopper kernels' paths: 64 and 128 heads (whole lists), the padded head
block (48, 112), the small-heads kernel (16, 32) and its shifted launch (80, 96), output views of
several alignments, decode splits, and inputs like the benchmarks' (every candidate valid, no
lengths). A comparison counts a case missing from either file as a difference.
"""
import argparse
import hashlib
import json
import sys
from pathlib import Path

import torch

POOL = dict(pages=256, page_size=64)  # 16,384 cache rows

# (name, T, H, topk, op, extra): op "prefill" or "decode"; extra: output offset (elements) or splits
CASES = [
    ("prefill_h64_tk512", 300, 64, 512, "prefill", {}),
    ("prefill_h128_tk1024", 200, 128, 1024, "prefill", {}),
    ("prefill_h128_tk128", 500, 128, 128, "prefill", {}),
    ("prefill_h48_tk512", 150, 48, 512, "prefill", {}),
    ("prefill_h112_tk256", 150, 112, 256, "prefill", {}),
    ("prefill_h16_tk512", 300, 16, 512, "prefill", {}),
    ("prefill_h32_tk1024", 200, 32, 1024, "prefill", {}),
    ("prefill_h80_tk512", 100, 80, 512, "prefill", {}),
    ("prefill_h96_tk512", 100, 96, 512, "prefill", {}),
    ("prefill_h64_tk512_offset2", 300, 64, 512, "prefill", {"offset": 2}),
    ("prefill_h64_tk512_offset8", 300, 64, 512, "prefill", {"offset": 8}),
    ("prefill_h32_tk512_offset2", 200, 32, 512, "prefill", {"offset": 2}),
    ("decode_t1_h64_2048", 1, 64, 2048, "decode", {}),
    ("decode_t4_h128_1024", 4, 128, 1024, "decode", {}),
    ("decode_t8_h64_1024_s4", 8, 64, 1024, "decode", {"splits": 4}),
    ("decode_t64_h128_2048_s2", 64, 128, 2048, "decode", {"splits": 2}),
    ("decode_t8_h16_1024", 8, 16, 1024, "decode", {}),
    ("decode_t16_h8_4096", 16, 8, 4096, "decode", {}),
    # The benchmarks' own kind of input: every candidate valid, no lengths (so the softmax's
    # all-valid path, which the cases above reach in a few blocks only). Last, so that the cases
    # above keep their seeds.
    ("prefill_h64_tk512_dense", 300, 64, 512, "prefill", {"dense": True}),
    ("prefill_h128_tk1024_dense", 100, 128, 1024, "prefill", {"dense": True}),
    ("prefill_h16_tk512_dense", 300, 16, 512, "prefill", {"dense": True}),
    ("prefill_h32_tk1024_dense", 100, 32, 1024, "prefill", {"dense": True}),
    ("decode_t1_h64_2048_dense", 1, 64, 2048, "decode", {"dense": True}),
    ("decode_t8_h16_1024_dense", 8, 16, 1024, "decode", {"dense": True}),
    ("decode_t32_h128_2048_dense", 32, 128, 2048, "decode", {"dense": True}),
]


def poisoned_outputs(num_tokens, num_heads, offset, device):
    """NaN-filled output and LSE for a case; the output a view `offset` elements into its storage
    (an offset case's view is only 4- or 16-byte aligned)."""
    storage = torch.full((num_tokens * num_heads * 512 + offset,), float("nan"), dtype=torch.bfloat16, device=device)
    output = storage[offset:].view(num_tokens, num_heads, 512)
    return output, torch.full((num_tokens, num_heads), float("nan"), device=device)


def run_case(name, num_tokens, num_heads, topk, op, extra, seed, device="cuda"):
    # The tests' random problems (tests/helpers.py): masked and out-of-range candidates, random
    # lengths (some past the list, some negative), a sink.
    # The library on PYTHONPATH (ab_trees.sh points it at the tree under test), else this checkout's
    # in-place build; imported here, not at the top: --compare runs where neither is importable.
    root = Path(__file__).resolve().parent.parent
    sys.path.append(str(root))
    import torch_ops
    sys.path.insert(0, str(root / "tests"))
    from helpers import CacheSpec, make_problem
    dense = extra.get("dense", False)
    problem = make_problem(num_tokens=num_tokens, num_heads=num_heads, topk=topk, main=CacheSpec(**POOL), device=device,
                           seed=seed, lengths=None if dense else "random", sink=1.0,
                           **({"invalid_fraction": 0.0} if dense else {}))
    output, out_lse = poisoned_outputs(num_tokens, num_heads, extra.get("offset", 0), device)
    args = (problem.q, problem.kv_cache, problem.indices, output, out_lse, problem.sm_scale)
    if op == "prefill":
        plan = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(*args, **problem.kwargs)
    else:
        mid_out, mid_lse = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch(
            num_tokens, num_heads, topk, device=device)
        mid_out.fill_(float("nan"))
        mid_lse.fill_(float("nan"))
        plan = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_decode(*args, mid_out=mid_out, mid_lse=mid_lse,
                                                                 num_splits=extra.get("splits"), **problem.kwargs)
    out_bytes = output.contiguous().view(torch.int16).cpu().numpy().tobytes()
    lse_bytes = out_lse.contiguous().view(torch.int32).cpu().numpy().tobytes()
    return dict(name=name, output_sha256=hashlib.sha256(out_bytes).hexdigest(),
                lse_sha256=hashlib.sha256(lse_bytes).hexdigest(),
                output_nan=int(torch.isnan(output.float()).sum().item()),
                plan={k: v for k, v in dict(plan).items() if isinstance(v, (int, float, str))})


def compare(paths):
    """Prints each later file's cases against the first's; returns how many differ or are missing
    from either side (a digest that crashed part-way must not pass as the same bits)."""
    runs = [json.load(open(path)) for path in paths]
    first = {case["name"]: case for case in runs[0]["cases"]}
    differing = 0
    for path, run in zip(paths[1:], runs[1:]):
        names = {case["name"] for case in run["cases"]}
        for name in sorted(set(first) - names):
            differing += 1
            print(f"{path}: {name}: MISSING (in {paths[0]} only)")
        for case in run["cases"]:
            base = first.get(case["name"])
            if base is None:
                differing += 1
                print(f"{path}: {case['name']}: MISSING from {paths[0]}")
                continue
            same = base["output_sha256"] == case["output_sha256"] and base["lse_sha256"] == case["lse_sha256"]
            if not same:
                differing += 1
            plans = "" if base.get("plan") == case.get("plan") else f" (plan {case.get('plan')} against {base.get('plan')})"
            print(f"{path}: {case['name']}: {'same bits' if same else 'DIFFERENT'}{plans}"
                  + ("" if case["output_nan"] == 0 else f" ({case['output_nan']} NaN outputs)"))
    return differing


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write the fingerprints here (GPU)")
    parser.add_argument("--compare", nargs="+", metavar="JSON", help="compare fingerprint files with the first")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu to try the cases on the CPU kernels")
    parser.add_argument("--cases", nargs="+", default=None, metavar="NAME", help="only the cases whose names contain one of these")
    args = parser.parse_args(argv)
    if args.compare:
        if len(args.compare) < 2:
            parser.error("--compare needs at least two files")
        return 1 if compare(args.compare) else 0
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("output_digest.py needs a CUDA device (or --compare)")
    cases = []
    for i, (name, num_tokens, num_heads, topk, op, extra) in enumerate(CASES):
        if args.cases and not any(part in name for part in args.cases):
            continue
        case = run_case(name, num_tokens, num_heads, topk, op, extra, args.seed + i, args.device)
        print(f"{name}: output {case['output_sha256'][:16]} lse {case['lse_sha256'][:16]} "
              f"NaN outputs {case['output_nan']} plan {case['plan']}", flush=True)
        cases.append(case)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(meta=dict(device=torch.cuda.get_device_name() if args.device == "cuda" else args.device,
                                     torch=torch.__version__,
                                     seed=args.seed), cases=cases), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
