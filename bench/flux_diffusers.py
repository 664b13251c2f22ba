#!/usr/bin/env python3
"""The PyTorch side of issue 19 item 5: diffusers' FluxTransformer2DModel with
FLUX.1-dev's config and random bf16 weights (built on the meta device, then
filled on the GPU: no CPU init, no download), one forward step at 1024²
(4096 image + 512 text tokens), sdpa attention (diffusers' default "native"
backend), resident and under diffusers' offloading:

  resident          the whole model on the GPU
  group_block       enable_group_offload(offload_type="block_level",
                    num_blocks_per_group=1, use_stream=True) — the issue's peer
  group_block_rs    the same with record_stream=True (faster, a little more memory)
  group_leaf        enable_group_offload(offload_type="leaf_level", use_stream=True)
  sequential        what DiffusionPipeline.enable_sequential_cpu_offload does to
                    each component: accelerate.cpu_offload(model, cuda)

`enable_model_cpu_offload` is a pipeline method that moves a whole component
to the GPU for its forward: for a bare transformer that is resident weights
plus a 24 GB upload per step, not an offload under a memory limit, so it is
reported as skipped.

Each mode runs in its own process (a fresh CUDA context, so each peak is its
own; one that crashes or hangs costs only itself): build, warm-up step(s),
then the median of --steps CUDA-synchronised steps, peak from
torch.cuda.max_memory_allocated (reset after the build). Prints one JSON
object: {"torch", "diffusers", "gpu", "modes": {mode: {...} | {"error"}},
"skipped": {...}}.

    python3 bench/flux_diffusers.py [--inputs /tmp/flux-in-1024.safetensors]
        [--modes resident,group_block,...] [--steps 3] [--warmup 1]
        [--mode-timeout 150] [--deadline-s 300] [--size 1024] [--txt 512]

--inputs takes bench/flux_inputs.py's file (img, img_ids, txt, txt_ids, y,
timesteps, guidance: the same inputs `dynvram dit` gets); without it the
inputs are random of the same shapes. --tiny builds a 2+2-block, width-128
model (CPU-testable: --device cpu --no-stream).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

MODES = ["resident", "group_block", "group_block_rs", "group_leaf", "sequential"]

# FLUX.1-dev's transformer config (black-forest-labs/FLUX.1-dev,
# transformer/config.json), 11.9 G parameters.
FLUX_DEV = dict(
    patch_size=1,
    in_channels=64,
    out_channels=None,
    num_layers=19,
    num_single_layers=38,
    attention_head_dim=128,
    num_attention_heads=24,
    joint_attention_dim=4096,
    pooled_projection_dim=768,
    guidance_embeds=True,
    axes_dims_rope=(16, 56, 56),
)
TINY = dict(
    FLUX_DEV,
    num_layers=2,
    num_single_layers=2,
    attention_head_dim=32,
    num_attention_heads=4,
    joint_attention_dim=128,
    pooled_projection_dim=64,
    axes_dims_rope=(4, 14, 14),
)

SKIPPED = {
    "model_cpu_offload": "enable_model_cpu_offload is a DiffusionPipeline method that moves a whole "
    "component to the GPU for its forward; for a bare transformer that is the resident model "
    "(22 GiB) plus a full upload per step, not an offload under a memory limit",
}


def build(cfg, device, torch):
    """The model on `device` in bf16, weights N(0, 0.02), norm weights 1 and
    biases 0, without any CPU-side init."""
    from diffusers import FluxTransformer2DModel

    with torch.device("meta"):
        model = FluxTransformer2DModel(**cfg)
    model = model.to(dtype=torch.bfloat16)
    model = model.to_empty(device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.zero_()
            elif "norm" in (name.split(".")[-2:-1] or [""])[0]:
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=gen)
        # Nothing in FluxTransformer2DModel registers a buffer (RoPE is computed
        # from the ids each forward); a future one would be garbage after
        # to_empty, so refuse rather than time nonsense.
        bufs = [n for n, _ in model.named_buffers()]
        if bufs:
            raise RuntimeError(f"model has buffers to_empty does not initialise: {bufs[:5]}")
    model.eval()
    return model


def make_inputs(args, cfg, device, torch):
    bf16 = torch.bfloat16
    if args.inputs:
        from safetensors.torch import load_file

        t = load_file(args.inputs)
        need = ["img", "img_ids", "txt", "txt_ids", "y", "timesteps", "guidance"]
        missing = [k for k in need if k not in t]
        if missing:
            raise SystemExit(f"{args.inputs}: no {missing}")
        return dict(
            hidden_states=t["img"].to(device, bf16),
            encoder_hidden_states=t["txt"].to(device, bf16),
            pooled_projections=t["y"].to(device, bf16),
            timestep=t["timesteps"].to(device, bf16),
            img_ids=t["img_ids"][0].to(device),
            txt_ids=t["txt_ids"][0].to(device),
            guidance=t["guidance"].to(device, torch.float32) if cfg["guidance_embeds"] else None,
        )
    g = torch.Generator(device=device).manual_seed(1)
    grid = args.size // 16
    n_img = grid * grid
    rows = torch.arange(grid, device=device).repeat_interleave(grid)
    cols = torch.arange(grid, device=device).repeat(grid)
    img_ids = torch.stack([torch.zeros_like(rows), rows, cols], dim=-1).float()
    return dict(
        hidden_states=torch.randn(1, n_img, cfg["in_channels"], generator=g, device=device).to(bf16),
        encoder_hidden_states=torch.randn(
            1, args.txt, cfg["joint_attention_dim"], generator=g, device=device
        ).to(bf16),
        pooled_projections=torch.randn(1, cfg["pooled_projection_dim"], generator=g, device=device).to(bf16),
        timestep=torch.full((1,), 0.7, device=device, dtype=bf16),
        img_ids=img_ids,
        txt_ids=torch.zeros(args.txt, 3, device=device),
        guidance=torch.full((1,), 3.5, device=device) if cfg["guidance_embeds"] else None,
    )


def child(args):
    """One mode in this process; prints one JSON line."""
    import torch

    t_start = time.perf_counter()
    mode = args.child
    cfg = TINY if args.tiny else FLUX_DEV
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize()

    model = build(cfg, dev, torch)
    params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    sync()
    t_built = time.perf_counter()
    streamed = 0
    if mode == "resident":
        pass
    elif mode in ("group_block", "group_block_rs", "group_leaf"):
        kw = dict(onload_device=dev, offload_device=torch.device("cpu"), use_stream=not args.no_stream)
        if mode == "group_leaf":
            kw.update(offload_type="leaf_level")
        else:
            kw.update(offload_type="block_level", num_blocks_per_group=1)
        if mode == "group_block_rs" and not args.no_stream:
            kw.update(record_stream=True)
        model.enable_group_offload(**kw)
        streamed = weight_bytes  # every group is onloaded once a step
    elif mode == "sequential":
        from accelerate import cpu_offload

        model.to("cpu")
        if cuda:
            torch.cuda.empty_cache()
        # As DiffusionPipeline.enable_sequential_cpu_offload does per component.
        cpu_offload(model, dev, offload_buffers=len(model._parameters) > 0)
        streamed = weight_bytes
    else:
        raise SystemExit(f"unknown mode {mode}")
    inputs = make_inputs(args, cfg, dev, torch)
    sync()
    t_ready = time.perf_counter()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    after_setup = torch.cuda.memory_allocated() if cuda else 0

    def step():
        sync()
        t = time.perf_counter()
        with torch.no_grad():
            out = model(**inputs, return_dict=False)[0]
        sync()
        return time.perf_counter() - t, out

    warm = []
    for _ in range(args.warmup):
        warm.append(step()[0])
    n = args.steps
    # A slow mode (sequential offload) gets fewer timed steps.
    if warm and warm[-1] * (n + 1) > args.step_budget_s:
        n = max(1, int(args.step_budget_s / warm[-1]) - 1)
    times, out = [], None
    for _ in range(n):
        t, out = step()
        times.append(t)
    o = out.float()
    r = {
        "mode": mode,
        "gpu": torch.cuda.get_device_name(dev) if cuda else None,
        "cuda": torch.version.cuda,
        "sdpa_backends": {
            "flash": torch.backends.cuda.flash_sdp_enabled(),
            "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
            "cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
        },
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()},
        "params": params,
        "weight_bytes": weight_bytes,
        "tokens": {"img": int(inputs["hidden_states"].shape[1]), "txt": int(inputs["encoder_hidden_states"].shape[1])},
        "warmup_seconds": warm,
        "seconds": times,
        "median_seconds_per_step": statistics.median(times),
        "best_seconds_per_step": min(times),
        "streamed_bytes_per_step": streamed,
        "peak_allocated_bytes": torch.cuda.max_memory_allocated() if cuda else None,
        "peak_reserved_bytes": torch.cuda.max_memory_reserved() if cuda else None,
        "allocated_after_setup_bytes": after_setup,
        "build_seconds": t_built - t_start,
        "setup_seconds": t_ready - t_built,
        "total_seconds": time.perf_counter() - t_start,
        "out_shape": list(out.shape),
        "out_finite": bool(torch.isfinite(o).all()),
        "max_abs_out": float(o.abs().max()),
        "out_checksum": float(o.double().sum()),
    }
    print(json.dumps(r), flush=True)


def versions():
    """Package versions without importing them (the parent never touches
    CUDA: a context of its own would sit beside each mode's)."""
    from importlib import metadata

    v = {"python": sys.version.split()[0]}
    for m in ("torch", "diffusers", "accelerate"):
        try:
            v[m] = metadata.version(m)
        except metadata.PackageNotFoundError:
            v[m] = None
    return v


def parent(args):
    t0 = time.perf_counter()
    res = {**versions(), "size": args.size, "txt_tokens": args.txt, "inputs": args.inputs,
           "modes": {}, "skipped": dict(SKIPPED)}
    for mode in args.modes.split(","):
        mode = mode.strip()
        if not mode:
            continue
        left = args.deadline_s - (time.perf_counter() - t0)
        limit = min(args.mode_timeout, left)
        if limit < 20:
            res["modes"][mode] = {"error": f"not run: {left:.0f} s left of --deadline-s"}
            print(f"[flux_diffusers] {mode}: skipped, {left:.0f} s left", file=sys.stderr, flush=True)
            continue
        cmd = [sys.executable, os.path.abspath(__file__), "--child", mode] + args.passthrough
        t = time.perf_counter()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
            lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
            if p.returncode == 0 and lines:
                res["modes"][mode] = json.loads(lines[-1])
            else:
                res["modes"][mode] = {"error": f"exit {p.returncode}", "stderr_tail": p.stderr[-2000:]}
            sys.stderr.write(p.stderr[-4000:])
        except subprocess.TimeoutExpired as e:
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            res["modes"][mode] = {"error": f"timed out after {limit:.0f} s", "stderr_tail": err[-2000:]}
        m = res["modes"][mode]
        print(
            f"[flux_diffusers] {mode}: {time.perf_counter() - t:.1f} s: "
            + (f"{m['median_seconds_per_step']:.3f} s a step, peak {m['peak_allocated_bytes']} B"
               if "error" not in m else m["error"]),
            file=sys.stderr,
            flush=True,
        )
    for m in res["modes"].values():
        if "gpu" in m:
            res.setdefault("gpu", m["gpu"])
            res.setdefault("cuda", m["cuda"])
    res["seconds"] = time.perf_counter() - t0
    print(json.dumps(res, indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--inputs", help="bench/flux_inputs.py's file (else random inputs)")
    ap.add_argument("--size", type=int, default=1024, help="image edge in pixels (random inputs)")
    ap.add_argument("--txt", type=int, default=512, help="text tokens (random inputs)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3, help="timed steps (median)")
    ap.add_argument("--step-budget-s", type=float, default=30.0,
                    help="fewer timed steps when the warm-up says they would take longer")
    ap.add_argument("--mode-timeout", type=float, default=150.0, help="seconds per mode")
    ap.add_argument("--deadline-s", type=float, default=600.0, help="seconds for all modes")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="a tiny model (tests)")
    ap.add_argument("--no-stream", action="store_true",
                    help="group offload without streams (tests: CPU has none)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inputs:
        args.inputs = os.path.abspath(args.inputs)
    args.passthrough = [
        "--warmup", str(args.warmup), "--steps", str(args.steps), "--step-budget-s", str(args.step_budget_s),
        "--size", str(args.size), "--txt", str(args.txt), "--device", args.device,
    ] + (["--inputs", args.inputs] if args.inputs else []) + (["--tiny"] if args.tiny else []) + (
        ["--no-stream"] if args.no_stream else [])
    if args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
