#!/usr/bin/env python3
"""Writes tests/reference/qat.txt: torch.ao's eager-mode quantization-aware
training of hotloop's FashionCnn and Mlp layouts (fuse_modules_qat,
prepare_qat, a few SGD steps, freeze_bn_stats, convert), for
tests/compress/qat_test.cpp to compare with hotloop::compress's QAT.

Run with Debian's python3-torch (1.13) or any later PyTorch:

    /usr/bin/python3 tests/reference/make_qat_reference.py

Format (as quantization.txt): <case> <field> <name> <shape> <values...>.
Per case: the float model's parameters and buffers (`param`, hotloop's
names), the training batches and labels and the test input (`input`),
after the steps the QAT model's tensors by hotloop's QatNet names
(`trained`: weights, biases, BatchNorm, and each fake quantizer's scale,
zero_point, min_val and max_val buffers), the QAT model's output on the
test input in eval mode (`output` qat), the converted int8 model's
observers' scales and zero points (`qparams`: activation.<i> for the
input then each layer's output, weight.<i> per conv/linear, as convert
quantized them) and its output (`output` int8).

Cases: cnn (get_default_qat_qconfig("onednn"): fused fake quantizers,
per-channel weights), cnn_v0 (the same, version 0: FakeQuantize with
MovingAverageMinMaxObserver, observers disabled before evaluation), mlp
(qnnpack: per-tensor weights) and mlp_minmax (onednn, FakeQuantize with a
MinMaxObserver on activations).
"""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.ao.quantization import (
    FakeQuantize,
    MinMaxObserver,
    QConfig,
    convert,
    default_per_channel_weight_fake_quant,
    disable_observer,
    fuse_modules_qat,
    get_default_qat_qconfig,
    prepare_qat,
)
import torch.nn.intrinsic.qat as nniqat

from make_quantization_reference import FashionCnn, Mlp, Quantized, row, trained_looking

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "qat.txt")

STEPS = 4
LR = 0.05


def fake_quantizers(prepared):
    """The activation fake quantizers in hotloop's order (input, then each
    layer's output) and the weight ones, with the hotloop module names."""
    acts = [("quant", prepared.quant.activation_post_process)]
    weights = []
    convs = [m for m in prepared.model.modules() if isinstance(m, nniqat.ConvBnReLU2d)]
    linears = [m for m in prepared.model.modules() if isinstance(m, nn.Linear)]
    for i, m in enumerate(convs):
        acts.append((f"features.{i}.activation_post_process", m.activation_post_process))
        weights.append((f"features.{i}.weight_fake_quant", m.weight_fake_quant))
    for i, m in enumerate(linears):
        acts.append((f"head.{i}.activation_post_process", m.activation_post_process))
        weights.append((f"head.{i}.weight_fake_quant", m.weight_fake_quant))
    return convs, linears, acts, weights


def trained_rows(case, lines, prepared):
    convs, linears, acts, weights = fake_quantizers(prepared)
    for i, m in enumerate(convs):
        lines.append(row(case, "trained", f"features.{i}.weight", m.weight))
        if m.bias is not None:
            lines.append(row(case, "trained", f"features.{i}.bias", m.bias))
        for name in ["weight", "bias", "running_mean", "running_var"]:
            lines.append(row(case, "trained", f"features.{i}.bn.{name}",
                             getattr(m.bn, name)))
    for i, m in enumerate(linears):
        lines.append(row(case, "trained", f"head.{i}.weight", m.weight))
        lines.append(row(case, "trained", f"head.{i}.bias", m.bias))
    for name, fq in acts + weights:
        lines.append(row(case, "trained", f"{name}.scale", fq.scale))
        lines.append(row(case, "trained", f"{name}.zero_point", fq.zero_point))
        obs = fq.activation_post_process
        lines.append(row(case, "trained", f"{name}.min_val", obs.min_val))
        lines.append(row(case, "trained", f"{name}.max_val", obs.max_val))


