#!/usr/bin/env python3
"""The table of bench/ceilings.sh: every ceiling and every kernel of the run
in TFLOP/s, with the card, from the step outputs in DIR.

    python3 bench/ceilings_table.py DIR [--layers N] > DIR/table.md

llama-bench's prompt rates become TFLOP/s of the model's linears (2 FLOPs
per weight per token, Llama-2-7B shapes at N layers plus the LM head;
attention left out, so the figure is a lower bound of the GEMM rate).
"""
import argparse
import json
import re
from pathlib import Path

# Llama-2-7B (make_gguf.py's default shapes): hidden 4096, FFN 11008, vocab 32000.
HIDDEN, FFN, VOCAB = 4096, 11008, 32000
TBO_LINE = re.compile(
    r"^\s*(?P<op>MUL_MAT|FLASH_ATTN_EXT)\((?P<params>[^)]*)\):.*?(?P<rate>[0-9.]+) (?P<unit>[GT])FLOPS"
)


def read_json(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def card(d):
    """The adapter wgpu opened (bench coop's report), else nvidia-smi's line."""
    env = (d / "env.txt").read_text() if (d / "env.txt").exists() else ""
    smi = next((l for l in env.splitlines() if "NVIDIA" in l or "H100" in l or "H200" in l), None)
    adapter = (read_json(d / "coop.json") or {}).get("adapter")
    return adapter or smi or "unknown card", env


def tbo_rows(d):
    rows = []
    for path in sorted(d.glob("tbo-*.txt")):
        mode = path.stem.rsplit("-", 1)[1]
        for line in path.read_text(errors="replace").splitlines():
            line = re.sub(r"\x1b\[[0-9;]*m", "", line)
            m = TBO_LINE.match(line)
            if not m:
                continue
            rate = float(m["rate"]) / (1000 if m["unit"] == "G" else 1)
            params = re.sub(r",(bs|nr|per|permute|nr23)=\[[^\]]*\]", "", m["params"])
            params = re.sub(r",(v|o|k_v|m_v|src_overlap|pad)=\d+", "", params)
            rows.append((f"llama.cpp `test-backend-ops` {m['op']} ({mode})", params, rate))
    return rows


def llama_bench_rows(d, layers):
    per_token = 2 * (layers * (4 * HIDDEN * HIDDEN + 3 * HIDDEN * FFN) + HIDDEN * VOCAB)
    rows = []
    for path in sorted(d.glob("llama-bench-*.json")):
        _, _, mode, kind = path.stem.split("-", 3)
        for r in read_json(path) or []:
            if not r.get("n_prompt"):
                continue
            ts = r.get("avg_ts", 0.0)
            fa = int(bool(r.get("flash_attn")))
            what = f"pp{r['n_prompt']} {kind.upper()} -fa {fa}, {layers} layers: {ts:,.0f} tok/s"
            rows.append((f"llama.cpp `llama-bench` ({mode})", what, per_token * ts / 1e12))
    return rows


def coop_rows(d):
    r = read_json(d / "coop.json") or {}
    edge = r.get("matrix_edge")
    return [
        ("dynvram `bench coop`", f"{f['operands']} ({edge}x{edge}x{edge}, f16, f32 sums)", f["tflops"])
        for f in r.get("figures", [])
    ]


def linear_rows(d):
    rows = []
    for kernel in ("single", "double"):
        for f in read_json(d / f"linear-{kernel}.json") or []:
            if not f.get("coop"):
                continue
            what = f"{f['m']}x{f['n']}x{f['k']} {f['format']}: {f['kernel']}"
            rows.append((f"dynvram `bench linear` ({kernel})", what, f["tflops"]))
    return rows


def attention_rows(d):
    r = read_json(d / "attention.json") or {}
    return [
        (
            "dynvram `bench attention`",
            f"{f['heads']} heads x {f['queries']} x {f['head_dim']}, {f['tuning']}"
            + (" (default)" if f.get("default") else f", max diff from the default {f['max_diff']:.1e}"),
            f["tflops"],
        )
        for f in r.get("figures", [])
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("--layers", type=int, default=8)
    a = ap.parse_args()
    gpu, env = card(a.dir)
    print(f"# Ceilings: {gpu}\n")
    print("```\n" + env.strip() + "\n```\n")
    print("| source | case | TFLOP/s |")
    print("|---|---|---:|")
    rows = (
        coop_rows(a.dir)
        + linear_rows(a.dir)
        + attention_rows(a.dir)
        + tbo_rows(a.dir)
        + llama_bench_rows(a.dir, a.layers)
    )
    for source, what, tflops in rows:
        rate = f"{tflops:.1f}" if tflops >= 1 else f"{tflops:.3f}"
        print(f"| {source} | {what} | {rate} |")
    if not rows:
        print("| (no figures: see the step outputs) | | |")


if __name__ == "__main__":
    main()
