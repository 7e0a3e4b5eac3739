#!/usr/bin/env python3
"""PyTorch's DataLoader over torchvision's ImageFolder of JPEGs.

The Python rows of bench/jpeg_loader_bench.cpp, which runs this script as a
subprocess with --json. The recipe is torchvision's ImageNet training
pipeline at 224x224: `datasets.ImageFolder(root, transform)` (PIL decodes
each file, `convert("RGB")`) with
`Compose([RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(),
Normalize(ImageNet mean, std)])`, `DataLoader(batch_size=64, shuffle=True,
num_workers=W, persistent_workers=W > 0)`; each batch is touched (one
element read), as the C++ rows do.

Threads: torch.set_num_threads(1) in this process, so that with 0 workers
one thread does all the work, as in hotloop's rows (which run with one
intra-op thread, so that their thread count is the loader's); DataLoader
worker processes already run with one torch thread each (PyTorch sets that
in every worker), so the worker count is the number of processes doing
the work.

Usage:
  /usr/bin/python3 bench/python_image_folder.py --root DIR [--epochs N]
      [--workers 0,2] [--json]

The folder comes from bench/make_jpeg_folder.py. Each worker count runs
one untimed warm-up epoch, then --epochs timed epochs; the figure is the
median epoch. With --json the only output on stdout is one JSON object
({"python": ..., "results": [{"workers": W, "samples": N, "epoch_s": S,
"samples_per_s": R, "epochs": E}, ...]}, the shape python_dataloader.py
prints); failures print {"error": "..."} and exit with status 2.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

IMAGE_SIZE = 224
BATCH_SIZE = 64
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
DEFAULT_ROOT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "build", "bench-data", "fashion-jpeg")


def make_dataset(root):
    from torchvision import datasets, transforms

    transform = transforms.Compose([
        transforms.RandomResizedCrop(IMAGE_SIZE),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(MEAN, STD),
    ])
    return datasets.ImageFolder(root, transform=transform)


def run_epoch(loader):
    samples = 0
    sink = 0.0
    start = time.perf_counter()
    for inputs, targets in loader:
        # Touch each batch minimally, as the C++ rows do.
        sink += float(inputs[0, 0, 0, 0]) + int(targets[0])
        samples += int(targets.shape[0])
    return time.perf_counter() - start, samples


def measure(dataset, workers, epochs):
    import torch

    loader = torch.utils.data.DataLoader(
        dataset, batch_size=BATCH_SIZE, shuffle=True, num_workers=workers,
        persistent_workers=workers > 0)
    inputs, targets = next(iter(loader))
    expected = (min(BATCH_SIZE, len(dataset)), 3, IMAGE_SIZE, IMAGE_SIZE)
    if (tuple(inputs.shape) != expected or inputs.dtype != torch.float32 or
            targets.dtype != torch.int64):
        raise RuntimeError(f"unexpected batch {tuple(inputs.shape)} "
                           f"{inputs.dtype}, targets {targets.dtype}")
    run_epoch(loader)  # warm-up epoch
    times = []
    samples = 0
    for _ in range(epochs):
        seconds, n = run_epoch(loader)
        if n != len(dataset):
            raise RuntimeError(f"an epoch gave {n} samples, expected "
                               f"{len(dataset)}")
        times.append(seconds)
        samples = n
    del loader  # ends persistent workers before the next row starts
    epoch_s = statistics.median(times)
    return {
        "workers": workers,
        "samples": samples,
        "epoch_s": epoch_s,
        "samples_per_s": samples / epoch_s,
        "epochs": epochs,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=DEFAULT_ROOT,
                        help="ImageFolder root: <root>/<class>/<image>.jpg "
                             f"(default {DEFAULT_ROOT})")
    parser.add_argument("--epochs", type=int, default=1,
                        help="timed epochs per worker count (default 1)")
    parser.add_argument("--workers", default="0,2",
                        help="comma-separated worker counts (default 0,2)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object and nothing else")
    args = parser.parse_args()

    try:
        if args.epochs < 1:
            raise ValueError(f"--epochs must be >= 1, got {args.epochs}")
        workers = [int(w) for w in args.workers.split(",") if w]
        if not os.path.isdir(args.root):
            raise FileNotFoundError(
                f"{args.root}: no such folder (make it with "
                "bench/make_jpeg_folder.py)")
        try:
            import torch
            import torchvision
            import PIL
        except ImportError as e:
            raise RuntimeError(f"{sys.executable} cannot import {e.name} "
                               "(use /usr/bin/python3, Debian's PyTorch)")
        torch.set_num_threads(1)  # see the module docstring
        dataset = make_dataset(args.root)
        results = [measure(dataset, w, args.epochs) for w in workers]
    except Exception as e:  # reported to the C++ benchmark as the skip reason
        if args.json:
            print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        else:
            print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(2)

    report = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "pillow": PIL.__version__,
        "root": os.path.abspath(args.root),
        "images": len(dataset),
        "classes": len(dataset.classes),
        "batch_size": BATCH_SIZE,
        "torch_threads": 1,
        "warmup": "1 epoch",
        "results": results,
    }
    if args.json:
        print(json.dumps(report))
        return
    print(f"Python {report['python']}, torch {report['torch']}, torchvision "
          f"{report['torchvision']}, Pillow {report['pillow']}; "
          f"{report['images']} images in {report['classes']} classes; "
          "1 warm-up epoch, median of timed epochs")
    for r in results:
        print(f"workers={r['workers']}: {r['samples_per_s']:,.0f} samples/s, "
              f"{r['epoch_s']:.3f} s/epoch")


if __name__ == "__main__":
    main()
