"""A DeepSeek-V4-shaped prefill on the best available device, checked against the float64
reference, printing the plan and the time.

    python examples/demo.py [--tokens N]
"""
import argparse
import math
import time

import torch

import torch_ops
from torch_ops.reference import sparse_mla_prefill_reference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=None, help="query tokens (default: 2048 on CUDA, 64 on CPU)")
    parser.add_argument("--heads", type=int, default=64, help="heads on this GPU (a TP shard of 128)")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    num_tokens = args.tokens or (2048 if device.type == "cuda" else 64)
    num_heads, topk, extra_topk = args.heads, 512, 128
    g = torch.Generator().manual_seed(0)

    # Main cache: 256 pages of 64 tokens (HND); compressed cache: 64 pages of 4 tokens (NHD).
    latent = torch.randn(256, 64, 512, generator=g).to(torch.bfloat16).to(device)
    kv_cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent, kv_layout="HND")
    extra_latent = torch.randn(64, 4, 512, generator=g).to(torch.bfloat16).to(device)
    extra_cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(extra_latent, kv_layout="NHD")

    q = torch.randn(num_tokens, num_heads, 512, generator=g).to(torch.bfloat16).to(device)
    indices = torch.randint(0, 256 * 64, (num_tokens, topk), generator=g, dtype=torch.int32).to(device)
    extra_indices = torch.randint(0, 64 * 4, (num_tokens, extra_topk), generator=g, dtype=torch.int32).to(device)
    topk_length = torch.randint(topk // 2, topk + 1, (num_tokens,), generator=g, dtype=torch.int32).to(device)
    sink = torch.randn(num_heads, generator=g).to(device)
    output = torch.empty(num_tokens, num_heads, 512, dtype=torch.bfloat16, device=device)
    out_lse = torch.empty(num_tokens, num_heads, device=device)
    kwargs = dict(topk_length=topk_length, attn_sink=sink, extra_kv_cache=extra_cache, extra_indices=extra_indices)
    sm_scale = 1.0 / math.sqrt(512)

    run = lambda: torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_prefill(q, kv_cache, indices, output, out_lse, sm_scale, **kwargs)  # noqa: E731
    plan = run()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    repeats = 10 if device.type == "cuda" else 1
    for _ in range(repeats):
        run()
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = (time.perf_counter() - start) / repeats

    sample = torch.randperm(num_tokens, generator=g)[:16].to(device)
    ref_kwargs = dict(kwargs, topk_length=topk_length[sample], extra_indices=extra_indices[sample])
    ref_out, ref_lse = sparse_mla_prefill_reference(q[sample], kv_cache, indices[sample], sm_scale, **ref_kwargs)
    rel = ((output[sample].double().cpu() - ref_out).norm(dim=-1) / ref_out.norm(dim=-1)).max().item()
    lse_err = (out_lse[sample].double().cpu() - ref_lse).abs().max().item()
    flops = 4 * num_tokens * num_heads * (topk * 0.75 + extra_topk) * 512
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device {name}: T={num_tokens} H={num_heads} topk={topk} (+{extra_topk} extra), plan {plan}")
    print(f"time {elapsed * 1e3:.3f} ms (~{flops / elapsed / 1e12:.2f} TFLOP/s on ~{flops / 1e9:.1f} GFLOP)")
    print(f"vs float64 reference on 16 sampled tokens: max row rel error {rel:.2e}, max |lse err| {lse_err:.2e}")
    assert rel <= 1e-2 and lse_err <= 1e-3 * max(1.0, ref_lse.abs().max().item()), "result out of contract"
    print("OK")


if __name__ == "__main__":
    main()
