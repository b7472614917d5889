"""One warm-up and one measured launch of a benchmark shape, for ncu: the prefill by default,
    ncu --clock-control none -k regex:sparse_mla --launch-skip 1 --launch-count 1 \
        python benchmarks/profile_one.py --tokens 1024 --heads 128 --topk 1024 --head-tiles 2
or, with --decode, the decode as planned (--num-splits / --head-tiles to force a plan). A decode
call launches its split kernel and then, where it splits, the merge kernel, so that the second
call's split kernel is the second launch of a kernel regex that leaves the merge out:
    ncu ... -k 'regex:sparse_mla_(prefill_small|attention_hopper|decode_split)_kernel' \
        --launch-skip 1 --launch-count 1 python benchmarks/profile_one.py --decode --tokens 8 --heads 16
(benchmarks/ncu_source.sh takes that regex from NCU_KERNEL). Each call follows an L2 flush, as
the benchmarks' timings do (ncu flushes the caches itself by default).
"""
import argparse
import math

import torch

import torch_ops

parser = argparse.ArgumentParser()
parser.add_argument("--tokens", type=int, default=1024)
parser.add_argument("--heads", type=int, default=128)
parser.add_argument("--topk", type=int, default=1024)
parser.add_argument("--head-tiles", type=int, default=None)
parser.add_argument("--decode", action="store_true", help="the decode op (planned splits) instead of the prefill")
parser.add_argument("--num-splits", type=int, default=None, help="with --decode: force this many splits")
args = parser.parse_args()
if args.num_splits is not None and not args.decode:
    parser.error("--num-splits needs --decode")
pool = 65536
latent = torch.randn(pool // 64, 64, 512, device="cuda").to(torch.bfloat16)
cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent)
q = torch.randn(args.tokens, args.heads, 512, device="cuda").to(torch.bfloat16)
indices = torch.rand(args.tokens, pool, device="cuda").topk(args.topk, dim=1).indices.to(torch.int32)
sink = torch.randn(args.heads, device="cuda")
output = torch.empty(args.tokens, args.heads, 512, device="cuda", dtype=torch.bfloat16)
out_lse = torch.empty(args.tokens, args.heads, device="cuda")
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
if args.decode:
    mid_out, mid_lse = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_allocate_decode_scratch(
        args.tokens, args.heads, args.topk, device="cuda")
for _ in range(2):
    flush.random_()
    if args.decode:
        plan = torch_ops.sparse_mla_decode(q, cache, indices, output, out_lse, 1 / math.sqrt(512), attn_sink=sink,
                                           mid_out=mid_out, mid_lse=mid_lse, num_splits=args.num_splits,
                                           head_tiles=args.head_tiles)
    else:
        plan = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(q, cache, indices, output, out_lse,
                                                                  1 / math.sqrt(512), attn_sink=sink,
                                                                  head_tiles=args.head_tiles)
torch.cuda.synchronize()
print(plan)
