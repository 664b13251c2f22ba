#!/usr/bin/env python3
"""The issue-19 item-5 table from one bench/flux.sh run (its $OUT/flux):
one row per configuration — dynvram bf16 and int4 resident and under
budgets, diffusers resident and offloaded — with s/step, GB streamed a step,
VRAM peak and, where the issue sets one, the target and whether it is met.

    python3 bench/flux_table.py OUT/flux        # Markdown on stdout

Standard library only. s/step: dynvram's best timed pass (resident: best of
2, budgets: 1 after a warm-up), diffusers' median of its timed steps.
TFLOP/s: the model's FLOPs a step (dynvram's count, `flops_per_pass`)
over each row's step time, so rows compare as rates of the same work.
"""
import json
import os
import re
import sys

PCIE = 54.7e9  # measured pinned host->device bytes/s on the H200 (BENCHMARKS.md)
ISSUE_2GIB = 0.52  # s: the issue's bound for bf16 under 2 GiB

out = sys.argv[1]


def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def budget_key(name):
    m = re.fullmatch(r"(bf16|int4)-(resident|budget-([0-9.]+))", name)
    return (m.group(1) == "int4", -float(m.group(3) or 1e9))


dyn = {}
for f in os.listdir(out):
    if re.fullmatch(r"(bf16|int4)-(resident|budget-[0-9.]+)\.json", f):
        r = load(f)
        if r and "best_seconds_per_pass" in r:
            dyn[f[:-5]] = r
diff_modes, diff_meta = {}, {}
for f in ("diffusers.json", "diffusers-extra.json"):
    r = load(f)
    if r:
        diff_modes.update(r.get("modes", {}))
        diff_meta.update({k: v for k, v in r.items() if k != "modes"})
parts = []
try:
    with open(os.path.join(out, "parts.tsv")) as f:
        parts = [line.rstrip("\n").split("\t") for line in f if line.strip()]
except OSError:
    pass
# Runs that were tried but left no report: shown as failed rows.
tried = {p[0]: p for p in parts}


def failure(name):
    """Why NAME left no report: "does not fit (needs X)" from its .err, or
    the exit status."""
    p = tried.get(name)
    if p and p[2] == "skipped":
        return "skipped (deadline)"
    try:
        with open(os.path.join(out, name + ".err")) as fh:
            err = fh.read()
    except OSError:
        err = ""
    m = re.search(r"budget too small:.* need ([0-9.]+ [KMG]?i?B);", err)
    if m:
        return f"does not fit: needs {m.group(1)}"
    if p and p[2] == "124":
        return f"timed out after {p[1]} s"
    return f"failed (exit {p[2] if p else '?'}; see {name}.err)"


def s_dyn(name):
    r = dyn.get(name)
    return r["best_seconds_per_pass"] if r else None


def s_diff(mode):
    r = diff_modes.get(mode)
    return r.get("median_seconds_per_step") if r and "error" not in r else None


def f(x, d=3):
    return "—" if x is None else f"{x:.{d}f}"


def met(value, bound):
    if value is None or bound is None:
        return "not measured"
    return "**met**" if value <= bound else "**not met**"


# The step's FLOPs (dynvram's count of the model's products, the same
# model for every row): each row's rate is that over its step time.
FLOPS = next((r["flops_per_pass"] for r in dyn.values() if r.get("flops_per_pass")), None)


def rate(seconds):
    return "—" if seconds is None or FLOPS is None else f"{FLOPS / seconds / 1e12:.1f}"


rows = []
LABEL = {
    "resident": "diffusers bf16 resident (sdpa)",
    "group_block": "diffusers `enable_group_offload` block_level, 1 block/group, use_stream",
    "group_block_rs": "diffusers `enable_group_offload` block_level, use_stream, record_stream",
    "group_leaf": "diffusers `enable_group_offload` leaf_level, use_stream",
    "sequential": "diffusers sequential CPU offload (accelerate `cpu_offload`)",
}

names = sorted(set(dyn) | {n for n in tried if re.fullmatch(r"(bf16|int4)-(resident|budget-[0-9.]+)", n)},
               key=budget_key)
# The 2-GiB target applies to bf16-budget-2; where that does not fit, also to
# the smallest bf16 budget under 4 GiB that ran (flux.sh's fallback).
two = "bf16-budget-2"
if two not in dyn:
    near = [n for n in dyn if n.startswith("bf16-budget-") and 2 < float(n[12:]) < 4]
    if near:
        two = min(near, key=lambda n: float(n[12:]))
