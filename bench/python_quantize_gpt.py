#!/usr/bin/env python3
"""PyTorch's fp32 and dynamic int8 of the GPT whose weights `hotloop export`
wrote (a nanoGPT state_dict): torch.ao's quantize_dynamic of every
nn.Linear, lm_head included, as `hotloop quantize --mode dynamic` does.
Both run over the validation windows hotloop validated on (the text file's
last floor(val_fraction * windows) windows of block_size + 1 bytes, one
every stride bytes) in batches of --batch, --repeats passes, interleaved.

One line per model on stdout: name, validation loss, then the tokens/s of
each pass.

  python_quantize_gpt.py --weights gpt.pt --text FILE [--block-size 64]
      [--stride 8] [--val-fraction 0.1] [--batch 64] [--n-layer 4]
      [--n-head 4] [--n-embd 128] [--vocab-size 256] [--no-bias] [--repeats 5]
      [--threads 2] [--engine onednn]
"""

import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn
from torch.ao.quantization import quantize_dynamic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_train import make_gpt  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--weights", required=True)
    p.add_argument("--text", required=True)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--stride", type=int, default=8)
    p.add_argument("--val-fraction", type=float, default=0.1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument("--no-bias", action="store_true", help="model.bias=false")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--engine", default="onednn")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.backends.quantized.engine = a.engine

    with open(a.text, "rb") as f:
        tokens = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
    windows = (len(tokens) - (a.block_size + 1)) // a.stride + 1
    val_windows = int(math.floor(a.val_fraction * windows))
    starts = [i * a.stride for i in range(windows - val_windows, windows)]
    batches = []
    for first in range(0, len(starts), a.batch):
        w = torch.stack([tokens[s:s + a.block_size + 1] for s in starts[first:first + a.batch]])
        batches.append((w[:, :-1].contiguous(), w[:, 1:].contiguous()))

    model = make_gpt(a.vocab_size, a.block_size, a.n_layer, a.n_head, a.n_embd,
                     bias=not a.no_bias)
    state = torch.load(a.weights, weights_only=True)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if [m for m in missing if not m.endswith("attn.bias")] or unexpected:
        sys.exit(f"python_quantize_gpt: {a.weights} does not fit the model: "
                 f"missing {missing}, unexpected {unexpected}")
    model.eval()
    int8 = quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    rows = [["PyTorch fp32", model], [f"PyTorch dynamic int8 ({a.engine})", int8]]
    results = []
    with torch.inference_mode():
        for name, m in rows:
            total, count = 0.0, 0
            for x, y in batches:
                logits = m(x)
                total += float(nn.functional.cross_entropy(
                    logits.view(-1, logits.size(-1)), y.view(-1), reduction="sum"))
                count += y.numel()
            results.append([name, total / count, []])
        for _ in range(a.repeats):
            for result, (name, m) in zip(results, rows):
                start = time.perf_counter()
                for x, _ in batches:
                    m(x)
                result[2].append(sum(x.numel() for x, _ in batches)
                                 / (time.perf_counter() - start))
    for name, loss, rates in results:
        print(f"{name}\t{loss:.4f} " + " ".join(f"{r:.0f}" for r in rates))


if __name__ == "__main__":
    main()
