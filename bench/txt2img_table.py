#!/usr/bin/env python3
"""Issue 33 item 7's table from bench/txt2img.sh's outputs: per setting the
whole image, its stages (encode = CLIP + T5, sample, decode), the median
step, the fixed costs (files and tokenizers, the device, and the pipelines
the stages created — reported from 5c522ea on; the stage times include
them), peak VRAM and bytes streamed; diffusers' modes and
stable-diffusion.cpp (bench/sdcpp.sh's sdcpp.json) beside; the targets
(budget 8: whole ≤ 1.15 × the sum of the resident stages, both without
their pipeline compiles; budget 1: peak ≤ budget); under it the machine's
upload rates (`bench upload`, upload.json) where they were measured.

    python3 bench/txt2img_table.py bench-out/txt2img
"""
import json
import os
import sys

GIB = 1 << 30


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def pipelines(r):
    """Seconds the run's stages spent creating pipelines (0 where not reported)."""
    return r.get("pipelines", {}).get("seconds", 0.0)


def median_step(r):
    steps = sorted(next((st.get("pass_seconds", []) for st in r["stages"] if st["stage"] == "sample"), []))
    return f"{steps[len(steps) // 2]:.3f}" if steps else "—"


def stages(r):
    s = {st["stage"]: st for st in r["stages"]}
    enc = sum(s[k]["seconds"] for k in ("clip", "t5") if k in s)
    return enc, s.get("sample", {}).get("seconds", 0.0), s.get("decode", {}).get("seconds", 0.0), \
        sum(st["streamed_bytes"] for st in r["stages"])


def main():
    d = sys.argv[1]
    gpu = open(os.path.join(d, "gpu.txt")).read().strip() if os.path.exists(os.path.join(d, "gpu.txt")) else "?"
    print(f"GPU: {gpu}\n")
    print("| run | whole (s) | encode | sample | decode | step | fixed costs (of which pipelines) | peak VRAM (GiB) | streamed (GiB) | target |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for label in ("bf16", "int4"):
        resident = load(os.path.join(d, f"{label}-resident.json"))
        for s in ("resident", "8", "2", "1"):
            r = load(os.path.join(d, f"{label}-{s}.json"))
            if r is None:
                continue
            enc, sample, dec, streamed = stages(r)
            target = ""
            if s == "8" and resident:
                re, rs, rd, _ = stages(resident)
                bar = 1.15 * (re + rs + rd - pipelines(resident))
                whole = r["stages_seconds"] - pipelines(r)
                target = f"{whole:.2f} ≤ {bar:.2f} s: {'met' if whole <= bar else 'not met'}"
            elif s == "1":
                target = f"peak ≤ 1 GiB: {'met' if r['peak_vram'] <= GIB else 'not met'}"
            fixed = r["open_seconds"] + r["runtime_seconds"] + pipelines(r)
            print(f"| dynvram {label} {s if s == 'resident' else '--vram-budget ' + s} | {r['stages_seconds']:.2f} | "
                  f"{enc:.2f} | {sample:.2f} | {dec:.2f} | {median_step(r)} | {fixed:.2f} ({pipelines(r):.2f}) | "
                  f"{r['peak_vram'] / GIB:.2f} | {streamed / GIB:.1f} | {target} |")
    # The registered pins at each streamed run's sampling end and how much of them
    # the kernel backed with huge pages (the stream rate may depend on it).
    hp = []
    for label in ("bf16", "int4"):
        for s in ("8", "2", "1"):
            r = load(os.path.join(d, f"{label}-{s}.json")) or {}
            p = next((st.get("pins") or {} for st in r.get("stages", []) if st["stage"] == "sample"), {})
            if p.get("registered_bytes") and p.get("huge_page_bytes") is not None:
                hp.append(f"{label} {s} GiB {p['huge_page_bytes'] / GIB:.1f} of {p['registered_bytes'] / GIB:.1f}")
    dj = load(os.path.join(d, "diffusers.json"))
    for mode, m in (dj or {}).get("modes", {}).items():
        if "error" in m:
            print(f"| diffusers {mode} | {m['error']} | | | | | | | | |")
            continue
        st = m["stage_seconds"]
        print(f"| diffusers {mode} | {m['whole_seconds']:.2f} | {st['encode']:.2f} | {st['sample']:.2f} | "
              f"{st['decode']:.2f} | {m.get('seconds_per_step', 0):.3f} | {m['build_seconds'] + m['setup_seconds']:.2f} | "
              f"{m['peak_allocated_bytes'] / GIB:.2f} | | |")

    sd = load(os.path.join(d, "sdcpp.json"))
    if sd:
        st = sd.get("stages", {})
        cell = lambda v: f"{v:.2f}" if isinstance(v, (int, float)) else "—"
        peak = sd.get("vram_peak_mib")
        status = "" if sd.get("exit_status") == 0 else f"exit {sd.get('exit_status')}"
        print(f"| stable-diffusion.cpp Vulkan | {cell(st.get('generate_image_s'))} | {cell(st.get('text_encode_s'))} | "
              f"{cell(st.get('sampling_s'))} | {cell(st.get('vae_decode_s'))} | "
              f"{cell(st.get('step_mean_excl_first_s'))} | {cell(st.get('before_generate_s'))} | "
              f"{cell(peak / 1024 if isinstance(peak, (int, float)) else None)} | | {status} |")
    if hp:
        print(f"\nRegistered pins on huge pages (GiB): {'; '.join(hp)}")
    up = load(os.path.join(d, "upload.json"))
    if up:
        # The paths a pass streams by: registered pins, and the ring from
        # the page cache.
        keep = lambda n: "registered pin" in n or ("ring" in n and "(warm)" in n)
        rates = "; ".join(f"{f['name']} {f['gb_per_s']:.1f} GB/s" for f in up.get("figures", []) if keep(f["name"]))
        print(f"\nThis machine's uploads (`dynvram bench upload`, 4 GiB): {rates}")


if __name__ == "__main__":
    main()
