#!/usr/bin/env python3
"""PyTorch's DataLoader on Fashion-MNIST with torchvision's augmentation.

The Python row of bench/dataloader_bench.cpp, which runs this script as a
subprocess with --json. The dataset is written the way torchvision's
FashionMNIST is: uint8 tensors in memory, and per sample
`transform(Image.fromarray(img.numpy(), mode="L"))`, `int(target)`.

Usage:
  /usr/bin/python3 bench/python_dataloader.py [--root DIR] [--epochs N]
      [--workers 0,2] [--json]

Each worker count runs one untimed warm-up epoch, then --epochs timed epochs;
the figure is the median epoch. With --json the only output on stdout is one
JSON object; failures print {"error": "..."} and exit with status 2.
"""

import argparse
import gzip
import json
import os
import platform
import statistics
import sys
import time

MEAN = 0.2860
STD = 0.3530
BATCH_SIZE = 256


def read_idx(path):
    """An IDX file (gzip or raw) as a numpy uint8 array of its shape."""
    import numpy as np

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path}: not a uint8 IDX file")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    offset = 4 + 4 * ndim
    count = 1
    for d in dims:
        count *= d
    if len(data) - offset != count:
        raise ValueError(f"{path}: header says {dims}, file has "
                         f"{len(data) - offset} bytes of data")
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(dims)


def find_file(root, stem):
    for name in (stem + ".gz", stem):
        path = os.path.join(root, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"{os.path.join(root, stem)}[.gz] not found "
                            "(pass --root DIR with the Fashion-MNIST IDX files)")


def make_dataset(root):
    import torch
    from PIL import Image
    from torchvision import transforms

    images = torch.from_numpy(
        read_idx(find_file(root, "train-images-idx3-ubyte")).copy())
    labels = torch.from_numpy(
        read_idx(find_file(root, "train-labels-idx1-ubyte")).copy()).long()

    class FashionMNISTTrain(torch.utils.data.Dataset):
        """torchvision.datasets.FashionMNIST's __getitem__, without the
        download and folder logic."""

        def __init__(self, data, targets, transform):
            self.data = data
            self.targets = targets
            self.transform = transform

        def __len__(self):
            return len(self.data)

        def __getitem__(self, index):
            img, target = self.data[index], int(self.targets[index])
            img = Image.fromarray(img.numpy(), mode="L")
            return self.transform(img), target

    transform = transforms.Compose([
        transforms.RandomCrop(28, padding=2),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize((MEAN,), (STD,)),
    ])
    return FashionMNISTTrain(images, labels, transform)


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
        dataset, batch_size=BATCH_SIZE, shuffle=True, num_workers=workers)
    inputs, targets = next(iter(loader))
    if (tuple(inputs.shape) != (BATCH_SIZE, 1, 28, 28) or
            inputs.dtype != torch.float32 or targets.dtype != torch.int64):
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
    parser.add_argument("--root", default="/usr/share/datasets/fashion-mnist",
                        help="folder with the Fashion-MNIST IDX files")
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
        try:
            import torch
            import torchvision
            import PIL
        except ImportError as e:
            raise RuntimeError(f"{sys.executable} cannot import {e.name} "
                               "(use /usr/bin/python3, Debian's PyTorch)")
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
        "warmup": "1 epoch",
        "results": results,
    }
    if args.json:
        print(json.dumps(report))
        return
    print(f"Python {report['python']}, torch {report['torch']}, torchvision "
          f"{report['torchvision']}, Pillow {report['pillow']}; "
          "1 warm-up epoch, median of timed epochs")
    for r in results:
        print(f"workers={r['workers']}: {r['samples_per_s']:,.0f} samples/s, "
              f"{r['epoch_s']:.3f} s/epoch")


if __name__ == "__main__":
    main()
