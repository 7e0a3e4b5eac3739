#!/usr/bin/env python3
"""Writes tests/reference/lr_schedules.txt: learning-rate schedules and
optimizer updates computed by Python PyTorch, for the C++ parity tests in
tests/optim/.

Run with a Python that has PyTorch (1.13 or later):

    /usr/bin/python3 tests/reference/make_lr_reference.py

Format, one record a line (lines starting with '#' are comments):

    <case> <field> <index> <value> <value> ...

Schedules: field `lr` (or `momentum`) with index = param group, and one value
per scheduler step (the first is the value right after construction, then one
after each of the STEPS steps); plateau cases also have a `metric 0` line, the
values passed to steps 1..STEPS. Optimizers: `optim_init` holds the shared
inputs; each `optim_<name>` case holds `weight`/`bias` after optimizer step
index (1-based), flattened row-major.
"""

import math
import os
import sys

import torch
from torch.optim import lr_scheduler as sched
from torch.optim.swa_utils import SWALR

STEPS = 40
BASE_LRS = [0.1, 0.05, 0.01]


def make_optimizer(kind):
    params = [torch.zeros(1, requires_grad=True) for _ in BASE_LRS]
    groups = [{"params": [p], "lr": lr} for p, lr in zip(params, BASE_LRS)]
    if kind == "sgd":
        return torch.optim.SGD(groups, lr=BASE_LRS[0], momentum=0.9)
    if kind == "adam":
        return torch.optim.Adam(groups, lr=BASE_LRS[0], betas=(0.9, 0.999))
    if kind == "adamw":
        return torch.optim.AdamW(groups, lr=BASE_LRS[0], betas=(0.9, 0.999))
    raise ValueError(kind)


def momentum_of(group):
    return group["betas"][0] if "betas" in group else group["momentum"]


def fmt(values):
    # 9 significant digits: exact for float32, and 5e-9 relative for the
    # double learning rates, far below the tests' 1e-6 tolerance.
    return " ".join(f"{float(v):.9g}" for v in values)


def run_schedule(out, name, kind, build, metrics=None, momentum=False):
    optimizer = make_optimizer(kind)
    scheduler = build(optimizer)

    groups = optimizer.param_groups
    lrs = [[g["lr"]] for g in groups]
    momentums = [[momentum_of(g)] for g in groups]
    for step in range(1, STEPS + 1):
        optimizer.step()
        if metrics is None:
            scheduler.step()
        else:
            scheduler.step(metrics[step - 1])
        for i, g in enumerate(groups):
            lrs[i].append(g["lr"])
            momentums[i].append(momentum_of(g))
    for i in range(len(groups)):
        out.append(f"{name} lr {i} {fmt(lrs[i])}")
    if momentum:
        for i in range(len(groups)):
            out.append(f"{name} momentum {i} {fmt(momentums[i])}")
    if metrics is not None:
        out.append(f"{name} metric 0 {fmt(metrics[:STEPS])}")


def warmup(optimizer, start_factor, steps, inner):
    # Mirrors hotloop::optim::LinearWarmup: LinearLR first, then the wrapped
    # schedule from its step 0. `inner` is built after LinearLR, as
    # SequentialLR expects.
    linear = sched.LinearLR(
        optimizer, start_factor=start_factor, end_factor=1.0,
        total_iters=steps)
    return sched.SequentialLR(
        optimizer, [linear, inner(optimizer)], milestones=[steps])


def sequential(optimizer, builders, milestones):
    # The schedules built in order, then SequentialLR over them.
    schedules = [build(optimizer) for build in builders]
    return sched.SequentialLR(optimizer, schedules, milestones=milestones)


def chained(optimizer, builders):
    # The schedules built in order (each constructor's first step on the
    # rate the ones before left), then ChainedScheduler over them.
    return sched.ChainedScheduler([build(optimizer) for build in builders])


