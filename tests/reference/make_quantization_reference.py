#!/usr/bin/env python3
"""Writes tests/reference/quantization.txt: torch.ao's eager-mode static
and dynamic quantization of hotloop's FashionCnn and Mlp layouts, and the
dynamic quantization of nanoGPT's GPT, for tests/compress/quantize_test.cpp
to compare with hotloop::compress.

Run with Debian's python3-torch (1.13) or any later PyTorch:

    /usr/bin/python3 tests/reference/make_quantization_reference.py

Format (as init.txt): <case> <field> <name> <shape> <values...>.
Per case: the float model's parameters and buffers (field `param`, by
hotloop's names, 9 significant digits: exact for float32), the calibration
and test inputs (`input`: calibration.0, ..., test), torch.ao's observers'
scales and zero points (`qparams`: activation.<i>.scale / .zero_point for
the input then each fused layer's output, weight.<i>.scale / .zero_point
per conv/linear), and the converted model's output on the test input
(`output`). The engine is onednn, the observers MinMaxObserver (quint8,
per-tensor affine) and PerChannelMinMaxObserver (qint8, per-channel
symmetric), as hotloop's defaults; dynamic: torch.ao's default.

Case gpt_dynamic: the nanoGPT twin of tests/reference/interop/gpt.safetensors
(make_interop_reference.py's gpt_twin: vocab 64, block 16, 2 layers, 2
heads, 32 wide) through quantize_dynamic({nn.Linear}), lm_head included:
the tokens (`input` idx), each Linear's weight scale (`qparams`
weight.<module>.scale) and the logits of every position (`output`).
"""

import os
import sys

import torch
import torch.nn as nn
from torch.ao.quantization import (
    DeQuantStub,
    MinMaxObserver,
    PerChannelMinMaxObserver,
    QConfig,
    QuantStub,
    convert,
    fuse_modules,
    prepare,
    quantize_dynamic,
)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "quantization.txt")
sys.path.insert(0, HERE)
from make_interop_reference import case_input, gpt_twin  # noqa: E402


class FashionCnn(nn.Module):
    """hotloop's FashionCnn layout: features.{4b} conv (no bias), .{4b+1}
    BatchNorm, .{4b+2} ReLU, .{4b+3} MaxPool; head.0 Flatten, head.1 Linear,
    head.2 ReLU, head.3 Linear."""

    def __init__(self, channels, hidden, classes, size):
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


class Mlp(nn.Module):
    """hotloop's Mlp layout: layers.<i> Linear with ReLU between."""

    def __init__(self, sizes):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
        self.flatten = nn.Flatten()
        self.relus = nn.ModuleList(nn.ReLU() for _ in sizes[2:])

    def forward(self, x):
        x = self.flatten(x)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.relus):
                x = self.relus[i](x)
        return x


