#!/usr/bin/env bash
# sdcpp.sh - peer benchmark: stable-diffusion.cpp (Vulkan backend) FLUX.1-dev text-to-image.
#
# Run from a checkout root on the GPU machine (no network, no compiler needed).
# It unpacks the prebuilt sd-cli from $TAR into /tmp/sdcpp, shows which device
# ggml's Vulkan backend picked, runs one FLUX.1-dev generation and writes
#   $OUT/sdcpp.log   everything sd-cli printed (-v: DEBUG lines, per-step progress)
#   $OUT/sdcpp.json  wall time, stage times parsed from the log, peak VRAM, exit status
#   $OUT/sdcpp.png   the image
#   $OUT/sdcpp.vram.csv, $OUT/sdcpp.time (raw nvidia-smi samples, /usr/bin/time -v output)
#
# Settings (environment):
#   TAR      tarball with sd-cli            (default .pack/sd-vulkan-bin.tar.xz)
#   M        ComfyUI models folder          (default /tmp/comfy) holding
#              diffusion_models/flux1-dev.safetensors, text_encoders/clip_l.safetensors,
#              text_encoders/t5xxl_fp16.safetensors, vae/ae.safetensors
#   OUT      output folder                  (default bench-out)
#   STEPS    sampling steps                 (default 28)
#   SIZE     width = height in pixels       (default 1024)
#   TIMEOUT  seconds before sd-cli is killed (default 300)
#   OFFLOAD  0 (default): all weights in VRAM (sd.cpp's default placement)
#            1: --offload-to-cpu  (every module's params kept in host RAM and staged
#               to the GPU on first use; they then stay resident)
#            2: --offload-to-cpu --max-vram $MAX_VRAM --stream-layers  (graph-cut
#               segmenting to a VRAM budget + per-block streaming of the diffusion
#               model's weights from host RAM with prefetch; sd.cpp's recommended
#               "model bigger than VRAM" shape)
#   MAX_VRAM GiB budget for OFFLOAD=2       (default 8; negative = free VRAM minus that many GiB)
#   OFFLOAD_ARGS  if set, replaces the OFFLOAD flags above verbatim
#   EXTRA_ARGS    appended verbatim to sd-cli's command line (e.g. "--diffusion-fa")
#   GPU_INDEX     nvidia-smi index to sample (default 0)
#   PARSE_ONLY=path/to/log  only parse an existing log into $OUT/sdcpp.json (testing)
#   SD_WRAP       command words put before sd-cli (testing only, e.g. a loader wrapper)
#
# sd.cpp's options (this build, sd.cpp 97d2990) that keep weights in host memory
# and move them to the GPU as needed:
#   --offload-to-cpu           params in RAM, staged to the runtime backend when needed
#                              (shortcut for --params-backend '*=cpu')
#   --params-backend SPEC      per-module params placement: cpu, disk, e.g.
#                              diffusion=cpu,te=cpu,vae=cpu; 'disk' re-reads from the file
#   --max-vram GiB             graph-cut segmented execution under a VRAM budget
#   --stream-layers            with --offload-to-cpu + --max-vram: stream diffusion
#                              transformer blocks one at a time (prefetched)
#   --eager-load               load all params at model-load time instead of lazily
#   --backend te=cpu / vae=cpu (deprecated aliases --clip-on-cpu / --vae-on-cpu):
#                              *compute* those modules on the CPU (not streaming)
#   --vae-tiling               tile the VAE decode to bound its activation memory
#   --diffusion-fa             flash attention in the diffusion model (smaller compute buffer)
#
# Timing lines the CLI prints (src/stable-diffusion.cpp, src/model_loader.cpp,
# src/core/util.cpp; log prefix "[INFO ] file.cpp:LINE - "):
#   loading tensors completed, taking %.2fs (read: %.2fs, memcpy: %.2fs, convert: %.2fs, copy_to_backend: %.2fs)
#   get_learned_condition completed, taking %.2fs        (text encoders, incl. lazy weight loads)
#   sampling completed, taking %.2fs                       (the denoising loop)
#   generating %zu latent images completed, taking %.2fs
#   latent %zu decoded, taking %.2fs
#   decode_first_stage completed, taking %.2fs             (VAE decode)
#   generate_image completed in %.2fs                      (whole generate call)
#   per step: "\r  |=====>    | 3/28 - 1.23s/it" (or "x.xxit/s" when a step is < 1 s)
set -u