def loss_curve(step):
    # Falls, then stalls with small wiggles, so plateau schedules reduce.
    return 1.0 / (1.0 + 0.15 * min(step, 15)) + 0.01 * math.sin(1.7 * step)


def schedules(out):
    run_schedule(out, "step", "sgd",
                 lambda o: sched.StepLR(o, step_size=7, gamma=0.5))
    run_schedule(out, "multistep", "sgd",
                 lambda o: sched.MultiStepLR(o, [8, 20, 33], gamma=0.3))
    run_schedule(out, "exponential", "sgd",
                 lambda o: sched.ExponentialLR(o, gamma=0.93))
    run_schedule(out, "cosine", "sgd",
                 lambda o: sched.CosineAnnealingLR(o, T_max=15, eta_min=1e-3))
    run_schedule(out, "cosine_long", "sgd",
                 lambda o: sched.CosineAnnealingLR(o, T_max=40))
    run_schedule(out, "cosine_restarts", "sgd",
                 lambda o: sched.CosineAnnealingWarmRestarts(
                     o, T_0=5, T_mult=2, eta_min=1e-4))
    run_schedule(out, "cosine_restarts_mult1", "sgd",
                 lambda o: sched.CosineAnnealingWarmRestarts(o, T_0=7))
    run_schedule(out, "onecycle_cos", "sgd",
                 lambda o: sched.OneCycleLR(
                     o, max_lr=[0.1, 0.05, 0.01], total_steps=41),
                 momentum=True)
    run_schedule(out, "onecycle_linear_three_phase", "adam",
                 lambda o: sched.OneCycleLR(
                     o, max_lr=[0.2, 0.02, 0.002], total_steps=41,
                     pct_start=0.25, anneal_strategy="linear", div_factor=10.0,
                     final_div_factor=100.0, three_phase=True,
                     base_momentum=0.8, max_momentum=0.9),
                 momentum=True)
    run_schedule(out, "onecycle_no_momentum", "adamw",
                 lambda o: sched.OneCycleLR(
                     o, max_lr=0.3, total_steps=50, pct_start=0.4,
                     cycle_momentum=False),
                 momentum=True)
    run_schedule(out, "polynomial", "sgd",
                 lambda o: sched.PolynomialLR(o, total_iters=30, power=2.0))
    run_schedule(out, "polynomial_linear", "sgd",
                 lambda o: sched.PolynomialLR(o, total_iters=25, power=1.0))
    run_schedule(out, "warmup_cosine", "sgd",
                 lambda o: warmup(o, 0.1, 10,
                                  lambda o: sched.CosineAnnealingLR(o, 30)))
    run_schedule(out, "warmup_step", "sgd",
                 lambda o: warmup(o, 0.25, 5,
                                  lambda o: sched.StepLR(o, 10, 0.5)))
    run_schedule(out, "warmup_exponential", "sgd",
                 lambda o: warmup(o, 0.1, 3,
                                  lambda o: sched.ExponentialLR(o, 0.9)))
    run_schedule(out, "warmup_restarts", "sgd",
                 lambda o: warmup(o, 0.5, 8,
                                  lambda o: sched.CosineAnnealingWarmRestarts(
                                      o, T_0=6, T_mult=2)))
    run_schedule(out, "warmup_onecycle", "sgd",
                 lambda o: warmup(o, 1.0 / 3, 5,
                                  lambda o: sched.OneCycleLR(
                                      o, max_lr=[0.4, 0.2, 0.1],
                                      total_steps=36)),
                 momentum=True)
    run_schedule(out, "constant", "sgd",
                 lambda o: sched.ConstantLR(o, factor=0.4, total_iters=6))
    run_schedule(out, "constant_defaults", "sgd",
                 lambda o: sched.ConstantLR(o))
    run_schedule(out, "linear", "sgd",
                 lambda o: sched.LinearLR(
                     o, start_factor=0.2, end_factor=0.9, total_iters=13))
    run_schedule(out, "linear_down", "sgd",
                 lambda o: sched.LinearLR(
                     o, start_factor=1.0, end_factor=0.05, total_iters=30))
    run_schedule(out, "lambda", "sgd",
                 lambda o: sched.LambdaLR(o, lambda e: 0.95 ** e * (1 + e % 4)))
    run_schedule(out, "lambda_per_group", "adam",
                 lambda o: sched.LambdaLR(o, [lambda e: 1 / (1 + e),
                                              lambda e: 0.9 ** e,
                                              lambda e: 1 + 0.1 * e]))
    run_schedule(out, "multiplicative", "sgd",
                 lambda o: sched.MultiplicativeLR(
                     o, lambda e: 0.9 if e % 3 else 1.05))
    run_schedule(out, "cyclic_triangular", "sgd",
                 lambda o: sched.CyclicLR(
                     o, base_lr=[0.01, 0.005, 0.001], max_lr=[0.1, 0.05, 0.01],
                     step_size_up=4, step_size_down=6),
                 momentum=True)
    run_schedule(out, "cyclic_triangular2", "sgd",
                 lambda o: sched.CyclicLR(
                     o, base_lr=0.001, max_lr=0.1, step_size_up=5,
                     mode="triangular2", base_momentum=0.85,
                     max_momentum=0.95),
                 momentum=True)
    run_schedule(out, "cyclic_exp_range", "adam",
                 lambda o: sched.CyclicLR(
                     o, base_lr=0.002, max_lr=0.05, step_size_up=3,
                     step_size_down=7, mode="exp_range", gamma=0.97,
                     cycle_momentum=False),
                 momentum=True)
    run_schedule(out, "swalr_cos", "sgd",
                 lambda o: SWALR(o, swa_lr=0.02, anneal_epochs=10))
    run_schedule(out, "swalr_linear_per_group", "adam",
                 lambda o: SWALR(o, swa_lr=[0.02, 0.01, 0.005],
                                 anneal_epochs=7, anneal_strategy="linear"))
    run_schedule(out, "swalr_at_once", "sgd",
                 lambda o: SWALR(o, swa_lr=0.03, anneal_epochs=0))
    losses = [loss_curve(step) for step in range(STEPS)]
    run_schedule(out, "plateau_min_rel", "sgd",
                 lambda o: sched.ReduceLROnPlateau(
                     o, mode="min", factor=0.5, patience=2, threshold=0.01,
                     threshold_mode="rel", cooldown=1, min_lr=0.004),
                 metrics=losses)
    run_schedule(out, "plateau_max_abs", "sgd",
                 lambda o: sched.ReduceLROnPlateau(
                     o, mode="max", factor=0.3, patience=1, threshold=0.005,
                     threshold_mode="abs", cooldown=0, min_lr=0.0),
                 metrics=[1.0 - v for v in losses])
    # SequentialLR: each schedule built on the optimizer in order, as
    # hotloop::optim::SequentialLR builds them from their factories.
    run_schedule(out, "sequential_constant_exponential", "sgd",
                 lambda o: sequential(o, [
                     lambda o: sched.ConstantLR(o, factor=0.5, total_iters=4),
                     lambda o: sched.ExponentialLR(o, gamma=0.9)], [3]))
    run_schedule(out, "sequential_three", "sgd",
                 lambda o: sequential(o, [
                     lambda o: sched.LinearLR(o, start_factor=0.2,
                                              end_factor=1.0, total_iters=5),
                     lambda o: sched.CosineAnnealingLR(o, T_max=20,
                                                       eta_min=1e-3),
                     lambda o: sched.MultiStepLR(o, [3, 9], gamma=0.5)],
                     [5, 25]))
    run_schedule(out, "sequential_onecycle_first", "sgd",
                 lambda o: sequential(o, [
                     lambda o: sched.OneCycleLR(o, max_lr=[0.2, 0.1, 0.05],
                                                total_steps=30),
                     lambda o: sched.StepLR(o, step_size=4, gamma=0.5)],
                     [20]),
                 momentum=True)
    run_schedule(out, "sequential_cyclic_then_restarts", "sgd",
                 lambda o: sequential(o, [
                     lambda o: sched.CyclicLR(o, base_lr=0.01, max_lr=0.1,
                                              step_size_up=4),
                     lambda o: sched.CosineAnnealingWarmRestarts(o, T_0=5)],
                     [12]),
                 momentum=True)
    run_schedule(out, "sequential_step_then_cyclic", "adam",
                 lambda o: sequential(o, [
                     lambda o: sched.StepLR(o, step_size=3, gamma=0.7),
                     lambda o: sched.CyclicLR(o, base_lr=0.002, max_lr=0.02,
                                              step_size_up=5,
                                              cycle_momentum=False)],
                     [7]),
                 momentum=True)
    run_schedule(out, "sequential_step_then_cyclic_momentum", "sgd",
                 lambda o: sequential(o, [
                     lambda o: sched.StepLR(o, step_size=3, gamma=0.7),
                     lambda o: sched.CyclicLR(o, base_lr=0.002, max_lr=0.02,
                                              step_size_up=5,
                                              base_momentum=0.7)],
                     [7]),
                 momentum=True)
    run_schedule(out, "sequential_cosine_then_swalr", "sgd",
                 lambda o: sequential(o, [
                     lambda o: sched.CosineAnnealingLR(o, T_max=30),
                     lambda o: SWALR(o, swa_lr=0.02, anneal_epochs=5)],
                     [20]))
    run_schedule(out, "sequential_step_then_multiplicative", "sgd",
                 lambda o: sequential(o, [
                     lambda o: sched.StepLR(o, step_size=4, gamma=0.5),
                     lambda o: sched.MultiplicativeLR(o, lambda e: 0.95),
                     lambda o: sched.LambdaLR(o, lambda e: 1.0 / (1 + e))],
                     [10, 30]))
    run_schedule(out, "chained_constant_exponential", "sgd",
                 lambda o: chained(o, [
                     lambda o: sched.ConstantLR(o, factor=0.1, total_iters=2),
                     lambda o: sched.ExponentialLR(o, gamma=0.9)]))
    run_schedule(out, "chained_linear_cosine", "sgd",
                 lambda o: chained(o, [
                     lambda o: sched.LinearLR(o, start_factor=0.25,
                                              end_factor=1.0, total_iters=6),
                     lambda o: sched.CosineAnnealingLR(o, T_max=10,
                                                       eta_min=0.001)]))
    run_schedule(out, "chained_step_multistep_polynomial", "sgd",
                 lambda o: chained(o, [
                     lambda o: sched.StepLR(o, step_size=5, gamma=0.8),
                     lambda o: sched.MultiStepLR(o, [7, 15], gamma=0.5),
                     lambda o: sched.PolynomialLR(o, total_iters=20,
                                                  power=1.5)]))
    run_schedule(out, "chained_cyclic_multiplicative", "sgd",
                 lambda o: chained(o, [
                     lambda o: sched.CyclicLR(o, base_lr=0.01, max_lr=0.1,
                                              step_size_up=4),
                     lambda o: sched.MultiplicativeLR(o, lambda e: 0.97)]),
                 momentum=True)
    run_schedule(out, "chained_onecycle_constant", "adam",
                 lambda o: chained(o, [
                     lambda o: sched.OneCycleLR(o, max_lr=[0.2, 0.1, 0.05],
                                                total_steps=41),
                     lambda o: sched.ConstantLR(o, factor=0.5,
                                                total_iters=10)]),
                 momentum=True)
    run_schedule(out, "chained_exponential_swalr", "sgd",
                 lambda o: chained(o, [
                     lambda o: sched.ExponentialLR(o, gamma=0.95),
                     lambda o: SWALR(o, swa_lr=0.01, anneal_epochs=8)]))
    run_schedule(out, "chained_cyclic_from_zero_step", "sgd",
                 lambda o: chained(o, [
                     lambda o: sched.CyclicLR(o, base_lr=0.0, max_lr=0.1,
                                              step_size_up=4),
                     lambda o: sched.StepLR(o, step_size=2, gamma=0.5)]),
                 momentum=True)
    run_schedule(out, "chained_exponential_swalr_at_once", "sgd",
                 lambda o: chained(o, [
                     lambda o: sched.ExponentialLR(o, gamma=0.9),
                     lambda o: SWALR(o, swa_lr=0.05, anneal_epochs=0)]))
    run_schedule(out, "chained_lambda_step", "sgd",
                 lambda o: chained(o, [
                     lambda o: sched.LambdaLR(o, lambda e: 1.0 / (1 + e)),
                     lambda o: sched.StepLR(o, step_size=3, gamma=0.5)]))


