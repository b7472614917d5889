"""Host time of one call of the decode and the prefill, by layer, on the GPU.

    python benchmarks/host_path.py [--rows 1x64x2048 8x16x1024] [--repeats 200] [--json host.json]

A call's host path (the Python wrapper, the planner, the op's dispatch and checks, the kernel
launches) runs before the GPU starts its kernels; in a serving loop that launches each decode
step eagerly (no CUDA graph), a host path longer than the kernels bounds the step. Per row this
times, with the GPU idle before each call (synchronized, not counted), the median over --repeats
calls of: the public wrapper (torch_ops.sparse_mla_decode / sparse_mla_prefill, planning
included), the registered op called directly with the wrapper's plan (torch.ops.cake.*: dispatch,
checks, launches), the same op call on the row's tensors cut to zero tokens (dispatch and checks,
no launch: the op returns before it launches anything), and the planner alone (the wrapper's plan
lookup). Inputs as in bench_decode.py.
"""
import argparse
import json
import math

import torch

import torch_ops
from bench_decode import decode_inputs, host_time
from bench_prefill import git_commit, prepare_run
from torch_ops import decode_planner


def time_row(num_tokens, num_heads, candidates, cache, repeats):
    sm_scale = 1 / math.sqrt(512)
    q, indices, sink, output, out_lse, mid_out, mid_lse = decode_inputs(num_tokens, num_heads, candidates,
                                                                        decode_planner.DEFAULT_MAX_SPLITS)
    plan = torch_ops.sparse_mla_decode(q, cache, indices, output, out_lse, sm_scale, attn_sink=sink,
                                       mid_out=mid_out, mid_lse=mid_lse)
    row = dict(T=num_tokens, H=num_heads, candidates=candidates, head_tiles=plan["head_tiles"],
               num_splits=plan["num_splits"])
    row["decode_wrapper_us"] = host_time(
        lambda: torch_ops.sparse_mla_decode(q, cache, indices, output, out_lse, sm_scale, attn_sink=sink,
                                            mid_out=mid_out, mid_lse=mid_lse), repeats)
    row["decode_op_us"] = host_time(
        lambda: torch.ops.cake.sparse_mla_decode(q, cache, indices, output, out_lse, sm_scale, attn_sink=sink,
                                                 mid_out=mid_out, mid_lse=mid_lse, num_splits=plan["num_splits"],
                                                 head_tiles=plan["head_tiles"]), repeats)
    # The same call on zero tokens: everything but the launches (T = 0 runs nothing). The views are
    # made once, outside the timed call, so that it times the op alone as the column before does.
    q0, indices0, output0, out_lse0 = q[:0], indices[:0], output[:0], out_lse[:0]
    mid_out0, mid_lse0 = mid_out[:, :0], mid_lse[:, :0]
    row["decode_op_no_launch_us"] = host_time(
        lambda: torch.ops.cake.sparse_mla_decode(q0, cache, indices0, output0, out_lse0, sm_scale, attn_sink=sink,
                                                 mid_out=mid_out0, mid_lse=mid_lse0, num_splits=plan["num_splits"],
                                                 head_tiles=plan["head_tiles"]), repeats)
    row["decode_planner_us"] = host_time(
        lambda: decode_planner.decode_plan_for_call(q.device, num_tokens, num_heads, candidates, 0,
                                                    decode_planner.DEFAULT_MAX_SPLITS, None, None), repeats)
    if torch_ops._C.prefill_serves(num_heads, candidates, 0):
        row["prefill_wrapper_us"] = host_time(
            lambda: torch_ops.sparse_mla_prefill(q, cache, indices, output, out_lse, sm_scale, attn_sink=sink),
            repeats)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", nargs="+", default=["1x64x2048", "8x64x1024", "8x16x1024", "64x8x4096",
                                                       "128x128x2048"], metavar="TxHxCANDIDATES")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--json")
    args = parser.parse_args()
    _, _, device_name, _, cache = prepare_run()
    print(f"device {device_name}, commit {git_commit()}, host time of one call (us, median of {args.repeats})")
    print("| T | H | candidates | plan | decode wrapper | decode op | decode op, no launch | decode planner | prefill wrapper |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for text in args.rows:
        num_tokens, num_heads, candidates = (int(x) for x in text.split("x"))
        row = time_row(num_tokens, num_heads, candidates, cache, args.repeats)
        rows.append(row)
        prefill = f"{row['prefill_wrapper_us']:.1f}" if "prefill_wrapper_us" in row else "-"
        print(f"| {num_tokens} | {num_heads} | {candidates} | ht={row['head_tiles']} s={row['num_splits']} | "
              f"{row['decode_wrapper_us']:.1f} | {row['decode_op_us']:.1f} | {row['decode_op_no_launch_us']:.1f} | "
              f"{row['decode_planner_us']:.1f} | "
              f"{prefill} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(meta=dict(device=device_name, commit=git_commit(), repeats=args.repeats,
                                     torch=torch.__version__), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
