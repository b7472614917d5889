"""Runs benchmarks/output_digest.py's prefill cases (one, several, or all of them) many times in one
process and reports whether every run gave the same bits (a schedule race shows as runs that
differ), and for each run that differs from the most common result: how many output rows, which
tokens, and the blocks of those tokens' items and of the items before them in their CTA's walk
(item t - grid, exact where a token is one work item: 64 heads), to see which item
boundaries a difference follows. --lengths and --invalid-fraction replace the case's list lengths
or its share of masked entries, to tell the two apart. Meant for the GPU (--device cpu runs the
CPU kernels, to test the tool).

    python3 benchmarks/repeat_check.py --case prefill_h64_tk512 --runs 40
    python3 benchmarks/repeat_check.py --case prefill_h64_tk512 --runs 40 --lengths none
    python3 benchmarks/repeat_check.py --case prefill_h64_tk512 --runs 40 --invalid-fraction 0
    python3 benchmarks/repeat_check.py --case prefill --runs 10     # every prefill case, one process
"""
import argparse
import collections
import hashlib
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", nargs="+", default=["prefill_h64_tk512"],
                        help="prefill cases of output_digest.CASES, or 'prefill' for all of them (one process)")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cuda (the point of it), or cpu (the CPU kernels, to test the tool)")
    # To split a difference's causes: the case's list lengths or its masked entries alone.
    parser.add_argument("--lengths", choices=("case", "random", "none"), default="case",
                        help="the case's list lengths (default), random ones, or none (whole lists)")
    parser.add_argument("--invalid-fraction", type=float, default=None,
                        help="the fraction of masked or out-of-range entries (default: the case's)")
    args = parser.parse_args(argv)
    from output_digest import CASES
    by_name = {c[0]: c for c in CASES}
    names = [c[0] for c in CASES if c[4] == "prefill"] if args.case == ["prefill"] else args.case
    for name in names:
        if name not in by_name or by_name[name][4] != "prefill":
            raise SystemExit(f"not a prefill case of output_digest.CASES: {name}")
    if args.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        print(f"device: {props.name}, uuid {props.uuid}")  # a difference seen on one card only names it
    for name in names:
        for line in repeat_case(by_name[name], args):
            print(line, flush=True)


def repeat_case(case, args):
    """Runs one case args.runs times on fresh NaN-poisoned outputs; report()'s lines."""
    import torch_ops
    from helpers import CacheSpec, make_problem
    from output_digest import POOL, poisoned_outputs
    name, num_tokens, num_heads, topk, _, extra = case
    dense = extra.get("dense", False)
    length_kind = {"case": None if dense else "random", "random": "random", "none": None}[args.lengths]
    invalid = {"invalid_fraction": 0.0} if dense else {}
    if args.invalid_fraction is not None:
        invalid = {"invalid_fraction": args.invalid_fraction}
    problem = make_problem(num_tokens=num_tokens, num_heads=num_heads, topk=topk, main=CacheSpec(**POOL),
                           device=args.device, seed=args.seed, lengths=length_kind, sink=1.0, **invalid)
    lengths = problem.kwargs.get("topk_length")
    if lengths is None:
        blocks = [topk // 64] * num_tokens
    else:
        blocks = [(min(max(int(n), 0), topk) + 63) // 64 for n in lengths.cpu().tolist()]
    outputs, plan = [], {}
    for _ in range(args.runs):
        output, out_lse = poisoned_outputs(num_tokens, num_heads, extra.get("offset", 0), args.device)
        plan = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(problem.q, problem.kv_cache, problem.indices, output,
                                                                   out_lse, problem.sm_scale, **problem.kwargs)
        if args.device == "cuda":
            torch.cuda.synchronize()
        outputs.append((output.contiguous().cpu(), out_lse.cpu()))
    label = name + ("" if args.lengths == "case" else f" lengths={args.lengths}") + (
        "" if args.invalid_fraction is None else f" invalid_fraction={args.invalid_fraction}")
    return report(label, outputs, blocks, dict(plan))


def report(name, outputs, blocks, plan):
    """Lines: the distinct results of `outputs` ((output, lse) pairs of CPU tensors), then, for each
    run that differs from the most common result, its differing rows and their tokens' items."""
    digests = [hashlib.sha256(o.view(torch.int16).numpy().tobytes() + l.view(torch.int32).numpy().tobytes()).hexdigest()[:16]
               for o, l in outputs]
    counts = collections.Counter(digests)
    grid = plan.get("grid_size", 0)
    lines = [f"{name}: {len(outputs)} runs, {len(counts)} distinct results {dict(counts)}; plan {plan}"]
    common = digests.index(counts.most_common(1)[0][0])
    base_o, base_l = outputs[common]
    for run, (o, l) in enumerate(outputs):
        if digests[run] == digests[common]:
            continue
        rows = ((o.view(torch.int16) != base_o.view(torch.int16)).any(-1)) | (l.view(torch.int32) != base_l.view(torch.int32))
        tokens = sorted({int(t) for t in rows.nonzero()[:, 0].tolist()})
        diff = (o.float() - base_o.float()).abs().nan_to_num(float("inf")).max().item()
        lines.append(f"run {run}: {int(rows.sum())} rows differ in {len(tokens)} tokens, max |diff| {diff:.3g}")
        for t in tokens[:12]:
            heads = rows[t].nonzero()[:, 0].tolist()
            before = t - grid if grid and t >= grid else None
            lines.append(f"  token {t}: {len(heads)} heads ({heads[0]}..{heads[-1]}), its item {blocks[t]} blocks"
                         + (f", the item before it in its CTA's walk (token {before}) {blocks[before]} blocks"
                            if before is not None else ", first in its CTA's walk"))
    return lines

if __name__ == "__main__":
    main()
