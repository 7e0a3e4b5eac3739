#!/usr/bin/env python3
"""Writes a folder of real JPEGs for bench/jpeg_loader_bench.cpp.

Fashion-MNIST images (Debian's dataset-fashion-mnist IDX files), upscaled
with PIL's bicubic filter from 28x28 to --size x --size, converted to RGB
(the grey value replicated to three channels, so decoding does the colour
work: YCbCr with 4:2:0 chroma, PIL's default) and saved as JPEG at --quality,
laid out the way torchvision's ImageFolder reads it:

  <out>/<class name>/<index>.jpg

Class names are torchvision's FashionMNIST.classes made folder-safe
("T-shirt/top" -> "T-shirt_top", "Ankle boot" -> "Ankle_boot"); <index> is
the image's position in the training split (60000 + i for the test split,
used only past 60000 files), zero-padded. The --count files are balanced
over the 10 classes (the first --count // 10 images of each class in file
order, one more for the first --count % 10 classes).

Idempotent: when <out> already holds --count JPEGs and its stamp file
(<out>/.make_jpeg_folder.json, a hidden file that neither ImageFolder
lists) records the same parameters, nothing is written. Otherwise the
folder is built beside <out> and renamed into place, replacing an <out>
that this script made before; an <out> that is not empty and has no stamp
is left alone (exit status 2).

Usage:
  /usr/bin/python3 bench/make_jpeg_folder.py [--out DIR] [--count 6000]
      [--size 256] [--quality 90] [--source DIR]

Progress and the result go to stderr, except the last line on stdout: the
folder's path. Exit status 0 when the folder is there, 2 on an error.
"""

import argparse
import gzip
import json
import os
import shutil
import sys
import time

# torchvision.datasets.FashionMNIST.classes, in label order.
CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
           "Shirt", "Sneaker", "Bag", "Ankle boot"]
STAMP = ".make_jpeg_folder.json"
FORMAT = 1  # bump when the layout or the encoding changes
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "build", "bench-data", "fashion-jpeg")
DEFAULT_SOURCE = "/usr/share/datasets/fashion-mnist"


def folder_name(label):
    return CLASSES[label].replace("/", "_").replace(" ", "_")


def read_idx(path):
    """An IDX file (gzip or raw) as a numpy uint8 array of its shape."""
    import numpy as np

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path}: not a uint8 IDX file")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big")
            for i in range(ndim)]
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
    raise FileNotFoundError(
        f"{os.path.join(root, stem)}[.gz] not found (pass --source DIR with "
        "the Fashion-MNIST IDX files; Debian: apt install "
        "dataset-fashion-mnist)")


