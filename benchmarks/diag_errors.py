"""Diagnose: raise ValueErrors from the C++ ops (CPU and CUDA) in a fresh process."""
import torch
import torch_ops  # noqa: F401

q = torch.zeros(3, 32, 512, dtype=torch.bfloat16)
out = torch.zeros(3, 32, 512, dtype=torch.bfloat16)
lse = torch.zeros(3, 32)
idx = torch.zeros(3, 10, dtype=torch.int32)
for name, cache in [("ok", torch.zeros(4, 64, 384, dtype=torch.uint8)), ("4d", torch.zeros(4, 2, 32, 384, dtype=torch.uint8)),
                    ("dtype", torch.zeros(4, 64, 384))]:
    try:
        torch.ops.cake.sparse_mla_prefill(q, cache, idx, out, lse, 0.1)
        print(name, "no error", flush=True)
    except ValueError as e:
        print(name, "ValueError:", str(e).splitlines()[0], flush=True)
if torch.cuda.is_available():
    try:
        torch.ops.cake.sparse_mla_prefill(q.cuda(), torch.zeros(4, 2, 32, 384, dtype=torch.uint8, device="cuda"),
                                          idx.cuda(), out.cuda(), lse.cuda(), 0.1)
    except ValueError as e:
        print("cuda ValueError:", str(e).splitlines()[0], flush=True)
print("done")