def qat_case(case, model, fuse, shape, classes, qconfig, engine, lines,
             disable_observers=False):
    torch.backends.quantized.engine = engine
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        lines.append(row(case, "param", name, t))
    torch.manual_seed(1)
    batches = [torch.randn(*shape) for _ in range(STEPS)]
    labels = [torch.randint(0, classes, (shape[0],)) for _ in range(STEPS)]
    test = torch.randn(16, *shape[1:])
    for i, (x, y) in enumerate(zip(batches, labels)):
        lines.append(row(case, "input", f"batch.{i}", x))
        lines.append(row(case, "input", f"labels.{i}", y))
    lines.append(row(case, "input", "test", test))

    wrapped = Quantized(model).train()
    if fuse:
        fuse_modules_qat(wrapped.model, fuse, inplace=True)
    wrapped.qconfig = qconfig
    prepared = prepare_qat(wrapped)
    optimizer = torch.optim.SGD(prepared.parameters(), lr=LR)
    for step, (x, y) in enumerate(zip(batches, labels)):
        if step == STEPS - 1:
            prepared.apply(nniqat.freeze_bn_stats)
        loss = F.cross_entropy(prepared(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if disable_observers:
        prepared.apply(disable_observer)
    trained_rows(case, lines, prepared)
    prepared.eval()
    with torch.no_grad():
        lines.append(row(case, "output", "qat", prepared(test)))
    converted = convert(prepared.eval(), inplace=False)
    # The converted layers' qparams, as convert computed them.
    lines.append(row(case, "qparams", "activation.0.scale",
                     torch.tensor([converted.quant.scale.item()])))
    lines.append(row(case, "qparams", "activation.0.zero_point",
                     torch.tensor([converted.quant.zero_point.item()])))
    layers = [m for m in converted.model.modules()
              if hasattr(m, "weight") and callable(m.weight)]
    for i, m in enumerate(layers):
        lines.append(row(case, "qparams", f"activation.{i + 1}.scale",
                         torch.tensor([m.scale])))
        lines.append(row(case, "qparams", f"activation.{i + 1}.zero_point",
                         torch.tensor([m.zero_point])))
        w = m.weight()
        if w.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
            scale, zp = w.q_per_channel_scales(), w.q_per_channel_zero_points()
        else:
            scale, zp = torch.tensor([w.q_scale()]), torch.tensor([w.q_zero_point()])
        lines.append(row(case, "qparams", f"weight.{i}.scale", scale))
        lines.append(row(case, "qparams", f"weight.{i}.zero_point", zp))
    with torch.no_grad():
        lines.append(row(case, "output", "int8", converted(test)))


def cnn():
    torch.manual_seed(0)
    model = FashionCnn([8, 16], 32, 10, 12)
    trained_looking(model)
    return model


CNN_FUSE = [["features.0", "features.1", "features.2"],
            ["features.4", "features.5", "features.6"],
            ["head.1", "head.2"]]
MLP_FUSE = [["layers.0", "relus.0"], ["layers.1", "relus.1"]]


def mlp():
    torch.manual_seed(0)
    return Mlp([20, 32, 16, 5])


def main():
    torch.set_num_threads(1)
    lines = [
        f"# Generated by tests/reference/make_qat_reference.py with "
        f"PyTorch {torch.__version__}; do not edit.",
        "# <case> <field> <name> <shape> <values...>",
    ]
    qat_case("cnn", cnn(), CNN_FUSE, (8, 1, 12, 12), 10,
             get_default_qat_qconfig("onednn"), "onednn", lines)
    qat_case("cnn_v0", cnn(), CNN_FUSE, (8, 1, 12, 12), 10,
             get_default_qat_qconfig("onednn", version=0), "onednn", lines,
             disable_observers=True)
    qat_case("mlp", mlp(), MLP_FUSE, (8, 20), 5,
             get_default_qat_qconfig("qnnpack"), "qnnpack", lines)
    minmax = QConfig(
        activation=FakeQuantize.with_args(observer=MinMaxObserver, quant_min=0,
                                          quant_max=255, dtype=torch.quint8,
                                          qscheme=torch.per_tensor_affine),
        weight=default_per_channel_weight_fake_quant)
    qat_case("mlp_minmax", mlp(), MLP_FUSE, (8, 20), 5, minmax, "onednn", lines)
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
