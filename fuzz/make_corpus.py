#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora, fuzz/corpus/<target>/: a few small,
valid inputs of each kind, from which the fuzzer mutates.

    /usr/bin/python3 fuzz/make_corpus.py [--replay build/fuzz/fuzz_replay]

Needs Debian's python3-pil (PNG and JPEG); the checkpoint seeds come from
fuzz_replay --write-checkpoint-seed (a sealed checkpoint of the checkpoint
target's model), plus a copy without its seal, as checkpoints written before
sealing were. Deterministic: the same files every run.
"""

import argparse
import gzip
import io
import json
import os
import shutil
import struct
import subprocess
import zipfile

from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def idx(type_code, dims, payload):
    header = struct.pack(">HBB", 0, type_code, len(dims))
    return header + b"".join(struct.pack(">I", d) for d in dims) + payload


def image(mode, size, seed):
    w, h = size
    img = Image.new("RGB", size)
    img.putdata([((x * 37 + seed) % 256, (y * 91 + seed) % 256, (x * y) % 256)
                 for y in range(h) for x in range(w)])
    return img.convert(mode)


def encoded(img, fmt, **options):
    out = io.BytesIO()
    img.save(out, fmt, **options)
    return out.getvalue()


def safetensors(tensors, metadata=None, pad=True):
    """A safetensors file: {name: (dtype, shape, bytes)} in that order."""
    header = {"__metadata__": metadata} if metadata else {}
    data = b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def as_zip64(zip_bytes):
    """The same archive in zip64 form, as a writer makes it past 4 GiB:
    every entry's sizes and local header offset in a zip64 extra field, the
    directory's place and size in a zip64 end record and its locator."""
    end = len(zip_bytes) - 22
    entries, = struct.unpack_from("<H", zip_bytes, end + 10)
    directory, = struct.unpack_from("<I", zip_bytes, end + 16)
    out = bytearray(zip_bytes[:directory])
    at = directory
    for _ in range(entries):
        compressed, uncompressed = struct.unpack_from("<II", zip_bytes, at + 20)
        name, extra, comment = struct.unpack_from("<HHH", zip_bytes, at + 28)
        local, = struct.unpack_from("<I", zip_bytes, at + 42)
        fixed = bytearray(zip_bytes[at:at + 46])
        struct.pack_into("<II", fixed, 20, 0xFFFFFFFF, 0xFFFFFFFF)
        struct.pack_into("<H", fixed, 30, extra + 28)
        struct.pack_into("<I", fixed, 42, 0xFFFFFFFF)
        out += fixed + zip_bytes[at + 46:at + 46 + name + extra]
        out += struct.pack("<HHQQQ", 1, 24, uncompressed, compressed, local)
        out += zip_bytes[at + 46 + name + extra:at + 46 + name + extra + comment]
        at += 46 + name + extra + comment
    record64 = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, entries,
                       entries, record64 - directory, directory)
    out += struct.pack("<IIQI", 0x07064B50, 0, record64, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF,
                       0xFFFFFFFF, 0xFFFFFFFF, 0)
    return bytes(out)


