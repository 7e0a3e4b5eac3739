#!/usr/bin/env python3
"""Writes tests/reference/grad_scaler.txt: what PyTorch's GradScaler does on
scripted patterns of finite and inf/NaN gradients, for the C++ parity test
in tests/train/grad_scaler_test.cpp.

    /usr/bin/python3 tests/reference/make_grad_scaler_reference.py [--check]

--check compares with the committed file instead of writing it (run it on a
CUDA machine to confirm a file made elsewhere).

Each case runs PyTorch's own GradScaler class (torch.amp.GradScaler where it
exists, else torch.cuda.amp.GradScaler) over one or two SGD(lr=1)
optimizers, each owning one float32 parameter [2] initialised to 1. Per
iteration every optimizer's gradient is set to 1 ('F'), inf ('I') or NaN
('N'), then scaler.step(optimizer) for each and scaler.update(); the
gradients are never multiplied by the scale, so a step moves a weight by
exactly -1/scale.

The scaler runs on CUDA when there is a GPU. Without one, it runs on the CPU
with ATen's CPU kernels where the build has them (PyTorch >= 2.3); PyTorch
1.13 has `_amp_foreach_non_finite_check_and_unscale_` and
`_amp_update_scale_` for CUDA only, so there the script supplies the two ops
as ATen's CUDA kernels compute them (aten/src/ATen/native/cuda/AmpKernels.cu
and ForeachNonFiniteCheckAndUnscale.cu) and lifts the class's CUDA-only
assertions; everything else - the per-optimizer state machine, when steps
are skipped, inv_scale - is PyTorch's Python class. The header says which was used.

Format, one record a line ('#' starts a comment):

    case <name> <init_scale> <growth_factor> <backoff_factor> <growth_interval> <optimizers>
    pattern <run> <run> ...      iteration kinds, run-length encoded: FI*3 is
                                 three iterations of 'F' for optimizer 0 and
                                 'I' for optimizer 1
    step <i> <scale> <growth_tracker> <stepped per optimizer> <weight per optimizer>

Step lines (0-based iteration i, after its update) are written for every
iteration of short cases and, for long ones, where the scale changes or the
kinds change, and for the last iteration; weights are element 0.
"""

import argparse
import inspect
import math
import os
import sys

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grad_scaler.txt")

CASES = [
    # name, init_scale, growth_factor, backoff_factor, growth_interval,
    # optimizers, pattern runs
    ("rules", 1024.0, 4.0, 0.125, 3, 1,
     [("F", 4), ("I", 1), ("F", 3), ("N", 1), ("I", 1), ("F", 6)]),
    ("float32_rounding", 1.0, 1.5, 0.3, 2, 1,
     [("I", 1), ("F", 2), ("I", 1), ("F", 3), ("N", 2), ("F", 5)]),
    ("float32_ceiling", 2.0 ** 126, 2.0, 0.5, 1, 1, [("F", 3)]),
    ("two_optimizers", 256.0, 2.0, 0.5, 2, 2,
     [("FF", 3), ("FI", 1), ("FF", 2), ("IF", 1), ("NN", 1), ("FF", 4)]),
    # PyTorch's defaults: 2^16, x2 after 2000 finite iterations in a row.
    ("defaults", 65536.0, 2.0, 0.5, 2000, 1,
     [("F", 2003), ("I", 1), ("F", 1999), ("N", 1), ("F", 2001)]),
]

SHORT = 100  # cases up to this many iterations get a line per iteration


def grad_scaler_class():
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        return amp.GradScaler, True
    return torch.cuda.amp.GradScaler, False


def has_kernels(device):
    try:
        scale = torch.ones(1, device=device)
        tracker = torch.zeros(1, dtype=torch.int32, device=device)
        found = torch.zeros(1, device=device)
        torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 2)
        return True
    except (RuntimeError, NotImplementedError):
        return False


