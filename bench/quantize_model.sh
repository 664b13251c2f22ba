#!/usr/bin/env bash
# `dynvram quantize MODEL_DIR OUT_DIR` on a 7B-shaped checkpoint (issue 17,
# item 3): wall time and peak RSS per format, on all cores. Writes
# $OUT/quantize_model.txt (and .json). Needs the release binary ($D, default
# .dev/dynvram) and ~20 GiB of disk under $WORK (default /tmp/dynvram-q).
#   OUT=/some/dir bash bench/quantize_model.sh
# LIKE (llama-7b), SHARD_GIB (4: transformers' usual shard size is 2-10 GB),
# FORMATS ("convrot_w4a4 int8_tensorwise float8_e4m3fn") change the run.
set -uo pipefail
d=${D:-.dev/dynvram}
out=${OUT:-bench-out}; mkdir -p "$out"
work=${WORK:-/tmp/dynvram-q}; mkdir -p "$work"
like=${LIKE:-llama-7b}
src="$work/$like"
report="$out/quantize_model.txt"
: > "$report"
echo "cores: $(nproc); $(uname -srm)" | tee -a "$report"
if [ ! -f "$src/config.json" ]; then
    "$d" synth "$src" --like "$like" --shard-gib "${SHARD_GIB:-4}" --tokenizer || { echo "synth failed"; exit 1; }
fi
du -sh "$src" | tee -a "$report"
for fmt in ${FORMATS:-convrot_w4a4 int8_tensorwise float8_e4m3fn}; do
    dst="$work/$like-$fmt"
    rm -rf "$dst"
    # Drop the page cache where allowed, so the first format is not favoured.
    sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
    python3 - "$d" "$src" "$dst" "$fmt" <<'PY' | tee -a "$report"
import json, resource, subprocess, sys, time
d, src, dst, fmt = sys.argv[1:]
t = time.time()
r = subprocess.run([d, "--json", "quantize", src, dst, "--format", fmt], capture_output=True, text=True)
wall = time.time() - t
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
if r.returncode != 0:
    print(f"{fmt}: failed ({r.returncode}): {r.stderr[-2000:]}")
    sys.exit(1)
rep = json.loads(r.stdout)
row = {
    "format": fmt, "wall_s": round(wall, 2), "peak_rss_gib": round(ru.ru_maxrss / 2**20, 3),
    "user_s": round(ru.ru_utime, 1), "sys_s": round(ru.ru_stime, 1),
    "bytes_in_gib": round(rep["bytes_in"] / 2**30, 2), "bytes_out_gib": round(rep["bytes_out"] / 2**30, 2),
    "quantized": rep["quantized"], "shards": len(rep["shards"]),
}
print(f"{fmt}: {row['wall_s']} s wall ({row['user_s']} s user on all cores), peak RSS {row['peak_rss_gib']} GiB, "
      f"{row['bytes_in_gib']} GiB -> {row['bytes_out_gib']} GiB, {row['quantized']} layers, {row['shards']} shards")
print("JSON " + json.dumps(row))
PY
    rm -rf "$dst"
done
grep '^JSON ' "$report" | sed 's/^JSON //' > "$out/quantize_model.json"
