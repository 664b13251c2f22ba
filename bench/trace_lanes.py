#!/usr/bin/env python3
"""Summarises the device lanes of a pass trace (`dynvram dit --trace F`).

    python3 bench/trace_lanes.py pass.json [more.json ...]

Per trace: the pass's device span (first kernel start to last kernel end),
the copy engine's busy time and its rate, the kernels' busy time, and the
copy engine's idle gaps longer than 1 ms with what the device was running
meanwhile (the lanes come from sampled timeline semaphores: see
runtime/src/device_lanes.rs).
"""
import json
import sys


def spans(events, tid):
    out = [(e["ts"], e["ts"] + e["dur"], e["name"], e["args"].get("bytes", 0))
           for e in events if e["tid"] == tid]
    return sorted(out)


def main(paths):
    for path in paths:
        ev = json.load(open(path))["traceEvents"]
        copies, kernels = spans(ev, "CopyEngine"), spans(ev, "Device")
        if not kernels:
            print(f"{path}: no device lanes (no copy queue, or an old binary)")
            continue
        t0, t1 = kernels[0][0], kernels[-1][1]
        busy_c = sum(b - a for a, b, _, _ in copies)
        busy_k = sum(b - a for a, b, _, _ in kernels)
        nbytes = sum(n for *_, n in copies)
        print(f"{path}: device span {(t1 - t0) / 1e3:.1f} ms; kernels busy "
              f"{busy_k / 1e3:.1f} ms; copies busy {busy_c / 1e3:.1f} ms for "
              f"{nbytes / 1e9:.2f} GB ({nbytes / max(busy_c, 1) / 1e3:.1f} GB/s while busy, "
              f"{nbytes / max(t1 - t0, 1) / 1e3:.1f} over the span)")
        # Copy-engine gaps inside the span.
        prev = t0
        gaps = []
        for a, b, name, _ in copies + [(t1, t1, "end", 0)]:
            if a - prev > 1000:
                running = [k[2] for k in kernels if k[1] > prev and k[0] < a]
                gaps.append((prev, a, name, running))
            prev = max(prev, b)
        idle = sum(b - a for a, b, _, _ in gaps)
        print(f"  copy engine idle {idle / 1e3:.1f} ms in {len(gaps)} gaps > 1 ms")
        for a, b, name, running in gaps[:12]:
            r = f"{running[0]} .. {running[-1]} ({len(running)})" if running else "nothing"
            print(f"    {(a - t0) / 1e3:7.1f} .. {(b - t0) / 1e3:7.1f} ms  before {name}; device ran {r}")
        # Kernel gaps: the device waiting (for copies or submits).
        prev, waits = t0, 0.0
        for a, b, _, _ in kernels:
            waits += max(0.0, a - prev)
            prev = max(prev, b)
        print(f"  kernels waited {waits / 1e3:.1f} ms between units")


if __name__ == "__main__":
    main(sys.argv[1:])
