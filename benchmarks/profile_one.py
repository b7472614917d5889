"""One warm-up and one measured prefill launch of a benchmark shape, for ncu:
    ncu --clock-control none -k regex:sparse_mla --launch-skip 1 --launch-count 1 \
        python benchmarks/profile_one.py --tokens 1024 --heads 128 --topk 1024 --head-tiles 2
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
args = parser.parse_args()
pool = 65536
latent = torch.randn(pool // 64, 64, 512, device="cuda").to(torch.bfloat16)
cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent)
q = torch.randn(args.tokens, args.heads, 512, device="cuda").to(torch.bfloat16)
indices = torch.rand(args.tokens, pool, device="cuda").topk(args.topk, dim=1).indices.to(torch.int32)
sink = torch.randn(args.heads, device="cuda")
output = torch.empty(args.tokens, args.heads, 512, device="cuda", dtype=torch.bfloat16)
out_lse = torch.empty(args.tokens, args.heads, device="cuda")
for _ in range(2):
    plan = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(q, cache, indices, output, out_lse, 1 / math.sqrt(512),
                                                              attn_sink=sink, head_tiles=args.head_tiles)
torch.cuda.synchronize()
print(plan)
