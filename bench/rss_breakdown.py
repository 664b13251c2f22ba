"""Peak RSS of a command, and what it is made of.

Usage: python3 bench/rss_breakdown.py CMD [ARGS...]
Samples /proc/PID/smaps every 20 ms while CMD runs (stdout discarded), keeps
the sample with the largest total Rss and prints it by mapping: the file
path, or [heap] / [stack] / [anon] for anonymous memory (memfd and device
mappings keep their names), largest first. Also prints ru_maxrss.
"""
import collections, resource, subprocess, sys, time


def sample(pid):
    """Rss by mapping name, and by single mapping (name, size)."""
    by, single = collections.Counter(), collections.Counter()
    name, size, start = "[anon]", 0, ""
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split()
                if not head:
                    continue
                if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                    name = " ".join(head[5:]) if len(head) > 5 else "[anon]"
                    lo, hi = (int(v, 16) for v in head[0].split("-"))
                    size, start = hi - lo, head[0].split("-")[0]
                elif head[0] == "Rss:":
                    by[name] += int(head[1]) * 1024
                    single[(name, size, start)] += int(head[1]) * 1024
    except OSError:
        return None
    return by, single


proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
peak, peak_single, peak_total = collections.Counter(), collections.Counter(), 0
while proc.poll() is None:
    s = sample(proc.pid)
    if s is not None and sum(s[0].values()) > peak_total:
        (peak, peak_single), peak_total = s, sum(s[0].values())
    time.sleep(0.02)
maxrss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(f"peak sampled RSS {peak_total / 2**20:.1f} MiB (ru_maxrss {maxrss / 2**20:.1f} MiB), exit {proc.returncode}")
for name, b in peak.most_common(12):
    print(f"  {b / 2**20:9.1f} MiB  {name}")
print("largest single mappings at the peak (Rss of size):")
for (name, size, _), b in peak_single.most_common(10):
    print(f"  {b / 2**20:9.1f} MiB of {size / 2**20:9.1f} MiB  {name}")
