"""PyTorch figures on the same machine, same run, for BENCHMARKS.md.

Prints one JSON object: device copy bandwidth, pinned/pageable host->device,
bf16 F.linear at the shapes dynvram measures, safetensors load_file to cuda.
"""
import json, os, sys, time
import torch
import torch.nn.functional as F

def timed(fn, reps=20, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t) / reps)
    ts.sort()
    return ts[len(ts) // 2]

out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
n = 1 << 30
a = torch.empty(n, dtype=torch.uint8, device="cuda")
b = torch.empty_like(a)
out["d2d_copy_GBps"] = 2 * n / timed(lambda: b.copy_(a)) / 1e9
h = torch.empty(n, dtype=torch.uint8).pin_memory()
out["h2d_pinned_GBps"] = n / timed(lambda: a.copy_(h, non_blocking=True), reps=5) / 1e9
hp = torch.empty(n, dtype=torch.uint8)
out["h2d_pageable_GBps"] = n / timed(lambda: a.copy_(hp), reps=3) / 1e9
del a, b, h, hp
lin = {}
# The layer shapes (N x K) of bench/gpu.sh at M = 1, 16, 256 and 4096.
shapes = [(16384, 16384), (12288, 3072), (3072, 12288), (4096, 4096)]
for (m, nn, k) in [(m, nn, k) for m in (1, 16, 256, 4096) for (nn, k) in shapes]:
    ws = [torch.randn(nn, k, dtype=torch.bfloat16, device="cuda") for _ in range(4)]
    x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    i = [0]
    def f():
        i[0] = (i[0] + 1) % 4
        return F.linear(x, ws[i[0]])
    t = timed(f, reps=20)
    lin[f"{m}x{nn}x{k}"] = {"ms": t * 1e3, "weight_GBps": nn * k * 2 / t / 1e9, "TFLOPs": 2 * m * nn * k / t / 1e12}
    del ws
out["bf16_linear"] = lin
path = sys.argv[1] if len(sys.argv) > 1 else None
if path and os.path.exists(path):
    from safetensors.torch import load_file
    load_file(path, device="cuda"); torch.cuda.synchronize()
    t = time.perf_counter(); d = load_file(path, device="cuda"); torch.cuda.synchronize()
    dt = time.perf_counter() - t
    size = sum(v.numel() * v.element_size() for v in d.values())
    out["safetensors_load_file_cuda_GBps"] = size / dt / 1e9
print(json.dumps(out, indent=1))