TAR=${TAR:-.pack/sd-vulkan-bin.tar.xz}
M=${M:-/tmp/comfy}
OUT=${OUT:-bench-out}
STEPS=${STEPS:-28}
SIZE=${SIZE:-1024}
TIMEOUT=${TIMEOUT:-300}
OFFLOAD=${OFFLOAD:-0}
MAX_VRAM=${MAX_VRAM:-8}
GPU_INDEX=${GPU_INDEX:-0}
EXTRA_ARGS=${EXTRA_ARGS:-}
PARSE_ONLY=${PARSE_ONLY:-}
DIR=/tmp/sdcpp
SD=$DIR/sd-cli
SD_WRAP=${SD_WRAP:-}
# shellcheck disable=SC2206
wrap=($SD_WRAP)

mkdir -p "$OUT"
LOG=$OUT/sdcpp.log
JSON=$OUT/sdcpp.json
VRAM=$OUT/sdcpp.vram.csv
TIMEF=$OUT/sdcpp.time

case "$OFFLOAD" in
  0) offload_flags="" ; mode=default ;;
  1) offload_flags="--offload-to-cpu" ; mode=offload ;;
  2) offload_flags="--offload-to-cpu --max-vram $MAX_VRAM --stream-layers" ; mode=offload-stream ;;
  *) echo "OFFLOAD must be 0, 1 or 2" >&2; exit 2 ;;
esac
if [ -n "${OFFLOAD_ARGS+x}" ]; then offload_flags=$OFFLOAD_ARGS; mode=custom; fi

