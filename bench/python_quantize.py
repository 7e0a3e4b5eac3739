#!/usr/bin/env python3
"""PyTorch's fp32 and eager-mode static int8 of the Fashion-MNIST CNN whose
weights, calibration batches and test set compress_bench wrote (raw float32
with a text index): the same model layout as hotloop's FashionCnn, the same
qconfig (MinMaxObserver quint8 activations, PerChannelMinMaxObserver qint8
weights), the same calibration batches, on the engine hotloop picked for
its first int8 row (onednn on Debian's 1.13).

With --qat-epochs N (> 0) and --root, also torch.ao's quantization-aware
training of the same weights with compress_bench's recipe: fuse_modules_qat,
get_default_qat_qconfig(engine), prepare_qat; N epochs of the training
images (padded by 2 and cropped at random, flipped at random) in batches of
256 with AdamW at --qat-lr (weight decay 1e-4 but on BatchNorm weights and
biases) under OneCycleLR; BatchNorm statistics frozen (freeze_bn_stats) and
observers stopped (disable_observer) for the last epoch; convert.

One line per model in --out: name, test accuracy, file bytes, then the
samples/s of each timed pass (one pass over the test set per repeat).
"""

import argparse
import gzip
import io
import os
import time

import numpy as np
import torch
import torch.nn as nn
from torch.ao.quantization import (DeQuantStub, MinMaxObserver,
                                   PerChannelMinMaxObserver, QConfig,
                                   QuantStub, convert, disable_observer,
                                   fuse_modules, fuse_modules_qat,
                                   get_default_qat_qconfig, prepare,
                                   prepare_qat)

MEAN, STD = 0.2860, 0.3530


class FashionCnn(nn.Module):
    def __init__(self, channels, hidden, classes=10, size=28):
        super().__init__()
        layers, cin = [], 1
        for c in channels:
            layers += [nn.Conv2d(cin, c, 3, padding=1, bias=False),
                       nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(2)]
            cin, size = c, size // 2
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(cin * size * size, hidden),
                                  nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x):
        return self.head(self.features(x))