def weights_seeds():
    """The safetensors and state_dict targets' seeds."""
    # Weights files: safetensors written here from the format's
    # specification, and state_dicts that Python's torch.save wrote
    # (tests/reference/make_interop_reference.py).
    put("safetensors", "i32_metadata.safetensors",
        safetensors({"test": ("I32", [2, 2], struct.pack("<4i", 0, 1, -2, 3))},
                    {"foo": "bar"}))
    put("safetensors", "dtypes.safetensors", safetensors({
        "f64": ("F64", [1], struct.pack("<d", 0.5)),
        "f32": ("F32", [2, 1], struct.pack("<2f", 1, -2)),
        "f16": ("F16", [1], b"\x00\x3c"), "bf16": ("BF16", [1], b"\x80\x3f"),
        "i64": ("I64", [], struct.pack("<q", -7)),
        "i16": ("I16", [1], struct.pack("<h", 300)),
        "i8": ("I8", [1], b"\xff"), "u8": ("U8", [3], b"abc"),
        "bool": ("BOOL", [2], b"\x01\x00"), "empty": ("F32", [0, 3], b"")}))
    put("safetensors", "unaligned.safetensors",
        safetensors({"a": ("U8", [1], b"\x07"),
                     "b": ("F32", [1], struct.pack("<f", 1.5))}, pad=False))
    interop = os.path.join(REPO, "tests", "reference", "interop")
    for name in ("mlp.pt", "mlp_protocol4.pt", "dtypes.pt", "nanogpt_ckpt.pt"):
        with open(os.path.join(interop, name), "rb") as f:
            put("state_dict", name, f.read())
        # Their pickles alone, for the unpickler's own target.
        with zipfile.ZipFile(os.path.join(interop, name)) as archive:
            pickle = [n for n in archive.namelist() if n.endswith("/data.pkl")]
            put("pickle", name[:-3] + ".pkl", archive.read(pickle[0]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replay",
                        default=os.path.join(REPO, "build", "fuzz", "fuzz_replay"))
    args = parser.parse_args()
    for target in os.listdir(CORPUS) if os.path.isdir(CORPUS) else []:
        shutil.rmtree(os.path.join(CORPUS, target))

    images = bytes((i * 7) % 256 for i in range(2 * 3 * 3))
    put("idx", "images_u8.idx", idx(0x08, [2, 3, 3], images))
    put("idx", "images_u8.idx.gz", gzip.compress(idx(0x08, [2, 3, 3], images), mtime=0))
    put("idx", "labels.idx", idx(0x08, [2], bytes([3, 7])))
    put("idx", "float32.idx", idx(0x0D, [2, 2], struct.pack(">4f", 0.5, -1, 2, 3.25)))
    put("idx", "int16.idx", idx(0x0B, [3], struct.pack(">3h", -2, 0, 300)))

    with open(os.path.join(REPO, "configs", "fashion_mnist.yaml")) as f:
        put("yaml_config", "fashion_mnist.yaml", f.read())
    with open(os.path.join(REPO, "configs", "bench", "gpt_tiny.yaml")) as f:
        put("yaml_config", "gpt_tiny.yaml", f.read())
    put("yaml_config", "flow.yaml",
        "trainer: {max_epochs: 2, precision: bf16-mixed}\n"
        "data: {dataset: csv, path: t.csv, batch_size: 8, mean: [0.5]}\n"
        "model.mlp_hidden: [16, 8]\n"
        "tuner: {batch_size: power, max_memory: 2GiB}\n")

    put("overrides", "fit.txt",
        "--trainer.max_epochs=3\n--data.batch_size=64\n--ckpt_path\nlast\n"
        "--model.channels=[8, 16]\n--optimizer.lr=1e-3\n")
    put("overrides", "strings.txt",
        "--model_checkpoint.monitor=\n--data.feature_columns=a, b\n"
        "--tuner.max_memory=500MB\n--early_stopping.stopping_threshold=0.9\n"
        "--config\n")

    put("csv", "classes.csv",
        "\x04x1,x2,label\n1.5,2,cat\n-3,4e-1,dog\n0,0,cat\n")
    put("csv", "numbers.tsv", "\x01a\tb\tc\n1\t2\t3.5\n4\t5\t6\n")
    put("csv", "quoted.csv",
        '\x00"a","b,c",y\n"1", 2 ,0\n\r\n3,"4",1\r\n')
    put("csv", "no_label.csv", "\x0cx1,x2\n1,2\n3,4\n")

    put("png", "gray.png", encoded(image("L", (5, 4), 1), "PNG"))
    put("png", "rgb.png", encoded(image("RGB", (7, 6), 2), "PNG"))
    put("png", "rgba.png", encoded(image("RGBA", (4, 4), 3), "PNG"))
    put("png", "palette.png", encoded(image("P", (6, 6), 4), "PNG"))
    put("png", "gray16.png", encoded(image("L", (3, 3), 5).convert("I").convert("I;16"), "PNG"))
    put("png", "gray_alpha.png", encoded(image("LA", (3, 5), 6), "PNG"))

    put("jpeg", "gray.jpg", encoded(image("L", (16, 16), 1), "JPEG", quality=90))
    put("jpeg", "rgb.jpg", encoded(image("RGB", (32, 24), 2), "JPEG", quality=90))
    put("jpeg", "progressive.jpg",
        encoded(image("RGB", (17, 13), 3), "JPEG", quality=75, progressive=True))
    put("jpeg", "cmyk.jpg", encoded(image("CMYK", (8, 8), 4), "JPEG"))

    put("token", "u16.bin", b"\x0b" + bytes((i * 13) % 256 for i in range(63)))
    put("token", "bytes.bin", b"\x00hello tokens\n")
    put("token", "u32.bin", b"\x10" + struct.pack("<8I", *range(8)) + b"\x00\x00\x00")

    sealed = os.path.join(CORPUS, "checkpoint", "sealed.ckpt")
    os.makedirs(os.path.dirname(sealed), exist_ok=True)
    subprocess.run([args.replay, "--write-checkpoint-seed", sealed], check=True)
    with open(sealed, "rb") as f:
        data = f.read()
    # The zip's end record: its comment (the seal) dropped.
    end = data.rfind(b"PK\x05\x06")
    put("checkpoint", "unsealed.ckpt", data[:end + 20] + b"\x00\x00")
    put("checkpoint", "zip64.ckpt", as_zip64(data[:end + 20] + b"\x00\x00"))
    weights_seeds()
    for target in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, target))
        size = sum(os.path.getsize(os.path.join(CORPUS, target, f)) for f in files)
        print(f"{target}: {len(files)} files, {size} bytes")


if __name__ == "__main__":
    main()