json_str() { # JSON-escape $1
  local s=$1
  s=${s//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\t'/\\t}; s=${s//$'\r'/}; s=${s//$'\n'/\\n}
  printf '"%s"' "$s"
}
num_or_null() { if [ -n "${1:-}" ]; then printf '%s' "$1"; else printf 'null'; fi; }

# ---- parse a log (sd-cli stdout+stderr) into shell variables P_* -------------
parse_log() {
  local log=$1
  # \r-separated progress updates become lines; ANSI escapes dropped
  eval "$(tr '\r' '\n' <"$log" | sed 's/\x1b\[[0-9;]*[A-Za-z]//g' | awk -v steps="$STEPS" '
    function num(s) { sub(/s.*$/, "", s); return s + 0 }
    /loading tensors completed, taking / {
      s = $0; sub(/.*loading tensors completed, taking /, "", s); t = num(s); load_sum += t; nload++
      loads = loads (loads == "" ? "" : ",") t
      c = $0; sub(/.*copy_to_backend: /, "", c); cb_sum += num(c)
      r = $0; sub(/.*read: /, "", r); rd_sum += num(r)
    }
    /get_learned_condition completed, taking / { s = $0; sub(/.*taking /, "", s); te += num(s); nte++ }
    /sampling completed, taking / {
      s = $0; sub(/.*sampling completed, taking /, "", s); samp += num(s); nsamp++ }
    /decode_first_stage completed, taking / { s = $0; sub(/.*taking /, "", s); dec += num(s); ndec++ }
    /generate_image completed in / { s = $0; sub(/.*completed in /, "", s); gen = num(s); ngen++ }
    /ggml_vulkan: [0-9]+ = / && dev == "" { d = $0; sub(/.*ggml_vulkan: [0-9]+ = /, "", d); dev = d }
    /flux compute buffer size: / && fbuf == "" { b = $0; sub(/.*compute buffer size: /, "", b); fbuf = b }
    # sampling progress: "  |====>   | 3/28 - 1.23s/it" (tensor loading uses # bars and MB/s)
    /\| *[0-9]+\/[0-9]+ - [0-9.]+(s\/it|it\/s)/ && $0 !~ /#/ {
      line = $0; sub(/^.*\| */, "", line)           # "3/28 - 1.23s/it"
      split(line, a, " "); split(a[1], ss, "/")
      if (ss[2] + 0 != steps + 0) next
      v = a[3]; unit = "s/it"; if (v ~ /it\/s/) unit = "it/s"
      sub(/(s\/it|it\/s).*$/, "", v); v = v + 0
      sec = (unit == "it/s" && v > 0) ? 1.0 / v : v
      stepv[ss[1] + 0] = sec; if (ss[1] + 0 > maxstep) maxstep = ss[1] + 0
    }
    END {
      printf "P_LOAD_SUM=%s\nP_LOAD_N=%d\nP_LOADS=\"%s\"\nP_LOAD_COPY=%s\nP_LOAD_READ=%s\n", (nload ? load_sum : ""), nload, loads, (nload ? cb_sum : ""), (nload ? rd_sum : "")
      printf "P_TE=%s\nP_SAMP=%s\nP_DEC=%s\nP_GEN=%s\n", (nte ? te : ""), (nsamp ? samp : ""), (ndec ? dec : ""), (ngen ? gen : "")
      st = ""; n = 0; tot = 0
      for (i = 1; i <= maxstep; i++) { if (i in stepv) { st = st (st == "" ? "" : ",") sprintf("%.4f", stepv[i]); n++; tot += stepv[i] } }
      printf "P_STEPS=\"%s\"\nP_NSTEPS=%d\n", st, n
      if (n > 1) { tot2 = tot - stepv[1]; printf "P_STEP_MEAN_EXCL1=%.4f\n", tot2 / (n - 1) } else printf "P_STEP_MEAN_EXCL1=\n"
      gsub(/["\\$`]/, "", dev); gsub(/["\\$`]/, "", fbuf)
      printf "P_DEVICE=\"%s\"\nP_FLUX_BUF=\"%s\"\n", dev, fbuf
    }')"
}

write_json() {
  local exit_status=$1 timed_out=$2 wall=$3 idle=$4 peak=$5 rss=$6 devlist=$7 cmd=$8
  local delta="" pre=""
  if [ -n "$peak" ] && [ -n "$idle" ]; then delta=$((peak - idle)); fi
  if [ -n "$wall" ] && [ -n "$P_GEN" ]; then pre=$(awk -v w="$wall" -v g="$P_GEN" 'BEGIN{printf "%.3f", w-g}'); fi
  {
    printf '{\n'
    printf '  "tool": "stable-diffusion.cpp (Vulkan)",\n'
    printf '  "mode": %s,\n' "$(json_str "$mode")"
    printf '  "steps": %s, "size": %s, "timeout_s": %s,\n' "$STEPS" "$SIZE" "$TIMEOUT"
    printf '  "command": %s,\n' "$(json_str "$cmd")"
    printf '  "exit_status": %s,\n' "$(num_or_null "$exit_status")"
    printf '  "timed_out": %s,\n' "$timed_out"
    printf '  "wall_s": %s,\n' "$(num_or_null "$wall")"
    printf '  "max_rss_kb": %s,\n' "$(num_or_null "$rss")"
    printf '  "vram_idle_mib": %s,\n' "$(num_or_null "$idle")"
    printf '  "vram_peak_used_mib": %s,\n' "$(num_or_null "$peak")"
    printf '  "vram_peak_mib": %s,\n' "$(num_or_null "$delta")"
    printf '  "device": %s,\n' "$(json_str "$P_DEVICE")"
    printf '  "list_devices": %s,\n' "$(json_str "$devlist")"
    printf '  "stages": {\n'
    printf '    "model_load_tensors_s": %s,\n' "$(num_or_null "$P_LOAD_SUM")"
    printf '    "model_load_tensors_each_s": [%s],\n' "$P_LOADS"
    printf '    "model_load_read_s": %s,\n' "$(num_or_null "$P_LOAD_READ")"
    printf '    "model_load_copy_to_backend_s": %s,\n' "$(num_or_null "$P_LOAD_COPY")"
    printf '    "text_encode_s": %s,\n' "$(num_or_null "$P_TE")"
    printf '    "sampling_s": %s,\n' "$(num_or_null "$P_SAMP")"
    printf '    "per_step_s": [%s],\n' "$P_STEPS"
    printf '    "steps_seen": %s,\n' "$P_NSTEPS"
    printf '    "step_mean_excl_first_s": %s,\n' "$(num_or_null "$P_STEP_MEAN_EXCL1")"
    printf '    "vae_decode_s": %s,\n' "$(num_or_null "$P_DEC")"
    printf '    "generate_image_s": %s,\n' "$(num_or_null "$P_GEN")"
    printf '    "before_generate_s": %s\n' "$(num_or_null "$pre")"
    printf '  },\n'
    printf '  "flux_compute_buffer": %s,\n' "$(json_str "$P_FLUX_BUF")"
    printf '  "notes": "before_generate_s = wall_s - generate_image_s (process start, Vulkan init, context creation, eager weight loads). Lazy weight loads inside generate_image are in model_load_tensors_s and also inside text_encode_s/sampling_s/vae_decode_s. Per-step times come from the progress bar (%%.2f, it/s inverted), step 1 includes warm-up. vram_peak_mib = peak nvidia-smi memory.used (200 ms samples) minus the idle value before the run."\n'
    printf '}\n'
  } >"$JSON"
}

if [ -n "$PARSE_ONLY" ]; then
  parse_log "$PARSE_ONLY"
  write_json "" false "" "" "" "" "" "(parse only: $PARSE_ONLY)"
  cat "$JSON"
  exit 0
fi

# ---- unpack ------------------------------------------------------------------
rm -rf "$DIR" && mkdir -p "$DIR"
if ! tar -xJf "$TAR" -C "$DIR" --strip-components=1 2>/dev/null; then
  # no xz binary: fall back to python's lzma
  python3 -c 'import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])' "$TAR" "$DIR.x" &&
    cp -a "$DIR.x"/*/. "$DIR"/ && rm -rf "$DIR.x" || { echo "cannot unpack $TAR" >&2; exit 1; }
fi
[ -x "$SD" ] || { echo "no $SD after unpacking $TAR" >&2; exit 1; }
head -n 30 "$DIR/BUILD_INFO.txt" 2>/dev/null | sed 's/^/[build] /'

for f in diffusion_models/flux1-dev.safetensors text_encoders/clip_l.safetensors text_encoders/t5xxl_fp16.safetensors vae/ae.safetensors; do
  [ -f "$M/$f" ] || { echo "missing model file $M/$f" >&2; exit 1; }
done

# ---- device evidence ---------------------------------------------------------
devlist=$(${wrap[@]+"${wrap[@]}"} "$SD" --list-devices 2>&1 | tr -d '\r')
echo "== sd-cli --list-devices (ggml backend devices):"
echo "$devlist"
echo "$devlist" | grep -qi nvidia || echo "WARNING: no NVIDIA device in sd-cli's device list; ggml_vulkan may be on another device" >&2

# ---- run ---------------------------------------------------------------------
cmd=(${wrap[@]+"${wrap[@]}"} "$SD" -M img_gen
  --diffusion-model "$M/diffusion_models/flux1-dev.safetensors"
  --clip_l "$M/text_encoders/clip_l.safetensors"
  --t5xxl "$M/text_encoders/t5xxl_fp16.safetensors"
  --vae "$M/vae/ae.safetensors"
  -p "a photo of a cat wearing a tiny red hat"
  --cfg-scale 1.0 --guidance 3.5 --sampling-method euler
  --steps "$STEPS" -W "$SIZE" -H "$SIZE" --seed 1
  -o "$OUT/sdcpp.png" -v)
# shellcheck disable=SC2206
[ -n "$offload_flags" ] && cmd+=($offload_flags)
# shellcheck disable=SC2206
[ -n "$EXTRA_ARGS" ] && cmd+=($EXTRA_ARGS)
cmdline=$(printf '%q ' "${cmd[@]}")
echo "== $cmdline"

have_smi=0
command -v nvidia-smi >/dev/null 2>&1 && have_smi=1
idle=""
smi_pid=""
: >"$VRAM"
if [ $have_smi = 1 ]; then
  idle=$(nvidia-smi -i "$GPU_INDEX" --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -n1 | tr -dc '0-9')
  nvidia-smi -i "$GPU_INDEX" --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$VRAM" 2>/dev/null &
  smi_pid=$!
fi

timer=()
if [ -x /usr/bin/time ]; then timer=(/usr/bin/time -v -o "$TIMEF"); else : >"$TIMEF"; fi
t0=$(date +%s%N)
${timer[@]+"${timer[@]}"} timeout "$TIMEOUT" "${cmd[@]}" >"$LOG" 2>&1
status=$?
t1=$(date +%s%N)
if [ -n "$smi_pid" ]; then kill "$smi_pid" 2>/dev/null; wait "$smi_pid" 2>/dev/null; fi
wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", (b-a)/1e9}')
timed_out=false
[ "$status" = 124 ] && timed_out=true
rss=$(awk -F': ' '/Maximum resident set size/{print $2}' "$TIMEF" 2>/dev/null)
peak=$(tr -dc '0-9\n' <"$VRAM" | awk 'NF && $1+0 > m {m = $1+0} END {if (NR) print m}')

# device lines ggml printed (proof the NVIDIA GPU was used)
echo "== device lines from sd-cli's log:"
grep -a -E "ggml_vulkan|backend devices|#[0-9]+: |Initializing backend|Vulkan0" "$LOG" | head -n 20

parse_log "$LOG"
write_json "$status" "$timed_out" "$wall" "$idle" "$peak" "$rss" "$devlist" "$cmdline"
echo "== timing lines:"
tr '\r' '\n' <"$LOG" | grep -a -E "taking|completed in" | sed 's/\x1b\[[0-9;]*[A-Za-z]//g'
echo "== $JSON"
cat "$JSON"
exit "$status"
