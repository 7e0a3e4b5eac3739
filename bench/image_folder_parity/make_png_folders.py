#!/usr/bin/env python3
"""Writes Fashion-MNIST as two PNG image folders, for the image-folder
parity run (bench/image_folder_parity/run).

  <out>/train/<class>/<index>.png   the 60000 training images
  <out>/test/<class>/<index>.png    the 10000 test images

Lossless 28x28 grayscale PNGs of Debian's dataset-fashion-mnist IDX files,
class folders named as torchvision's FashionMNIST.classes, folder-safe. A
stamp file (<out>/.done) makes a second run a no-op.

Usage: /usr/bin/python3 make_png_folders.py OUT [--source DIR]
"""

import argparse
import gzip
import os
import sys

import numpy as np
from PIL import Image

CLASSES = ["T-shirt_top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
           "Shirt", "Sneaker", "Bag", "Ankle_boot"]


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def find(source, stem):
    for name in (stem + ".gz", stem):
        path = os.path.join(source, name)
        if os.path.exists(path):
            return path
    sys.exit(f"{source}: missing {stem}[.gz]")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--source", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()
    if os.path.exists(os.path.join(args.out, ".done")):
        print(args.out)
        return
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = read_idx(find(args.source, f"{prefix}-images-idx3-ubyte"))
        labels = read_idx(find(args.source, f"{prefix}-labels-idx1-ubyte"))
        for name in CLASSES:
            os.makedirs(os.path.join(args.out, split, name), exist_ok=True)
        for i, (image, label) in enumerate(zip(images, labels)):
            Image.fromarray(image, mode="L").save(
                os.path.join(args.out, split, CLASSES[label], f"{i:05d}.png"))
        print(f"{split}: {len(images)} images", file=sys.stderr)
    open(os.path.join(args.out, ".done"), "w").close()
    print(args.out)


if __name__ == "__main__":
    main()
