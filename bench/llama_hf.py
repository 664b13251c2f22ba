"""transformers + accelerate on a Llama-family checkpoint under a GPU memory
limit: the side-by-side figure for `dynvram generate` (issue 9, item 4).

    python3 bench/llama_hf.py MODEL_DIR --budget-gib X --prompt-len P --new-tokens N
        [--prompt-ids 1,2,...] [--attn sdpa|eager] [--cpu-gib 100] [--max-seconds S]

Loads the checkpoint in bf16 with `device_map="auto"` and
`max_memory={0: "<X>GiB", "cpu": "<cpu>GiB"}` (X = 0: everything on GPU 0,
`device_map={"": 0}`), so accelerate places what fits on the GPU and
offloads the remaining decoder layers to CPU RAM, moving their weights to
the GPU on every forward (pageable copies, no prefetch). Note that
accelerate's limit covers the weights it places; activations and the KV
cache come on top, whereas dynvram's `--vram-budget` covers everything.

Attention is `sdpa` by default (PyTorch's fused kernels, what transformers
picks by default); `--attn eager` is the reference implementation.

Timing: one warm-up prefill + decode step on a short prompt, then the
timed prefill of the whole prompt (one forward, `torch.cuda.synchronize()`
after) and a greedy decode loop of `new_tokens - 1` one-token forwards with
the KV cache (the first generated token comes from the prefill's logits, as
in `dynvram generate`, whose decode phase also counts fed-back tokens).
`--max-seconds` stops the decode loop early (slow offloaded runs); the JSON
says how many steps ran. Prints one JSON line.
"""
import argparse
import json
import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir")
    p.add_argument("--budget-gib", type=float, default=0.0,
                   help="GPU 0 memory limit for the weights; 0 = all on GPU")
    p.add_argument("--cpu-gib", type=float, default=100.0, help="CPU RAM limit for offloaded weights")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--prompt-ids", default=None,
                   help="comma-separated ids (default: deterministic ids of --prompt-len)")
    p.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa")
    p.add_argument("--max-seconds", type=float, default=0.0,
                   help="stop the decode loop after this long (0 = never)")
    return p.parse_args()


def default_ids(n, vocab):
    # The same formula as bench/llama.sh: ids 3.. spread over the vocabulary.
    return [3 + (i * 7919) % (vocab - 3) for i in range(n)]


def sync():
    torch.cuda.synchronize()


def main():
    a = parse()
    t0 = time.perf_counter()
    if a.budget_gib > 0:
        placement = dict(device_map="auto",
                         max_memory={0: f"{a.budget_gib}GiB", "cpu": f"{a.cpu_gib}GiB"})
    else:
        placement = dict(device_map={"": 0})
    model = AutoModelForCausalLM.from_pretrained(
        a.model_dir, dtype=torch.bfloat16, attn_implementation=a.attn, **placement)
    model.eval()
    sync()
    load_s = time.perf_counter() - t0
    vocab = model.config.vocab_size
    ids = ([int(x) for x in a.prompt_ids.split(",")] if a.prompt_ids
           else default_ids(a.prompt_len, vocab))
    devmap = getattr(model, "hf_device_map", {"": 0})
    offloaded = [name for name, d in devmap.items() if d in ("cpu", "disk")]
    # Weight bytes accelerate moves to the GPU on every forward.
    off_bytes = 0
    for name in offloaded:
        mod = model.get_submodule(name) if name else model
        off_bytes += sum(p.numel() * p.element_size() for p in mod.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())

    def forward(x, past):
        # Only the last row's logits, as dynvram computes when not asked for all.
        out = model(input_ids=x, past_key_values=past, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1, :], out.past_key_values

    with torch.inference_mode():
        # Warm-up: kernels, cuBLAS handles, accelerate hooks.
        x = torch.tensor([ids[:8]], device="cuda:0")
        logits, past = forward(x, None)
        forward(logits.argmax(-1, keepdim=True), past)
        del logits, past
        sync()
        torch.cuda.reset_peak_memory_stats()

        x = torch.tensor([ids], device="cuda:0")
        sync()
        t = time.perf_counter()
        logits, past = forward(x, None)
        sync()
        prefill_s = time.perf_counter() - t

        tokens = [int(logits.argmax(-1))]
        steps = 0
        t = time.perf_counter()
        while len(tokens) < a.new_tokens:
            nxt = torch.tensor([[tokens[-1]]], device="cuda:0")
            logits, past = forward(nxt, past)
            tokens.append(int(logits.argmax(-1)))  # .item() synchronizes
            steps += 1
            if a.max_seconds > 0 and time.perf_counter() - t > a.max_seconds:
                break
        sync()
        decode_s = time.perf_counter() - t

    print(json.dumps({
        "impl": "transformers+accelerate",
        "torch": torch.__version__,
        "transformers": sys.modules["transformers"].__version__,
        "device": torch.cuda.get_device_name(0),
        "model_dir": os.path.abspath(a.model_dir),
        "attn": a.attn,
        "budget_gib": a.budget_gib,
        "load_seconds": load_s,
        "weight_bytes": weight_bytes,
        "offloaded_modules": len(offloaded),
        "offloaded_bytes_per_forward": off_bytes,
        "prompt_tokens": len(ids),
        "prefill_seconds": prefill_s,
        "prefill_tokens_per_second": len(ids) / prefill_s,
        "decode_steps": steps,
        "decode_capped": len(tokens) < a.new_tokens,
        "decode_seconds": decode_s,
        "decode_tokens_per_second": steps / decode_s if decode_s > 0 and steps else 0.0,
        "peak_gpu_bytes": torch.cuda.max_memory_allocated(),
        "tokens": tokens,
    }), flush=True)


if __name__ == "__main__":
    main()
