#!/usr/bin/env python3
"""The PyTorch side of issue 33 item 7: diffusers' FluxPipeline, FLUX.1-dev's
four components (CLIP-L, T5 v1.1 XXL, the transformer, the 16-channel VAE)
with their real configs and random bf16 weights (built on the meta device,
filled on the GPU: no CPU init, no download), one image at 1024², 28 steps,
guidance 3.5, max_sequence_length 512, resident and offloaded:

  resident            every component on the GPU
  model_cpu_offload   pipe.enable_model_cpu_offload(): a whole component is
                      moved to the GPU for its stage (ComfyUI's usual mode)
  group_leaf          diffusers.hooks.apply_group_offloading(leaf_level,
                      use_stream=True) on every component: the lowest-VRAM
                      offload diffusers has

Per mode, in its own process (a fresh CUDA context, its own peak): build,
one warm-up image, then the timed image. Stages: `encode` is a separate
pipe.encode_prompt call, `sample` a pipe call on those embeddings with
output_type="latent", `decode` the VAE on its latents (unpack, scale/shift,
vae.decode, postprocess to PIL), and `whole` one full pipe(prompt=...) call
with output_type="pil" — the figure the issue's target compares against.
Peak VRAM is torch.cuda.max_memory_allocated over the whole call.

Tokenizers come from the repository (models/tokenizers/*/tokenizer.json: the
same files FLUX.1-dev ships), so nothing is downloaded. diffusers and
transformers (and tokenizers) travel as wheels in .whl/ (bench/prepare.sh).

    python3 bench/txt2img_diffusers.py [--modes resident,model_cpu_offload,group_leaf]
        [--size 1024] [--steps 28] [--mode-timeout 240] [--deadline-s 600]
        [--tiny --device cpu]   # a tiny pipeline, for checking the script on a CPU

Prints one JSON object: {"torch", "diffusers", "transformers", "gpu",
"modes": {mode: {...} | {"error"}}}.
"""
import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flux_diffusers import FLUX_DEV, TINY, versions  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ["resident", "model_cpu_offload", "group_leaf"]
PROMPT = "a photo of a cat wearing a tiny red hat"

# openai/clip-vit-large-patch14's text config (FLUX.1-dev text_encoder/).
CLIP_L = dict(vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
              num_attention_heads=12, max_position_embeddings=77, hidden_act="quick_gelu",
              layer_norm_eps=1e-5, projection_dim=768, bos_token_id=0, eos_token_id=2, pad_token_id=1)
# google/t5-v1_1-xxl's encoder (FLUX.1-dev text_encoder_2/).
T5_XXL = dict(vocab_size=32128, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64,
              relative_attention_num_buckets=32, relative_attention_max_distance=128,
              feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6, is_encoder_decoder=False,
              use_cache=False, tie_word_embeddings=False)
# FLUX.1-dev vae/: 16 latent channels, no quant convs.
VAE = dict(in_channels=3, out_channels=3, latent_channels=16, block_out_channels=(128, 256, 512, 512),
           layers_per_block=2, norm_num_groups=32, act_fn="silu", sample_size=1024,
           down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
           scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False, use_post_quant_conv=False,
           mid_block_add_attention=True)
SCHEDULER = dict(base_image_seq_len=256, base_shift=0.5, max_image_seq_len=4096, max_shift=1.15,
                 num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True)


def tiny_configs():
    clip = dict(CLIP_L, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                projection_dim=64)
    t5 = dict(T5_XXL, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_heads=4)
    vae = dict(VAE, block_out_channels=(32, 32, 32, 32))
    return clip, t5, vae, TINY


def fill(model, device, torch, seed):
    """`model` (built on meta) on `device` in bf16: weights N(0, 0.02), norm
    weights 1, biases 0; refuses buffers that to_empty would leave as garbage
    (T5's and CLIP's position ids are recomputed below)."""
    model = model.to(dtype=torch.bfloat16).to_empty(device=device)
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            last = name.split(".")
            if name.endswith(".bias"):
                p.zero_()
            elif any("norm" in part for part in last[-2:-1]):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=gen)
        for name, b in model.named_buffers():
            if name.endswith("position_ids"):
                b.copy_(torch.arange(b.shape[-1], device=device).expand_as(b))
            else:
                raise RuntimeError(f"buffer {name} is not initialised by to_empty")
    return model.eval()


def build_pipe(args, device, torch):
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import (CLIPTextConfig, CLIPTextModel, CLIPTokenizerFast, T5Config, T5EncoderModel,
                              T5TokenizerFast)

    clip_cfg, t5_cfg, vae_cfg, flux_cfg = tiny_configs() if args.tiny else (CLIP_L, T5_XXL, VAE, FLUX_DEV)
    with torch.device("meta"):
        clip = CLIPTextModel(CLIPTextConfig(**clip_cfg))
        t5 = T5EncoderModel(T5Config(**t5_cfg))
        vae = AutoencoderKL(**vae_cfg)
        flux = FluxTransformer2DModel(**dict(flux_cfg, pooled_projection_dim=clip_cfg["hidden_size"],
                                             joint_attention_dim=t5_cfg["d_model"]))
    parts = dict(text_encoder=fill(clip, device, torch, 1), text_encoder_2=fill(t5, device, torch, 2),
                 vae=fill(vae, device, torch, 3), transformer=fill(flux, device, torch, 4))
    tok = os.path.join(REPO, "models", "tokenizers")
    return FluxPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER),
        tokenizer=CLIPTokenizerFast(tokenizer_file=os.path.join(tok, "clip-l", "tokenizer.json"),
                                    model_max_length=77),
        tokenizer_2=T5TokenizerFast(tokenizer_file=os.path.join(tok, "t5", "tokenizer.json"),
                                    model_max_length=512),
        **parts,
    ), parts


