"""S2 baseline: the streamed pass of `dynvram bench pass`, written the way a
careful PyTorch user would: the same MLP stack (f16, `blocks` blocks of
`hidden x ffn`, x = x + fc2(gelu_tanh(fc1(x)))) and the same budget rule
(weights / ratio; two in-flight blocks; the rest resident from block 0),
streamed weights in pinned host memory, two CUDA streams (block i+1's copies
on a copy stream while block i computes), two GPU slots alternating.

Prints one JSON object: per row count, the median pass time of `passes`
passes after a warm-up, and the bytes streamed per pass.
"""
import argparse, json, time
import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--blocks", type=int, default=32)
p.add_argument("--hidden", type=int, default=4096)
p.add_argument("--ffn", type=int, default=14336)
p.add_argument("--rows", default="1,16,64")
p.add_argument("--ratio", type=float, default=4.0)
p.add_argument("--passes", type=int, default=3)
a = p.parse_args()

dt, dev = torch.float16, "cuda"
shapes = [(a.ffn, a.hidden), (a.ffn,), (a.hidden, a.ffn), (a.hidden,)]
per_block = sum(2 * (s[0] * (s[1] if len(s) > 1 else 1)) for s in shapes)
model = a.blocks * per_block
resident = max(0, min(a.blocks, int((model / a.ratio - 2 * per_block) // per_block)))


def block(i):
    # Random values drawn on the GPU (fast); their values do not matter here.
    torch.manual_seed(i)
    ts = [torch.randn(s, device=dev, dtype=torch.float32) for s in shapes]
    ts[0] /= a.hidden**0.5
    ts[2] /= a.ffn**0.5
    return [t.to(dt) for t in ts]


gpu = [block(i) for i in range(resident)]
host = [[t.cpu().pin_memory() for t in block(i)] for i in range(resident, a.blocks)]
slots = [[torch.empty(s, device=dev, dtype=dt) for s in shapes] for _ in range(2)]
copy = torch.cuda.Stream()
ready = [torch.cuda.Event() for _ in range(2)]
freed = [torch.cuda.Event() for _ in range(2)]


def stage(i):
    s = i % 2
    with torch.cuda.stream(copy):
        copy.wait_event(freed[s])  # the block that used this slot is done
        for dst, src in zip(slots[s], host[i - resident]):
            dst.copy_(src, non_blocking=True)
        ready[s].record(copy)


def run_pass(x):
    compute = torch.cuda.current_stream()
    if resident < a.blocks:
        stage(resident)
    for i in range(a.blocks):
        if i < resident:
            w = gpu[i]
        else:
            compute.wait_event(ready[i % 2])
            w = slots[i % 2]
            if i + 1 < a.blocks:
                stage(i + 1)
        h = F.gelu(F.linear(x, w[0], w[1]), approximate="tanh")
        x = x + F.linear(h, w[2], w[3])
        if i >= resident:
            freed[i % 2].record(compute)
    torch.cuda.synchronize()
    return x


out = {
    "impl": "pytorch pinned memory, two streams",
    "torch": torch.__version__,
    "device": torch.cuda.get_device_name(0),
    "model_bytes": model,
    "resident_blocks": resident,
    "streamed_bytes": (a.blocks - resident) * per_block,
    "figures": [],
}
with torch.no_grad():
    for rows in [int(r) for r in a.rows.split(",")]:
        x = torch.randn(rows, a.hidden, device=dev, dtype=dt)
        run_pass(x)
        ts = []
        for _ in range(max(1, a.passes)):
            t = time.perf_counter()
            run_pass(x)
            ts.append(time.perf_counter() - t)
        ts.sort()
        out["figures"].append({"rows": rows, "pass_ms": ts[len(ts) // 2] * 1e3})
print(json.dumps(out, indent=1))
