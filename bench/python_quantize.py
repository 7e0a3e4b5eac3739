#!/usr/bin/env python3
"""PyTorch's fp32 and eager-mode static int8 of the Fashion-MNIST CNN whose
weights, calibration batches and test set compress_bench wrote (raw float32
with a text index): the same model layout as hotloop's FashionCnn, the same
qconfig (MinMaxObserver quint8 activations, PerChannelMinMaxObserver qint8
weights), the same calibration batches, on the engine hotloop picked for
its first int8 row (onednn on Debian's 1.13).

One line per model in --out: name, test accuracy, file bytes, then the
samples/s of each timed pass (one pass over the test set per repeat).
"""

import argparse
import io
import time

import numpy as np
import torch
import torch.nn as nn
from torch.ao.quantization import (DeQuantStub, MinMaxObserver,
                                   PerChannelMinMaxObserver, QConfig,
                                   QuantStub, convert, fuse_modules, prepare)


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
    fuse_modules(wrapped.model, [
        [f"features.{4 * b}", f"features.{4 * b + 1}", f"features.{4 * b + 2}"]
        for b in range(len(model.features) // 4)] + [["head.1", "head.2"]], inplace=True)
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
