#!/usr/bin/env python3
"""Prints the reference numbers embedded in tests/log/tensorboard_test.cpp,
computed by Python PyTorch, torchvision and numpy.

Run with a Python that has PyTorch and torchvision (Debian's 1.13 / 0.14):

    /usr/bin/python3 tests/log/make_tensorboard_reference.py

- Histograms: `make_histogram` is taken from the installed
  torch/utils/tensorboard/summary.py itself (extracted with `ast`, because
  importing that module needs the tensorboard package), over the bucket edges
  built as SummaryWriter.__init__ builds `default_bins`. That is exactly what
  `add_histogram(tag, values, bins="tensorflow")` writes.
- Images: torch.utils.tensorboard.summary.image's float conversion,
  `(x.astype(float32) * 255).clip(0, 255).astype(uint8)`.
- Grids: torchvision.utils.make_grid.
- CRC: a bit-at-a-time CRC-32C, independent of the table-driven one in C++.
"""

import ast
import inspect
import os

import numpy as np
import torch
import torch.utils
import torchvision.utils


class _NumpyShim:
    """numpy, except that `greater(a, b, dtype=int32)` works: torch 1.13's
    make_histogram passes that, which numpy 1.24 rejects; later torch calls
    `np.greater(counts, 0)`, the same 0/1 values."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def greater(a, b, dtype=None):
        result = np.greater(a, b)
        return result if dtype is None else result.astype(dtype)


def load_make_histogram():
    path = os.path.join(
        os.path.dirname(torch.utils.__file__), "tensorboard", "summary.py"
    )
    tree = ast.parse(open(path).read())
    func = next(
        n for n in tree.body
        if isinstance(n, ast.FunctionDef) and n.name == "make_histogram"
    )
    namespace = {"np": _NumpyShim()}

    # The real function ends in HistogramProto(...): return its fields.
    def HistogramProto(**fields):
        return fields

    namespace["HistogramProto"] = HistogramProto
    exec(compile(ast.Module(body=[func], type_ignores=[]), path, "exec"),
         namespace)
    return namespace["make_histogram"]


def default_bins():
    # As in torch/utils/tensorboard/writer.py SummaryWriter.__init__.
    v = 1e-12
    buckets = []
    neg_buckets = []
    while v < 1e20:
        buckets.append(v)
        neg_buckets.append(-v)
        v *= 1.1
    return neg_buckets[::-1] + [0] + buckets


def hexf(x):
    return float(x).hex()


def print_histogram(name, values):
    make_histogram = load_make_histogram()
    h = make_histogram(values.numpy().astype(float), default_bins())
    limits, counts = h["bucket_limit"], h["bucket"]
    print(f"// {name}: {values.dtype} {list(values.shape)} "
          f"{values.flatten().tolist()}")
    print(f"//   min {h['min']!r} max {h['max']!r} num {h['num']!r} "
          f"sum {h['sum']!r} sum_squares {h['sum_squares']!r}")
    print(f"//   {len(limits)} buckets; first limits {hexf(limits[0])} "
          f"{hexf(limits[1])}, last {hexf(limits[-1])}")
    print("//   non-empty buckets (index, limit, count):")
    for i, (limit, count) in enumerate(zip(limits, counts)):
        if count:
            print(f"      {{{i}, {hexf(limit)}, {count}}},")


def print_grid(name, images, channels, **kwargs):
    """Prints the grid's first `channels` channels."""
    grid = torchvision.utils.make_grid(images, **kwargs)
    print(f"// {name}: make_grid({list(images.shape)} {images.dtype}, "
          f"{kwargs}) -> {list(grid.shape)} {grid.dtype}, channels "
          f"0..{channels - 1}")
    print("      " + ", ".join(
        str(v) for v in grid[:channels].flatten().tolist()))


def crc32c_bitwise(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) \
        & 0xFFFFFFFF


def main():
    print("// CRC-32C (bitwise) and masked CRC")
    for data in [b"123456789", (24).to_bytes(8, "little")]:
        crc = crc32c_bitwise(data)
        print(f"//   {data!r}: crc32c 0x{crc:08X} masked 0x{masked(crc):08X}")

    print_histogram(
        "kSpansZero",
        torch.tensor([[-1.5, -0.25, 0.0], [0.0, 0.3, 1.0], [1.0, 2.5, 7.0]],
                     dtype=torch.float32))
    print_histogram(
        "kPositiveInts",
        torch.tensor([[1, 2], [2, 40], [3, 1000000]], dtype=torch.int64))

    x = np.array([0.0, 0.5, 0.999, 1.0, 1.2, -0.1, 0.2, 0.7], np.float32)
    pixels = (x.astype(np.float32) * 255).clip(0, 255).astype(np.uint8)
    print(f"// image floats {x.tolist()} -> {pixels.tolist()}")

    gray = torch.arange(5 * 1 * 2 * 3, dtype=torch.float32).reshape(
        5, 1, 2, 3) / 32
    # Gray input comes out as three equal channels: print one.
    print_grid("kGrayGrid", gray, 1, nrow=2, padding=1, pad_value=0.5)
    rgb = ((torch.arange(3 * 3 * 2 * 2) * 7) % 256).to(torch.uint8).reshape(
        3, 3, 2, 2)
    print_grid("kRgbGrid", rgb, 3, nrow=2, padding=1, pad_value=255)


if __name__ == "__main__":
    main()