def child(args):
    """One mode in this process; prints one JSON line."""
    import torch

    t0 = time.perf_counter()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize()

    pipe, parts = build_pipe(args, dev, torch)
    weight_bytes = {k: sum(p.numel() * p.element_size() for p in m.parameters()) for k, m in parts.items()}
    sync()
    t_built = time.perf_counter()
    if args.child == "resident":
        pass
    elif args.child == "model_cpu_offload":
        pipe.to("cpu")
        if cuda:
            torch.cuda.empty_cache()
        pipe.enable_model_cpu_offload(device=dev)
    elif args.child == "group_leaf":
        from diffusers.hooks import apply_group_offloading

        pipe.to("cpu")
        if cuda:
            torch.cuda.empty_cache()
        for m in parts.values():
            apply_group_offloading(m, onload_device=dev, offload_device=torch.device("cpu"),
                                   offload_type="leaf_level", use_stream=cuda)
    else:
        raise SystemExit(f"unknown mode {args.child}")
    sync()
    t_ready = time.perf_counter()
    kw = dict(height=args.size, width=args.size, num_inference_steps=args.steps, guidance_scale=3.5,
              max_sequence_length=args.max_sequence_length)

    def timed(f):
        sync()
        t = time.perf_counter()
        with torch.no_grad():
            r = f()
        sync()
        return time.perf_counter() - t, r

    def whole():
        g = torch.Generator(device="cpu").manual_seed(0)
        return pipe(prompt=PROMPT, generator=g, output_type="pil", **kw).images[0]

    def stages():
        enc_s, (pe, pooled, _ids) = timed(lambda: pipe.encode_prompt(
            prompt=PROMPT, prompt_2=None, device=dev, max_sequence_length=args.max_sequence_length))
        g = torch.Generator(device="cpu").manual_seed(0)
        sample_s, lat = timed(lambda: pipe(prompt_embeds=pe, pooled_prompt_embeds=pooled, generator=g,
                                           output_type="latent", **kw).images)

        def decode():
            z = pipe._unpack_latents(lat, args.size, args.size, pipe.vae_scale_factor)
            z = z / pipe.vae.config.scaling_factor + pipe.vae.config.shift_factor
            img = pipe.vae.decode(z.to(pipe.vae.dtype), return_dict=False)[0]
            return pipe.image_processor.postprocess(img, output_type="pil")

        dec_s, _ = timed(decode)
        return {"encode": enc_s, "sample": sample_s, "decode": dec_s}

    warm_s, _ = timed(whole)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    whole_s, image = timed(whole)
    peak = torch.cuda.max_memory_allocated() if cuda else None
    st = stages()
    r = {
        "mode": args.child,
        "gpu": torch.cuda.get_device_name(dev) if cuda else None,
        "size": args.size,
        "steps": args.steps,
        "max_sequence_length": args.max_sequence_length,
        "weight_bytes": weight_bytes,
        "build_seconds": t_built - t0,
        "setup_seconds": t_ready - t_built,
        "warmup_whole_seconds": warm_s,
        "whole_seconds": whole_s,
        "stage_seconds": st,
        "seconds_per_step": st["sample"] / args.steps,
        "peak_allocated_bytes": peak,
        "image_size": list(image.size),
        "total_seconds": time.perf_counter() - t0,
    }
    print(json.dumps(r), flush=True)


def parent(args):
    t0 = time.perf_counter()
    v = versions()
    from importlib import metadata

    try:
        v["transformers"] = metadata.version("transformers")
    except metadata.PackageNotFoundError:
        v["transformers"] = None
    res = {**v, "size": args.size, "steps": args.steps, "modes": {}}
    for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
        left = args.deadline_s - (time.perf_counter() - t0)
        limit = min(args.mode_timeout, left)
        if limit < 20:
            res["modes"][mode] = {"error": f"not run: {left:.0f} s left of --deadline-s"}
            continue
        cmd = [sys.executable, os.path.abspath(__file__), "--child", mode] + args.passthrough
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
            res["modes"][mode] = (json.loads(lines[-1]) if p.returncode == 0 and lines
                                  else {"error": f"exit {p.returncode}", "stderr_tail": p.stderr[-2000:]})
            sys.stderr.write(p.stderr[-4000:])
        except subprocess.TimeoutExpired:
            res["modes"][mode] = {"error": f"timed out after {limit:.0f} s"}
        m = res["modes"][mode]
        print(f"[txt2img_diffusers] {mode}: " + (f"{m['whole_seconds']:.2f} s an image, peak "
              f"{m['peak_allocated_bytes']} B" if "error" not in m else m["error"]), file=sys.stderr, flush=True)
        res.setdefault("gpu", m.get("gpu"))
    res["seconds"] = time.perf_counter() - t0
    print(json.dumps(res, indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--size", type=int, default=1024, help="image edge in pixels")
    ap.add_argument("--steps", type=int, default=28)
    ap.add_argument("--max-sequence-length", type=int, default=512)
    ap.add_argument("--mode-timeout", type=float, default=240.0)
    ap.add_argument("--deadline-s", type=float, default=600.0)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="a tiny pipeline (checks the script on a CPU)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.passthrough = ["--size", str(args.size), "--steps", str(args.steps), "--max-sequence-length",
                        str(args.max_sequence_length), "--device", args.device] + (["--tiny"] if args.tiny else [])
    if args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