class Quantized(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.quant, self.model, self.dequant = QuantStub(), model, DeQuantStub()

    def forward(self, x):
        return self.dequant(self.model(self.quant(x)))


def read(prefix):
    tensors = {}
    data = np.fromfile(prefix + ".bin", dtype=np.float32)
    offset = 0
    with open(prefix + ".txt") as f:
        for line in f:
            parts = line.split()
            name = parts[0] + " " + parts[1]
            shape = [int(d) for d in parts[2:]]
            n = int(np.prod(shape)) if shape else 1
            tensors[name] = torch.from_numpy(data[offset:offset + n].copy()).view(shape)
            offset += n
    return tensors


def read_idx(path, offset):
    with gzip.open(path) as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def fusion(model):
    return [[f"features.{4 * b}", f"features.{4 * b + 1}", f"features.{4 * b + 2}"]
            for b in range(len(model.features) // 4)] + [["head.1", "head.2"]]


def qat(state, a):
    """torch.ao's QAT of a FashionCnn with the weights `state`, converted to
    int8."""
    images = torch.from_numpy(read_idx(os.path.join(
        a.root, "train-images-idx3-ubyte.gz"), 16).copy()).view(-1, 28, 28)
    labels = torch.from_numpy(read_idx(os.path.join(
        a.root, "train-labels-idx1-ubyte.gz"), 8).astype(np.int64))
    padded = nn.functional.pad(images, (2, 2, 2, 2))
    wrapped = Quantized(FashionCnn([int(c) for c in a.channels.split(",")], a.hidden))
    wrapped.model.load_state_dict(state)
    wrapped.train()
    fuse_modules_qat(wrapped.model, fusion(wrapped.model), inplace=True)
    wrapped.qconfig = get_default_qat_qconfig(a.engine)
    prepared = prepare_qat(wrapped)
    decay = [p for n, p in prepared.named_parameters()
             if not (n.endswith("bias") or ".bn." in n or n.endswith("bn.weight"))]
    no_decay = [p for n, p in prepared.named_parameters()
                if n.endswith("bias") or ".bn." in n or n.endswith("bn.weight")]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 1e-4},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=a.qat_lr)
    steps = (len(images) + 255) // 256
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=a.qat_lr, total_steps=a.qat_epochs * steps)
    g = torch.Generator().manual_seed(0)
    for epoch in range(a.qat_epochs):
        if epoch == a.qat_epochs - 1:
            prepared.apply(torch.nn.intrinsic.qat.freeze_bn_stats)
            prepared.apply(disable_observer)
        order = torch.randperm(len(images), generator=g)
        for start in range(0, len(images), 256):
            index = order[start:start + 256]
            top = torch.randint(0, 5, (len(index),), generator=g)
            left = torch.randint(0, 5, (len(index),), generator=g)
            flip = torch.rand(len(index), generator=g) < 0.5
            x = torch.stack([padded[i, t:t + 28, l:l + 28]
                             for i, t, l in zip(index.tolist(), top.tolist(), left.tolist())])
            x = torch.where(flip.view(-1, 1, 1), x.flip(-1), x)
            x = ((x.float() / 255 - MEAN) / STD).unsqueeze(1)
            loss = nn.functional.cross_entropy(prepared(x), labels[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
    return convert(prepared.eval())


def size_of(model):
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.tell()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--prefix", required=True)
    p.add_argument("--channels", default="16,32")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--engine", default="onednn")
    p.add_argument("--out", required=True)
    p.add_argument("--root", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--qat-epochs", type=int, default=0)
    p.add_argument("--qat-lr", type=float, default=1e-5)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.backends.quantized.engine = a.engine
    t = read(a.prefix)
    model = FashionCnn([int(c) for c in a.channels.split(",")], a.hidden).eval()
    state = {k[len("param "):]: v for k, v in t.items() if k.startswith("param ")}
    state = {k: (v.long() if k.endswith("num_batches_tracked") else v)
             for k, v in state.items()}
    model.load_state_dict(state)
    calibration = [v for k, v in sorted(t.items()) if k.startswith("calibration ")]
    inputs = [t[f"input {i}"] for i in range(sum(k.startswith("input ") for k in t))]
    targets = [t[f"target {i}"].long() for i in range(len(inputs))]

    wrapped = Quantized(model).eval()
    fuse_modules(wrapped.model, fusion(model), inplace=True)
    wrapped.qconfig = QConfig(
        activation=MinMaxObserver.with_args(dtype=torch.quint8),
        weight=PerChannelMinMaxObserver.with_args(
            dtype=torch.qint8, qscheme=torch.per_channel_symmetric))
    prepared = prepare(wrapped)
    with torch.inference_mode():
        for x in calibration:
            prepared(x)
    int8 = convert(prepared)

    rows = [("PyTorch fp32", model), (f"PyTorch static int8 ({a.engine})", int8)]
    if a.qat_epochs > 0:
        rows.append((f"PyTorch QAT int8 ({a.engine}) +{a.qat_epochs} epochs", qat(state, a)))
    results = []
    with torch.inference_mode():
        for name, m in rows:
            correct = sum(int((m(x).argmax(1) == y).sum()) for x, y in zip(inputs, targets))
            m(inputs[0])
            results.append([name, correct / sum(len(y) for y in targets), size_of(m), []])
        for _ in range(a.repeats):
            for r, (name, m) in zip(results, rows):
                start = time.perf_counter()
                for x in inputs:
                    m(x)
                r[3].append(sum(len(x) for x in inputs) / (time.perf_counter() - start))
    with open(a.out, "w") as f:
        for name, accuracy, size, rates in results:
            f.write(f"{name}\t{accuracy} {size} " + " ".join(f"{v:.1f}" for v in rates) + "\n")


if __name__ == "__main__":
    main()
