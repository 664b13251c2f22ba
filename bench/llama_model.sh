# Sourced by bench/llama.sh and bench/decode.sh: `dynvram synth` a
# llama-shaped bf16 checkpoint into $dir (kept when its config.json is
# there: synth writes it last) and, unless INT4=0, its convrot_w4a4 copy
# into $q (one quantize process per shard, resumable). Needs d, like,
# layers, dir, q, jobs; sets t_synth (seconds since the epoch after synth).
echo "=== synth $like into $dir ==="
if [ -f "$dir/config.json" ]; then
    echo "present, kept"
else
    $d synth "$dir" --like "$like" ${layers:+--layers "$layers"} --shard-gib "${SHARD_GIB:-0.5}" --tokenizer ||
        { echo "synth failed"; exit 1; }
fi
t_synth=$(date +%s)

if [ "${INT4:-1}" = 1 ]; then
    echo "=== quantize convrot_w4a4 into $q ($jobs processes) ==="
    if [ -f "$q/config.json" ]; then
        echo "present, kept"
    else
        mkdir -p "$q"
        # One process per shard; a shard already quantized is kept.
        printf '%s\n' "$dir"/model*.safetensors | xargs -P "$jobs" -I{} bash -c '
            o="$1/$(basename "$2")"
            [ -f "$o" ] || "$3" quantize "$2" "$o" --format convrot_w4a4 --only "_proj\$" \
                > "$1/.$(basename "$2").log" 2>&1 || { cat "$1/.$(basename "$2").log"; exit 255; }
        ' _ "$q" {} "$d" || { echo "quantize failed"; exit 1; }
        if [ -f "$dir/model.safetensors.index.json" ]; then
            python3 - "$q" << 'EOF' || { echo "index failed"; exit 1; }
import json, os, struct, sys
q = sys.argv[1]
wm, total = {}, 0
for f in sorted(os.listdir(q)):
    if f.startswith("model-") and f.endswith(".safetensors"):
        with open(os.path.join(q, f), "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, t in header.items():
            if name != "__metadata__":
                wm[name] = f
                total += t["data_offsets"][1] - t["data_offsets"][0]
with open(os.path.join(q, "model.safetensors.index.json"), "w") as fh:
    json.dump({"metadata": {"total_size": total}, "weight_map": wm}, fh, indent=1)
EOF
        fi
        cp "$dir/tokenizer.json" "$q/" 2> /dev/null
        cp "$dir/config.json" "$q/config.json"
    fi
fi