class Quantized(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.quant, self.model, self.dequant = QuantStub(), model, DeQuantStub()

    def forward(self, x):
        return self.dequant(self.model(self.quant(x)))


QCONFIG = QConfig(
    activation=MinMaxObserver.with_args(dtype=torch.quint8, qscheme=torch.per_tensor_affine),
    weight=PerChannelMinMaxObserver.with_args(dtype=torch.qint8,
                                              qscheme=torch.per_channel_symmetric))


def row(case, field, name, t):
    shape = "[" + ",".join(str(d) for d in t.shape) + "]"
    values = " ".join(f"{v:.9g}" for v in t.detach().flatten().double().tolist())
    return f"{case} {field} {name} {shape} {values}"


def trained_looking(model):
    # Weights as initialised; BatchNorm statistics and affine parameters as
    # after some training, so folding them matters.
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.normal_(0, 0.3)
            elif name.endswith("running_var"):
                b.uniform_(0.5, 2.0)
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.normal_(1.0, 0.2)
                m.bias.normal_(0.0, 0.2)


def observers(case, lines, prepared, weights):
    acts = [prepared.quant.activation_post_process]
    acts += [m.activation_post_process for m in prepared.model.modules()
             if hasattr(m, "activation_post_process")
             and m is not prepared.quant]
    for i, obs in enumerate(acts):
        scale, zp = obs.calculate_qparams()
        lines.append(row(case, "qparams", f"activation.{i}.scale", scale))
        lines.append(row(case, "qparams", f"activation.{i}.zero_point", zp))
    for i, w in enumerate(weights):
        obs = PerChannelMinMaxObserver(dtype=torch.qint8,
                                       qscheme=torch.per_channel_symmetric)
        obs(w)
        scale, zp = obs.calculate_qparams()
        lines.append(row(case, "qparams", f"weight.{i}.scale", scale))
        lines.append(row(case, "qparams", f"weight.{i}.zero_point", zp))


def static_case(case, model, fuse, shape, lines):
    torch.manual_seed(1)
    model.eval()
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        lines.append(row(case, "param", name, t))
    calibration = [torch.randn(*shape) for _ in range(3)]
    test = torch.randn(*shape)
    for i, x in enumerate(calibration):
        lines.append(row(case, "input", f"calibration.{i}", x))
    lines.append(row(case, "input", "test", test))
    wrapped = Quantized(model).eval()
    if fuse:
        fuse_modules(wrapped.model, fuse, inplace=True)
    wrapped.qconfig = QCONFIG
    prepared = prepare(wrapped)
    with torch.no_grad():
        for x in calibration:
            prepared(x)
    # The fused layers' weights, BatchNorm folded.
    weights = [m.weight for m in prepared.model.modules()
               if isinstance(m, (nn.Conv2d, nn.Linear))]
    observers(case, lines, prepared, weights)
    converted = convert(prepared)
    with torch.no_grad():
        lines.append(row(case, "output", "logits", converted(test)))
        lines.append(row(case, "output", "float", model(test)))


def main():
    torch.backends.quantized.engine = "onednn"
    torch.set_num_threads(1)
    lines = [
        f"# Generated by tests/reference/make_quantization_reference.py with "
        f"PyTorch {torch.__version__} (engine onednn); do not edit.",
        "# <case> <field> <name> <shape> <values...>",
    ]
    torch.manual_seed(0)
    cnn = FashionCnn([8, 16], 32, 10, 12)
    trained_looking(cnn)
    static_case("cnn", cnn,
                [["features.0", "features.1", "features.2"],
                 ["features.4", "features.5", "features.6"],
                 ["head.1", "head.2"]],
                (16, 1, 12, 12), lines)

    torch.manual_seed(0)
    mlp = Mlp([20, 32, 16, 5])
    static_case("mlp", mlp,
                [["layers.0", "relus.0"], ["layers.1", "relus.1"]],
                (16, 20), lines)

    # Dynamic: torch.ao's default qconfig on every Linear.
    torch.manual_seed(0)
    mlp = Mlp([20, 32, 16, 5]).eval()
    for name, t in mlp.named_parameters():
        lines.append(row("dynamic", "param", name, t))
    test = torch.randn(16, 20)
    lines.append(row("dynamic", "input", "test", test))
    dynamic = quantize_dynamic(mlp, {nn.Linear}, dtype=torch.qint8)
    with torch.no_grad():
        lines.append(row("dynamic", "output", "logits", dynamic(test)))
    for i, layer in enumerate(dynamic.layers):
        w = layer.weight()
        lines.append(row("dynamic", "qparams", f"weight.{i}.scale",
                         torch.tensor([w.q_scale()])))
        lines.append(row("dynamic", "qparams", f"weight.{i}.zero_point",
                         torch.tensor([w.q_zero_point()])))

    # Dynamic, nanoGPT's GPT: every nn.Linear, the tied lm_head too.
    gpt = gpt_twin().eval()
    idx = case_input("gpt")
    lines.append(row("gpt_dynamic", "input", "idx", idx))
    dynamic = quantize_dynamic(gpt, {nn.Linear}, dtype=torch.qint8)
    with torch.no_grad():
        logits = dynamic(idx, torch.zeros_like(idx))[0]
    lines.append(row("gpt_dynamic", "output", "logits", logits))
    for name, layer in dynamic.named_modules():
        if isinstance(layer, torch.ao.nn.quantized.dynamic.Linear):
            lines.append(row("gpt_dynamic", "qparams", f"weight.{name}.scale",
                             torch.tensor([layer.weight().q_scale()])))

    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