def load_split(source, prefix):
    images = read_idx(find_file(source, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(find_file(source, f"{prefix}-labels-idx1-ubyte"))
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{source}: {prefix} has {images.shape[0]} images "
                         f"and {labels.shape[0]} labels")
    return images, labels


def count_jpegs(out):
    n = 0
    for label in range(len(CLASSES)):
        folder = os.path.join(out, folder_name(label))
        if os.path.isdir(folder):
            n += sum(1 for name in os.listdir(folder)
                     if name.lower().endswith(".jpg"))
    return n


def read_stamp(out):
    try:
        with open(os.path.join(out, STAMP)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def choose(labels_by_split, count):
    """(split, index, label) of `count` images balanced over the classes,
    each class's first images in file order, training split first."""
    per_class = [count // len(CLASSES) + (1 if c < count % len(CLASSES) else 0)
                 for c in range(len(CLASSES))]
    chosen = []
    for label, wanted in enumerate(per_class):
        found = 0
        for split, labels in labels_by_split:
            if found == wanted:
                break
            for index in (labels == label).nonzero()[0][:wanted - found]:
                chosen.append((split, int(index), label))
                found += 1
        if found < wanted:
            raise ValueError(f"class {CLASSES[label]!r} has only {found} "
                             f"images, {wanted} wanted (--count too large)")
    return chosen, per_class


def build(args, params):
    from PIL import Image

    train_images, train_labels = load_split(args.source, "train")
    splits = {"train": (train_images, train_labels)}
    labels_by_split = [("train", train_labels)]
    if args.count > train_images.shape[0]:
        splits["t10k"] = load_split(args.source, "t10k")
        labels_by_split.append(("t10k", splits["t10k"][1]))
    chosen, per_class = choose(labels_by_split, args.count)
    offset = {"train": 0, "t10k": train_images.shape[0]}

    parent = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(args.out)}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for label in range(len(CLASSES)):
            os.makedirs(os.path.join(tmp, folder_name(label)))
        start = time.perf_counter()
        for n, (split, index, label) in enumerate(chosen, 1):
            pixels = splits[split][0][index]
            image = Image.fromarray(pixels, mode="L").convert("RGB").resize(
                (args.size, args.size), Image.BICUBIC)
            name = f"{offset[split] + index:05d}.jpg"
            image.save(os.path.join(tmp, folder_name(label), name),
                       format="JPEG", quality=args.quality)
            if n % 1000 == 0 or n == len(chosen):
                print(f"  {n}/{len(chosen)} files, "
                      f"{time.perf_counter() - start:.1f} s", file=sys.stderr)
        stamp = dict(params, per_class=dict(
            (folder_name(c), per_class[c]) for c in range(len(CLASSES))))
        with open(os.path.join(tmp, STAMP), "w") as f:
            json.dump(stamp, f, indent=2)
            f.write("\n")
        if os.path.exists(args.out):
            shutil.rmtree(args.out)  # ours: checked by the caller
        os.rename(tmp, args.out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help=f"folder to write (default {DEFAULT_OUT})")
    parser.add_argument("--count", type=int, default=6000,
                        help="JPEG files, balanced over the 10 classes "
                             "(default 6000)")
    parser.add_argument("--size", type=int, default=256,
                        help="side of the square images (default 256)")
    parser.add_argument("--quality", type=int, default=90,
                        help="JPEG quality (default 90)")
    parser.add_argument("--source", default=DEFAULT_SOURCE,
                        help="Fashion-MNIST IDX files (default "
                             f"{DEFAULT_SOURCE})")
    args = parser.parse_args()

    try:
        if not 10 <= args.count <= 70000:
            raise ValueError(f"--count must be in [10, 70000], "
                             f"got {args.count}")
        if args.size < 1:
            raise ValueError(f"--size must be positive, got {args.size}")
        if not 1 <= args.quality <= 100:
            raise ValueError(f"--quality must be in [1, 100], "
                             f"got {args.quality}")
        try:
            import numpy  # noqa: F401
            import PIL
        except ImportError as e:
            raise RuntimeError(f"{sys.executable} cannot import {e.name} "
                               "(use /usr/bin/python3)")
        params = {"format": FORMAT, "count": args.count, "size": args.size,
                  "quality": args.quality, "resample": "bicubic",
                  "mode": "RGB", "source": os.path.abspath(args.source),
                  "pillow": PIL.__version__}
        stamp = read_stamp(args.out) if os.path.isdir(args.out) else None
        if stamp is not None:
            # Pillow's version is recorded, not compared: another Pillow
            # writes slightly different bytes, not a different benchmark.
            same = all(stamp.get(k) == v for k, v in params.items()
                       if k != "pillow")
            if same and count_jpegs(args.out) == args.count:
                print(f"{args.out}: already has {args.count} JPEGs "
                      f"({args.size}x{args.size}, quality {args.quality})",
                      file=sys.stderr)
                print(args.out)
                return
            print(f"{args.out}: made with other parameters or incomplete; "
                  "rebuilding", file=sys.stderr)
        elif os.path.exists(args.out) and (not os.path.isdir(args.out)
                                           or os.listdir(args.out)):
            raise RuntimeError(f"{args.out} exists and was not made by this "
                               f"script (no {STAMP}); pick another --out or "
                               "remove it")
        print(f"writing {args.count} JPEGs ({args.size}x{args.size}, quality "
              f"{args.quality}) to {args.out}", file=sys.stderr)
        build(args, params)
    except Exception as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(2)
    print(args.out)


if __name__ == "__main__":
    main()
