"""The linear-kernel table of BENCHMARKS.md from one bench/gpu.sh run.

Usage: python3 bench/table.py OUT_DIR   (the folder gpu.sh wrote)
Reads linear_m1.txt, linear_mid.txt, linear_big.txt (dynvram bench linear)
and torch.json (bench/torch_baseline.py); prints markdown: each figure
beside its limit (the faster device copy of the same run) and beside
PyTorch bf16 F.linear on the same shape, then the K1-K3 verdicts.
"""
import json, os, re, sys

out = sys.argv[1] if len(sys.argv) > 1 else "bench-out"
ROW = re.compile(r"^(\w+)\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s+([\d.]+)\s+(\d+)\s+(.*)$")
COPY = re.compile(r"copy_buffer_to_buffer ([\d.]+) GB/s, shader ([\d.]+) GB/s; shader read-only ([\d.]+)")


def read(name):
    path = os.path.join(out, name)
    return open(path).read().splitlines() if os.path.exists(path) else []


copy = None
rows = []
for name in ("linear_m1.txt", "linear_mid.txt", "linear_big.txt"):
    section = ""
    for line in read(name):
        if m := COPY.search(line):
            copy = max(float(m.group(1)), float(m.group(2)))
        if line.startswith("==="):
            section = line
        if m := ROW.match(line):
            fmt, M, N, K, ms, gbs, _, tflops, disp, kernel = m.groups()
            # The M = 1 rows timed with wgpu's loop counters are a side note.
            if "SHADER_CHECKS=all" in section:
                continue
            rows.append(dict(fmt=fmt, shape=(int(M), int(N), int(K)), ms=float(ms), gbs=float(gbs),
                             tflops=float(tflops), kernel=kernel.strip()))
torch = {}
if os.path.exists(os.path.join(out, "torch.json")):
    txt = open(os.path.join(out, "torch.json")).read()
    torch = json.loads(txt[txt.index("{"):])
lin = torch.get("bf16_linear", {})

print(f"Limit: device copy {copy:.0f} GB/s (read + write, the faster of copy engine and shader copy, same run)"
      if copy else "Limit: no copy baseline in this run")
if torch:
    print(f"PyTorch {torch.get('torch')}: device copy {torch.get('d2d_copy_GBps', 0):.0f} GB/s, "
          f"pinned H2D {torch.get('h2d_pinned_GBps', 0):.1f} GB/s")
print()
print("| M×N×K | format | kernel | ms | weight GB/s | of copy | TFLOP/s | PyTorch bf16 ms | speed vs PyTorch |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|")
seen = set()
for r in rows:
    key = (r["shape"], r["fmt"], r["kernel"])
    if key in seen:
        continue
    seen.add(key)
    s = "x".join(map(str, r["shape"]))
    t = lin.get(s)
    of = f"{r['gbs'] / copy:.2f}" if copy and r["shape"][0] == 1 else ""
    tms = f"{t['ms']:.4f}" if t else ""
    ratio = f"{t['ms'] / r['ms']:.2f}×" if t else ""
    kern = (r["kernel"].replace(" activations (fast subgroup kernel)", "")
            .replace(" activations (portable kernel)", " portable"))
    print(f"| {s.replace('x', '×')} | {r['fmt']} | {kern} | {r['ms']:.4f} | {r['gbs']:.0f} | {of} | {r['tflops']:.2f} | {tms} | {ratio} |")


def best(fmt, shape):
    c = [r for r in rows if r["fmt"] == fmt and r["shape"] == shape]
    return min(c, key=lambda r: r["ms"]) if c else None


print()
k1 = [best(f, (1, 16384, 16384)) for f in ("w4a4", "w4a8")]
k2 = best("w8a8", (1, 16384, 16384))
k3 = best("w4a4", (4096, 12288, 3072))
t1 = lin.get("1x16384x16384", {}).get("ms")
t3 = lin.get("4096x12288x3072", {}).get("TFLOPs")
print("| target | measured | met |")
print("|---|---|---|")
for r in filter(None, k1):
    of = r["gbs"] / copy if copy else float("nan")
    sp = t1 / r["ms"] if t1 else float("nan")
    print(f"| K1 {r['fmt']} M=1 16384²: ≥ 0.85 of copy, ≥ 3× PyTorch | {of:.2f} of copy, {sp:.2f}× PyTorch | "
          f"{'yes' if of >= 0.85 and sp >= 3 else 'no'} |")
if k2:
    of = k2["gbs"] / copy if copy else float("nan")
    print(f"| K2 w8a8 M=1 16384²: ≥ 0.85 of copy | {of:.2f} of copy | {'yes' if of >= 0.85 else 'no'} |")
if k3:
    r = k3["tflops"] / t3 if t3 else float("nan")
    print(f"| K3 w4a4 4096×12288×3072: ≥ 0.5× PyTorch bf16 | {k3['tflops']:.1f} vs {t3 or float('nan'):.0f} TFLOP/s = {r:.3f}× "
          f"({k3['kernel']}) | {'yes' if r >= 0.5 else 'no'} |")