OPT_STEPS = 3
INIT_WEIGHT = [[0.5, -0.3, 0.8], [-0.6, 0.1, 0.4]]
INIT_BIAS = [0.05, -0.02]
INPUT = [[1.0, 2.0, -1.0], [0.5, -0.5, 0.25], [-1.5, 0.3, 2.0],
         [0.2, 0.9, -0.7]]
TARGET = [[0.3, -1.0], [1.2, 0.4], [-0.5, 0.8], [0.0, 0.6]]

# name -> (constructor, weight decay of the decayed group)
OPTIMIZERS = {
    "sgd": (lambda g: torch.optim.SGD(g, lr=0.1, momentum=0.9), 0.01),
    "sgd_nesterov": (lambda g: torch.optim.SGD(
        g, lr=0.1, momentum=0.8, nesterov=True), 0.05),
    "adam": (lambda g: torch.optim.Adam(
        g, lr=0.01, betas=(0.8, 0.99), eps=1e-7), 0.01),
    "adamw": (lambda g: torch.optim.AdamW(
        g, lr=0.01, betas=(0.9, 0.999), eps=1e-8), 0.1),
    "rmsprop": (lambda g: torch.optim.RMSprop(
        g, lr=0.01, momentum=0.9, eps=1e-8), 0.01),
    "adagrad": (lambda g: torch.optim.Adagrad(g, lr=0.1, eps=1e-8), 0.01),
}