for name in names:
    r = dyn.get(name)
    fmt, what = name.split("-", 1)
    label = f"dynvram {fmt} " + ("resident" if what == "resident" else f"`--vram-budget {what[7:]}`")
    target, verdict = "", ""
    s = s_dyn(name)
    streamed = r["streamed_bytes_per_pass"] if r else None
    if name == "bf16-resident":
        d = s_diff("resident")
        bound = 2 * d if d is not None else None
        target = f"≤ 2 × diffusers resident = {f(bound)} s"
        verdict = met(s, bound)
    elif name in ("bf16-budget-2", two):
        g = s_diff("group_block")
        bound = min(ISSUE_2GIB, g) if g is not None else ISSUE_2GIB
        target = f"≤ {ISSUE_2GIB} s and < diffusers group offload ({f(g)} s)"
        if name != "bf16-budget-2":
            target = "at 2 GiB (which does not fit): " + target
        verdict = met(s, bound)
        if g is None and s is not None:
            verdict += " (0.52 s only: no diffusers figure)"
    elif name == "bf16-budget-8":
        res = s_dyn("bf16-resident")
        bound = 1.1 * max(res, streamed / PCIE) if res is not None and streamed is not None else None
        target = f"≤ 1.1 × max(resident, streamed ÷ 54.7 GB/s) = {f(bound)} s"
        verdict = met(s, bound)
    elif name == "int4-budget-4":
        res = s_dyn("int4-resident")
        bound = 1.2 * res if res is not None else None
        target = f"≤ 1.2 × int4 resident = {f(bound)} s"
        verdict = met(s, bound)
    if r is None:
        why = failure(name)
        if target and "does not fit" in why:
            verdict = "**not met**"
        rows.append([label, why, "", "", "", target, verdict])
        continue
    rows.append([
        label,
        f(s),
        rate(s),
        f(streamed / 1e9, 2),
        f(r["budget"]["peak"] / 2**30, 2),
        target,
        verdict,
    ])

for mode in ["resident", "group_block", "group_block_rs", "group_leaf", "sequential"]:
    r = diff_modes.get(mode)
    if r is None:
        continue
    if "error" in r:
        rows.append([LABEL[mode], f"failed: {r['error']}", "", "", "", "", ""])
        continue
    rows.append([
        LABEL[mode],
        f(r["median_seconds_per_step"]),
        rate(r["median_seconds_per_step"]),
        f(r["streamed_bytes_per_step"] / 1e9, 2),
        f(r["peak_allocated_bytes"] / 2**30, 2) if r.get("peak_allocated_bytes") is not None else "—",
        "",
        "",
    ])
for mode, why in diff_meta.get("skipped", {}).items():
    rows.append([f"diffusers `{mode}`", "not applicable (notes)", "", "", "", "", ""])

print("| configuration | s/step | TFLOP/s | streamed GB/step | VRAM peak GiB | target (issue 19) | met |")
print("|---|---:|---:|---:|---:|---|---|")
for row in rows:
    print("| " + " | ".join(row) + " |")
print()

notes = []
any_dyn = next(iter(dyn.values()), None)
if any_dyn:
    notes.append(
        f"dynvram: {any_dyn['adapter']} [{any_dyn['backend']}], {any_dyn['compute_dtype']} activations, "
        f"{any_dyn['shape']['img_len']} image + {any_dyn['shape']['txt_len']} text tokens; "
        f"VRAM peak = the budget ledger's highest tracked figure (weights, ring, activations)."
    )
    for name in names:
        r = dyn.get(name)
        if r and "budget" in name:
            s, st = r["best_seconds_per_pass"], r["streamed_bytes_per_pass"]
            res = s_dyn(name.split("-")[0] + "-resident")
            notes.append(
                f"{name}: {st / PCIE:.3f} s of PCIe at 54.7 GB/s"
                + (f"; {s / max(res, st / PCIE):.2f} × max(resident, PCIe)" if res else "")
                + f"; usable {r['budget']['usable'] / 2**30:.2f} GiB."
            )
if diff_meta:
    notes.append(
        "diffusers {d} (torch {t}, CUDA {c}, {g}): FLUX.1-dev config, random bf16 weights, "
        "VRAM peak = torch.cuda.max_memory_allocated over the warm-up and timed steps; "
        "streamed = every weight once a step.".format(
            d=diff_meta.get("diffusers"), t=diff_meta.get("torch"), c=diff_meta.get("cuda"), g=diff_meta.get("gpu")
        )
    )
    sums = {m: r.get("out_checksum") for m, r in diff_modes.items() if "error" not in r}
    if sums:
        notes.append("diffusers output checksums (same weights and inputs in every mode): "
                     + ", ".join(f"{m} {v:.6g}" for m, v in sums.items()))
        bad = [m for m, r in diff_modes.items() if "error" not in r and not r.get("out_finite", True)]
        if bad:
            notes.append(f"diffusers output not finite in: {', '.join(bad)}")
for mode, why in diff_meta.get("skipped", {}).items():
    notes.append(f"diffusers `{mode}` not run: {why}.")
for m, r in diff_modes.items():
    if "error" in r:
        notes.append(f"diffusers {m}: {r['error']}: {r.get('stderr_tail', '').strip().splitlines()[-1:]}")
if parts:
    notes.append("parts (s, exit): " + ", ".join(f"{p[0]} {p[1]} ({p[2]})" for p in parts))
for n in notes:
    print(f"- {n}")