def install_cuda_kernel_semantics():
    """ATen's CUDA kernels, for a CPU build that lacks them."""

    def unscale(grads, found_inf, inv_scale):
        inv = np.float32(inv_scale.item())
        for grad in grads:
            if not bool(torch.isfinite(grad).all()):
                found_inf.fill_(1.0)
            # float(float(g) * inv_scale), elementwise
            grad.copy_(torch.from_numpy(grad.numpy().astype(np.float32) * inv))

    def update(scale, tracker, found_inf, growth_factor, backoff_factor,
               growth_interval):
        current = float(scale.item())
        if found_inf.item():
            scale.fill_(float(np.float32(current * backoff_factor)))
            tracker.fill_(0)
        else:
            successful = int(tracker.item()) + 1
            if successful == growth_interval:
                with np.errstate(over="ignore"):
                    grown = np.float32(current * growth_factor)
                if math.isfinite(grown):
                    scale.fill_(float(grown))
                tracker.fill_(0)
            else:
                tracker.fill_(successful)
        return scale

    torch._amp_foreach_non_finite_check_and_unscale_ = unscale
    torch._amp_update_scale_ = update
    # torch.cuda.amp's device replicator asserts a CUDA tensor; it only
    # caches per-device copies, which on one CPU device is the tensor.
    module = sys.modules[grad_scaler_class()[0].__module__]
    if hasattr(module, "_MultiDeviceReplicator"):
        class CpuReplicator(module._MultiDeviceReplicator):
            def __init__(self, master_tensor):
                self.master = master_tensor
                self._per_device_tensors = {}
        module._MultiDeviceReplicator = CpuReplicator


def make_scaler(cls, new_api, device, init, growth, backoff, interval):
    kwargs = dict(init_scale=init, growth_factor=growth,
                  backoff_factor=backoff, growth_interval=interval,
                  enabled=True)
    if new_api and "device" in inspect.signature(cls.__init__).parameters:
        kwargs["device"] = device
    # torch.cuda.amp.GradScaler turns itself off when CUDA is absent; it is
    # built as if CUDA were there (nothing else in it needs CUDA).
    is_available = torch.cuda.is_available
    torch.cuda.is_available = lambda: True
    try:
        scaler = cls(**kwargs)
    finally:
        torch.cuda.is_available = is_available
    assert scaler.is_enabled()
    return scaler


def expand(runs):
    kinds = []
    for kind, count in runs:
        kinds.extend([kind] * count)
    return kinds


def run_case(cls, new_api, device, case):
    name, init, growth, backoff, interval, n_opt, runs = case
    scaler = make_scaler(cls, new_api, device, init, growth, backoff, interval)
    params = [torch.ones(2, device=device, requires_grad=True)
              for _ in range(n_opt)]
    optimizers = [torch.optim.SGD([p], lr=1.0) for p in params]
    calls = [0] * n_opt
    for index, opt in enumerate(optimizers):
        def counted_step(*args, _step=opt.step, _index=index, **kwargs):
            calls[_index] += 1
            return _step(*args, **kwargs)
        opt.step = counted_step
    value = {"F": 1.0, "I": math.inf, "N": math.nan}
    # What the first scale() does (1.13's asserts a CUDA tensor).
    scaler._lazy_init_scale_growth_tracker(torch.device(device))
    kinds = expand(runs)
    lines = ["case %s %r %r %r %d %d" % (name, init, growth, backoff,
                                          interval, n_opt),
             "pattern " + " ".join("%s*%d" % run for run in runs)]
    previous_scale = None
    for i, kind in enumerate(kinds):
        stepped = []
        for index, (p, opt, k) in enumerate(zip(params, optimizers, kind)):
            p.grad = torch.full_like(p, value[k])
            before = calls[index]
            scaler.step(opt)
            stepped.append(calls[index] - before)
        scaler.update()
        scale = float(scaler.get_scale())
        tracker = int(scaler._get_growth_tracker())
        changed = (i == 0 or kind != kinds[i - 1] or scale != previous_scale)
        if len(kinds) <= SHORT or changed or i + 1 == len(kinds):
            weights = [float(p.detach()[0].item()) for p in params]
            lines.append("step %d %r %d %s %s" % (
                i, scale, tracker, " ".join(map(str, stepped)),
                " ".join(repr(w) for w in weights)))
        previous_scale = scale
    return lines


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    cls, new_api = grad_scaler_class()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    kernels = "ATen kernels" if has_kernels(device) else (
        "ATen's CUDA kernel rules in Python (this build has no CPU kernels)")
    if not has_kernels(device):
        install_cuda_kernel_semantics()
    lines = ["# %s.%s, torch %s on %s, %s" % (cls.__module__, cls.__name__,
                                              torch.__version__, device,
                                              kernels)]
    for case in CASES:
        lines.extend(run_case(cls, new_api, device, case))
    text = "\n".join(lines) + "\n"
    if args.check:
        with open(OUT) as f:
            committed = [l for l in f.read().splitlines()
                         if not l.startswith("#")]
        fresh = [l for l in text.splitlines() if not l.startswith("#")]
        if committed != fresh:
            print("grad_scaler.txt differs from this PyTorch's results",
                  file=sys.stderr)
            return 1
        print("grad_scaler.txt matches", lines[0][2:])
        return 0
    with open(OUT, "w") as f:
        f.write(text)
    print("wrote", OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