def optimizers(out):
    x = torch.tensor(INPUT)
    y = torch.tensor(TARGET)
    out.append(f"optim_init weight 0 {fmt(sum(INIT_WEIGHT, []))}")
    out.append(f"optim_init bias 0 {fmt(INIT_BIAS)}")
    out.append(f"optim_init input 0 {fmt(sum(INPUT, []))}")
    out.append(f"optim_init target 0 {fmt(sum(TARGET, []))}")
    for name, (build, weight_decay) in OPTIMIZERS.items():
        weight = torch.tensor(INIT_WEIGHT, requires_grad=True)
        bias = torch.tensor(INIT_BIAS, requires_grad=True)
        # The factory's split: weights decay, biases do not.
        optimizer = build([
            {"params": [weight], "weight_decay": weight_decay},
            {"params": [bias], "weight_decay": 0.0},
        ])
        for step in range(1, OPT_STEPS + 1):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(x @ weight.t() + bias, y)
            loss.backward()
            optimizer.step()
            out.append(
                f"optim_{name} weight {step} {fmt(weight.detach().flatten())}")
            out.append(
                f"optim_{name} bias {step} {fmt(bias.detach().flatten())}")


def main():
    torch.set_default_dtype(torch.float32)
    out = [
        "# Generated by tests/reference/make_lr_reference.py with PyTorch "
        + torch.__version__ + "; do not edit.",
        "# <case> <field> <index> <values...>",
    ]
    schedules(out)
    optimizers(out)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "lr_schedules.txt")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    print(f"wrote {len(out)} lines to {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
