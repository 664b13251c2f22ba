#!/usr/bin/env python3
"""The issue-15 table from one bench/decode.sh run: dynvram's resident
prefill/decode tok/s beside llama.cpp Vulkan's (llama-bench, same shapes,
same GPU), the ratio and the HBM bound, then each run's decode profile."""
import json
import os
import sys

out, P, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
HBM = 4.26e12  # measured device copy rate (PyTorch, BENCHMARKS.md), bytes/s


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


peer = load(os.path.join(out, "peer", "llama-bench.json")) or []


def peer_ts(tag, pp):
    """Best of -fa 0/1 for tag's pp (n_gen 0) or tg (n_prompt 0) row."""
    best = None
    for r in peer:
        if r.get("peer_tag") != tag or "avg_ts" not in r:
            continue
        if (pp and r.get("n_prompt") == P and r.get("n_gen") == 0) or (
            not pp and r.get("n_gen") == N and r.get("n_prompt") == 0
        ):
            best = max(best or 0, r["avg_ts"])
    return best


def f(x, d=1):
    return "—" if x is None else f"{x:,.{d}f}"


rows = [
    f"| dynvram weights | compute | dynvram pp{P} tok/s | dynvram tg{N} tok/s | llama.cpp | pp{P} tok/s | tg{N} tok/s | pp ratio | tg ratio | weights | HBM-bound tg tok/s | tg of bound |",
    "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
]
# Optional variants (SYNC=1, SPLIT_AB=1, RESIDENT_AB=1, STACK_AB=1,
# INT4_SPREAD=1, AGAIN=1) after the defaults.
variants = [
    ("bf16-f16", "f16"),
    ("bf16-f32", "f16"),
    ("int4-f16", "q4_0"),
    ("bf16-f16-sync", "f16"),
    ("bf16-f16-nosplit", "f16"),
    ("bf16-f16-everypass", "f16"),
    ("bf16-f16-int", "f16"),
    ("bf16-f16-nostack", "f16"),
    ("bf16-f16-stack-always", "f16"),
    ("bf16-f16-stack-grouped", "f16"),
    ("bf16-f16-again", "f16"),
    ("int4-f16-sync", "q4_0"),
    ("int4-f16-spread", "q4_0"),
    ("int4-f16-codes", "q4_0"),
    ("int4-f16-again", "q4_0"),
]
for name, tag in variants:
    r = load(os.path.join(out, f"dyn-{name}.json"))
    if r is None:
        continue
    w, c = name.split("-", 1)
    pp, tg = r["prefill_tokens_per_second"], r["decode_tokens_per_second"]
    ppp, ptg = peer_ts(tag, True), peer_ts(tag, False)
    wb = r["model"]["model_bytes"]
    bound = HBM / wb
    rows.append(
        "| "
        + " | ".join(
            [
                w,
                c,
                f(pp),
                f(tg),
                tag.upper(),
                f(ppp),
                f(ptg),
                f(pp / ppp, 2) if ppp else "—",
                f(tg / ptg, 2) if ptg else "—",
                f"{wb / 2**30:.2f} GiB",
                f(bound),
                f(tg / bound, 2),
            ]
        )
        + " |"
    )
print("\n".join(rows))
for name in [
    "bf16-f16",
    "bf16-f32",
    "int4-f16",
    "bf16-f16-nosplit",
    "bf16-f16-everypass",
    "bf16-f16-nostack",
    "bf16-f16-stack-always",
]:
    r = load(os.path.join(out, f"dyn-{name}.json"))
    if not r or not r.get("profile"):
        continue
    for phase in ["decode", "prefill"]:
        p = r["profile"][phase]
        print(
            f"\n### {name} {phase}: {p['launches']} launches, wall {p['wall_us']/1e3:.2f} ms "
            f"(record {p['cpu_record_us']/1e3:.2f}, submit {p['cpu_submit_us']/1e3:.2f}, wait {p['cpu_wait_us']/1e3:.2f}); "
            f"GPU busy {p['gpu_busy_us']/1e3:.2f} ms of span {p['gpu_span_us']/1e3:.2f} ms; limit {f(p['limit_gb_per_s'], 0)} GB/s\n"
        )
        print("| kernel | n | GPU µs | % | MB | GB/s | of limit | TFLOP/s |\n|---|---:|---:|---:|---:|---:|---:|---:|")
        for row in p["rows"][:14]:
            print(
                f"| {row['label']} | {row['launches']} | {row['gpu_us']:.0f} | {100*row['gpu_us']/max(p['gpu_busy_us'],1e-9):.1f} | "
                f"{row['bytes']/1e6:.1f} | {f(row['gb_per_s'], 0)} | {f(row['of_limit'], 2)} | {f(row['tflops'], 2)} |"
            )
