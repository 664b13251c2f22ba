#!/usr/bin/env python3
"""Writes `dynvram dit` inputs for a FLUX.1-shaped model at an image size:
img [1, (H/16)·(W/16), 64] (packed 2×2 latent patches), img_ids (0, row, col),
txt [1, L_txt, 4096], txt_ids zeros, y [1, 768], timesteps [0.7],
guidance [3.5]; all F32, random normal. Standard library only (the GPU
machine has no numpy).

    python3 bench/flux_inputs.py OUT.safetensors [--size 1024] [--txt 512]
"""
import argparse
import json
import random
import struct


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--size", type=int, default=1024, help="image edge in pixels")
    ap.add_argument("--txt", type=int, default=512, help="text tokens")
    a = ap.parse_args()
    rng = random.Random(0)
    grid = a.size // 16
    n_img = grid * grid
    tensors = {
        "img": ([1, n_img, 64], [rng.gauss(0, 1) for _ in range(n_img * 64)]),
        "img_ids": ([1, n_img, 3], [v for r in range(grid) for c in range(grid) for v in (0.0, r, c)]),
        "txt": ([1, a.txt, 4096], [rng.gauss(0, 1) for _ in range(a.txt * 4096)]),
        "txt_ids": ([1, a.txt, 3], [0.0] * (a.txt * 3)),
        "y": ([1, 768], [rng.gauss(0, 1) for _ in range(768)]),
        "timesteps": ([1], [0.7]),
        "guidance": ([1], [3.5]),
    }
    header, blobs, off = {}, [], 0
    for name, (shape, vals) in tensors.items():
        blob = struct.pack(f"<{len(vals)}f", *vals)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(a.out, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    print(f"{a.out}: {n_img} image tokens, {a.txt} text tokens")


if __name__ == "__main__":
    main()
