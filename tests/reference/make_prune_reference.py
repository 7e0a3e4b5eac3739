#!/usr/bin/env python3
"""Writes tests/reference/prune.txt: the masks torch.nn.utils.prune gives,
for tests/compress/prune_test.cpp to compare with hotloop::compress's
pruning, mask for mask.

Run with Debian's python3-torch (1.13) or any later PyTorch:

    /usr/bin/python3 tests/reference/make_prune_reference.py

Format (as init.txt): <case> <field> <name> <shape> <values...>.
Each case builds a Conv2d(4, 6, 3) named `conv` and a Linear(10, 7) named
`linear` after torch.manual_seed(0) and records their parameters (field
`param`, 9 significant digits: exact for float32), so the C++ test starts
from the very same values. Cases that draw random numbers seed the default
generator with the case's seed just before pruning. Then the case's calls
run in order and every mask is recorded (field `mask`, name
`<module>.<parameter>_mask`), and the pruned tensor (field `pruned`).
"""

import math
import os

import torch
import torch.nn as nn
import torch.nn.utils.prune as prune

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "prune.txt")


def modules(ties=False):
    torch.manual_seed(0)
    net = nn.ModuleDict({"conv": nn.Conv2d(4, 6, 3), "linear": nn.Linear(10, 7)})
    if ties:
        # Many equal magnitudes, equal channel norms: how topk breaks ties
        # decides which entries go.
        with torch.no_grad():
            for p in net.parameters():
                p.copy_(torch.round(p * 8) / 8)
            net["conv"].weight[1].copy_(net["conv"].weight[4])
            net["conv"].weight[3].copy_(-net["conv"].weight[4])
            net["linear"].weight[:, 2].copy_(net["linear"].weight[:, 5])
    return net


def m(net, name):
    return net[name]


