#!/usr/bin/env python3
"""The Python rows of bench/ddp: the Fashion-MNIST CNN of
configs/bench/ddp_cnn.yaml trained in plain PyTorch, in one process or with
DistributedDataParallel over Gloo in several, on the CPU.

Same recipe as hotloop's side: conv (no bias) -> BatchNorm -> ReLU ->
max-pool blocks of 32 and 64 channels, Linear(64*7*7, 128) -> ReLU ->
Linear(128, 10); SGD (lr 0.05, momentum 0.9); batch 256 per process; the
training images normalized once, up front, and held as one float tensor
(no augmentation); each batch is one indexing of that tensor with the
batch's sample indices (no per-sample collation: the fastest way to feed
PyTorch from memory), the indices from DistributedSampler (shuffled, seed
0) in the DDP run and from one shuffled permutation in one process.

  python3 bench/python_ddp.py --processes 2 --threads 1 --batches 60
  python3 bench/python_ddp.py --processes 1 --threads 2 --batches 60

Prints one JSON line: processes, threads, samples_per_s (all processes'
training samples over the steady steps: the first --warmup steps of every
process are left out), step_ms (the median step of rank 0), wall_s.
"""

import argparse
import gzip
import json
import os
import socket
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

ROOT = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530


def load_images(root):
    def read(name, offset):
        path = os.path.join(root, name)
        with (gzip.open(path) if path.endswith(".gz") else open(path, "rb")) as f:
            return np.frombuffer(f.read(), np.uint8, offset=offset)

    def first(*names):
        for name in names:
            if os.path.exists(os.path.join(root, name)):
                return name
        sys.exit(f"python_ddp: no {names[0]} in {root}")

    images = read(first("train-images-idx3-ubyte.gz", "train-images-idx3-ubyte"), 16)
    labels = read(first("train-labels-idx1-ubyte.gz", "train-labels-idx1-ubyte"), 8)
    x = torch.from_numpy(images.copy()).view(-1, 1, 28, 28).float().div_(255)
    x = (x - MEAN) / STD
    return x, torch.from_numpy(labels.astype(np.int64))


def cnn():
    layers, channels_in = [], 1
    for channels in (32, 64):
        layers += [nn.Conv2d(channels_in, channels, 3, padding=1, bias=False),
                   nn.BatchNorm2d(channels), nn.ReLU(inplace=True),
                   nn.MaxPool2d(2)]
        channels_in = channels
    layers += [nn.Flatten(), nn.Linear(64 * 7 * 7, 128),
               nn.ReLU(inplace=True), nn.Linear(128, 10)]
    return nn.Sequential(*layers)


def train(rank, args, port, queue):
    torch.set_num_threads(args.threads)
    world = args.processes
    if world > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    images, labels = load_images(args.data_root)
    model = cnn()
    if world > 1:
        model = DistributedDataParallel(model)
        indices = torch.tensor(list(DistributedSampler(
            range(len(labels)), world, rank, shuffle=True, seed=0)))
    else:
        indices = torch.randperm(len(labels),
                                 generator=torch.Generator().manual_seed(0))
    batches = [indices[i:i + args.batch_size]
               for i in range(0, len(indices) - args.batch_size + 1,
                              args.batch_size)]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    steps, times = 0, []
    start = time.perf_counter()
    tick = start
    for batch in batches:
        x, y = images[batch], labels[batch]
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()
        now = time.perf_counter()
        times.append(now - tick)
        tick = now
        steps += 1
        if steps == args.batches:
            break
    steady = times[args.warmup:]
    result = {"samples": len(steady) * args.batch_size, "seconds": sum(steady),
              "step_ms": 1000 * statistics.median(steady),
              "wall_s": time.perf_counter() - start}
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    queue.put((rank, result))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--data-root", default=ROOT)
    args = parser.parse_args()
    if args.batches <= args.warmup:
        sys.exit("python_ddp: --batches must exceed --warmup")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=train, args=(r, args, port, queue))
             for r in range(args.processes)]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=1800) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        if p.exitcode != 0:
            sys.exit(f"python_ddp: a process failed ({p.exitcode})")
    # The processes step together: the slowest one's time is the run's.
    seconds = max(r["seconds"] for r in results.values())
    samples = sum(r["samples"] for r in results.values())
    print(json.dumps({
        "impl": "python", "processes": args.processes,
        "threads": args.threads, "samples_per_s": samples / seconds,
        "step_ms": results[0]["step_ms"],
        "wall_s": max(r["wall_s"] for r in results.values())}))


if __name__ == "__main__":
    main()
