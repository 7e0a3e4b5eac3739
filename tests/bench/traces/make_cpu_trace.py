#!/usr/bin/python3
"""Records a CPU fixture of tests/bench/trace_summary_test.py:
torch.profiler over five training steps of a two-layer network on the CPU,
each step marked "ProfilerStep#N" as bench/python_train.py marks them (a
record_function from the step's start to the next step's start), each
ending with loss.item().

cpu_torch.json with Debian 12's python3-torch (1.13 has no Kineto, so its
profiler writes the legacy trace format, a list of events without
categories), cpu_torch_kineto.json with a torch that has Kineto (Debian
13's 2.6, in scripts/torch2.sh's root: Kineto's layout, events with
categories):
    /usr/bin/python3 tests/bench/traces/make_cpu_trace.py
    echo 'python3 tests/bench/traces/make_cpu_trace.py' | scripts/torch2.sh --shell
"""
import os

import torch
import torch.profiler

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(),
                                torch.nn.Linear(8, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [torch.randn(32, 16) for _ in range(5)]
    with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for n, x in enumerate(batches, start=1):
            with torch.profiler.record_function(f"ProfilerStep#{n}"):
                optimizer.zero_grad(set_to_none=True)
                loss = model(x).pow(2).mean()
                loss.backward()
                optimizer.step()
                loss.item()
    kineto = torch.autograd.kineto_available()
    path = os.path.join(HERE, "cpu_torch_kineto.json" if kineto
                        else "cpu_torch.json")
    prof.export_chrome_trace(path)
    print(f"wrote {path} with torch {torch.__version__} (Kineto: {kineto})")


if __name__ == "__main__":
    main()