# Each case: (seed or None, ties, [calls]); a call is a function of the net.
CASES = {
    "l1_fraction": (None, False, [
        lambda n: prune.l1_unstructured(n["linear"], "weight", amount=0.3)]),
    # 0.75 * 6 = 4.5 rounds to 4, 0.25 * 6 = 1.5 to 2: half to even.
    "l1_half_to_even_down": (None, False, [
        lambda n: prune.l1_unstructured(n["conv"], "bias", amount=0.75)]),
    "l1_half_to_even_up": (None, False, [
        lambda n: prune.l1_unstructured(n["conv"], "bias", amount=0.25)]),
    "l1_count": (None, False, [
        lambda n: prune.l1_unstructured(n["linear"], "weight", amount=5)]),
    "l1_all": (None, False, [
        lambda n: prune.l1_unstructured(n["linear"], "weight", amount=1.0)]),
    "l1_twice": (None, False, [
        lambda n: prune.l1_unstructured(n["linear"], "weight", amount=0.5),
        lambda n: prune.l1_unstructured(n["linear"], "weight", amount=0.5)]),
    "l1_importance": (None, False, [
        lambda n: prune.l1_unstructured(
            n["linear"], "weight", amount=0.4,
            importance_scores=torch.arange(70, dtype=torch.float32)
            .remainder(13).view(7, 10))]),
    "random_unstructured": (1, False, [
        lambda n: prune.random_unstructured(n["conv"], "weight", amount=0.4),
        lambda n: prune.random_unstructured(n["conv"], "weight", amount=0.4)]),
    "ln_l2_dim0": (None, False, [
        lambda n: prune.ln_structured(n["conv"], "weight", amount=0.5, n=2, dim=0)]),
    "ln_l1_dim1_count": (None, False, [
        lambda n: prune.ln_structured(n["conv"], "weight", amount=1, n=1, dim=1)]),
    "ln_inf_last_dim": (None, False, [
        lambda n: prune.ln_structured(
            n["linear"], "weight", amount=0.3, n=float("inf"), dim=-1)]),
    "ln_neg_inf_dim0": (None, False, [
        lambda n: prune.ln_structured(
            n["conv"], "weight", amount=0.34, n=float("-inf"), dim=0)]),
    "ln_twice": (None, False, [
        lambda n: prune.ln_structured(n["conv"], "weight", amount=0.5, n=2, dim=0),
        lambda n: prune.ln_structured(n["conv"], "weight", amount=0.5, n=2, dim=0)]),
    "random_structured": (2, False, [
        lambda n: prune.random_structured(n["conv"], "weight", amount=0.5, dim=0),
        lambda n: prune.random_structured(n["linear"], "weight", amount=3, dim=1)]),
    "mixed": (3, False, [
        lambda n: prune.l1_unstructured(n["conv"], "weight", amount=0.3),
        lambda n: prune.ln_structured(n["conv"], "weight", amount=0.5, n=2, dim=0),
        lambda n: prune.l1_unstructured(n["conv"], "weight", amount=0.2),
        lambda n: prune.random_structured(n["conv"], "weight", amount=1, dim=1),
        lambda n: prune.random_unstructured(n["conv"], "weight", amount=0.1)]),
    "global_l1": (None, False, [
        lambda n: prune.global_unstructured(
            [(n["conv"], "weight"), (n["linear"], "weight"), (n["conv"], "bias")],
            pruning_method=prune.L1Unstructured, amount=0.4),
        lambda n: prune.global_unstructured(
            [(n["conv"], "weight"), (n["linear"], "weight"), (n["conv"], "bias")],
            pruning_method=prune.L1Unstructured, amount=0.3)]),
    "global_after_local": (None, False, [
        lambda n: prune.ln_structured(n["linear"], "weight", amount=2, n=1, dim=0),
        lambda n: prune.global_unstructured(
            [(n["conv"], "weight"), (n["linear"], "weight")],
            pruning_method=prune.L1Unstructured, amount=100)]),
    "global_random": (4, False, [
        lambda n: prune.global_unstructured(
            [(n["conv"], "weight"), (n["linear"], "weight")],
            pruning_method=prune.RandomUnstructured, amount=50)]),
    "ties_l1": (None, True, [
        lambda n: prune.l1_unstructured(n["linear"], "weight", amount=0.5),
        lambda n: prune.l1_unstructured(n["conv"], "weight", amount=0.37)]),
    "ties_ln": (None, True, [
        lambda n: prune.ln_structured(n["conv"], "weight", amount=2, n=1, dim=0),
        lambda n: prune.ln_structured(n["linear"], "weight", amount=0.4, n=2, dim=1)]),
    "ties_global": (None, True, [
        lambda n: prune.global_unstructured(
            [(n["conv"], "weight"), (n["linear"], "weight")],
            pruning_method=prune.L1Unstructured, amount=0.45)]),
    "identity_then_l1": (None, False, [
        lambda n: prune.identity(n["linear"], "bias"),
        lambda n: prune.l1_unstructured(n["linear"], "bias", amount=2)]),
}


def row(case, field, name, t):
    shape = "[" + ",".join(str(d) for d in t.shape) + "]"
    values = " ".join(f"{v:.9g}" for v in t.detach().flatten().tolist())
    return f"{case} {field} {name} {shape} {values}"


def main():
    lines = [
        f"# Generated by tests/reference/make_prune_reference.py with PyTorch "
        f"{torch.__version__}; do not edit.",
        "# <case> <field> <name> <shape> <values...>",
    ]
    for case, (seed, ties, calls) in CASES.items():
        net = modules(ties)
        for name, p in net.named_parameters():
            lines.append(row(case, "param", name, p))
        if seed is not None:
            torch.manual_seed(seed)
        for call in calls:
            call(net)
        for name, b in net.named_buffers():
            lines.append(row(case, "mask", name, b))
        for module_name, module in net.items():
            for tensor in ("weight", "bias"):
                if hasattr(module, tensor + "_mask"):
                    lines.append(row(case, "pruned", module_name + "." + tensor,
                                     getattr(module, tensor)))
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {OUT}: {len(CASES)} cases")


if __name__ == "__main__":
    main()
