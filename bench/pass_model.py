#!/usr/bin/env python3
"""A model of one streamed pass with two arenas, to compare residency orders.

    python3 bench/pass_model.py [RATE_GB_S ...]   # default: 49.5 33.4

Units run in order on the GPU; a streamed unit's copy (bytes / rate) runs on
the copy engine in streaming order, after the copy before it and after the
unit that last used its arena (two units back in streaming order) has run;
a unit runs after the one before it and after its copy. Its inputs are
FLUX.1-dev's at 1024² on the H100 from a traced 8 GiB pass (`dit --trace`,
bench/trace_lanes.py; BENCHMARKS.md, session 28): per double block 680 MB
and 7.8 ms of kernels, per single block 283 MB and 7.42 ms, nine double
blocks resident at 8 GiB. It reproduced the traced steps of the prefix
order (478.6 ms against 479.4 measured at 49.5 GB/s, 571.2 against 571.2
at 33.4).
"""
import sys


def step_ms(units, arenas=2):
    """units: (streamed, copy_ms, kernels_ms) in pass order."""
    streamed = [i for i, u in enumerate(units) if u[0]]
    copy_end, run_end = {}, {}
    copy_free, t, n = 0.0, 0.0, 0
    for i, (is_streamed, _, kernels) in enumerate(units):
        # Issue every copy whose arena is free by now.
        while n < len(streamed):
            j = streamed[n]
            start = copy_free
            if n >= arenas:
                previous = streamed[n - arenas]
                if previous not in run_end:
                    break
                start = max(start, run_end[previous])
            copy_end[j] = start + units[j][1]
            copy_free = copy_end[j]
            n += 1
        start = max(t, copy_end[i]) if is_streamed else t
        t = start + kernels
        run_end[i] = t
    return t


def flux_dev(rate, resident_doubles):
    units = [(False, 0.0, 0.65)]  # the input embedders
    units += [(k not in resident_doubles, 680 / rate, 7.8) for k in range(19)]
    units += [(True, 283 / rate, 7.42) for _ in range(38)]
    units.append((True, 38 / rate, 0.27))  # the final layer
    return units


def bit_reverse(i, bits):
    return int(format(i, f"0{bits}b")[::-1], 2) if bits else 0


def main(rates):
    orders = {
        "prefix (load order)": set(range(9)),
        "runs bit-reversed (the default)": set(sorted(range(19), key=lambda k: bit_reverse(k, 5))[:9]),
        "every other double block": set(range(0, 18, 2)),
    }
    for rate in rates:
        units = flux_dev(rate, set())
        kernels = sum(u[2] for u in units)
        print(f"{rate} GB/s: kernels {kernels:.1f} ms")
        for name, resident in orders.items():
            units = flux_dev(rate, resident)
            copies = sum(u[1] for u in units if u[0])
            print(f"  {name:34s} {step_ms(units):6.1f} ms (copies {copies:.1f} ms)")


if __name__ == "__main__":
    main([float(r) for r in sys.argv[1:]] or [49.5, 33.4])
