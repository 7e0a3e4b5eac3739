#!/usr/bin/env python3
"""The Python side of hotloop's weight exchange (tests/interop/).

    /usr/bin/python3 tests/reference/make_interop_reference.py
        writes tests/reference/interop/: files that Python writes, which the
        tests load into hotloop's models (see below), and interop.txt, the
        inputs and the Python models' logits.
    /usr/bin/python3 tests/reference/make_interop_reference.py resnet DIR
        writes DIR/resnet18.pt and DIR/resnet18.safetensors (torchvision's
        resnet18, 45 MB each, so made when the test runs, not committed) and
        DIR/resnet18.txt, its input and logits.
    /usr/bin/python3 tests/reference/make_interop_reference.py check DIR
        loads each weights file hotloop exported into DIR into its Python
        twin (torch.load(weights_only=True) for .pt, this script's
        safetensors reader for .safetensors), runs the input of
        DIR/<case>.txt and compares the logits with hotloop's there; prints
        one line per file and exits 1 on any difference over 1e-5.

Needs PyTorch 1.13 or later and torchvision (Debian's python3-torch and
python3-torchvision). Python 1.13 has no safetensors library, so the
safetensors files are read and written here from the format's
specification (8-byte little-endian header length, JSON header, the
tensors' bytes): an implementation independent of hotloop's.

The committed files, deterministic (fixed seeds, one thread):
  cnn.pt, cnn.safetensors    hotloop's Fashion-MNIST CNN (channels 4, 8;
                             hidden 16; 10 classes; 28x28), after 3 SGD steps
                             in training mode, so BatchNorm's running
                             statistics and num_batches_tracked (3) are set
  mlp.pt                     the MLP (20 -> 16 -> 8 -> 5)
  mlp_protocol4.pt           the same saved with pickle_protocol=4
  gpt.pt, gpt.safetensors    nanoGPT's GPT (vocab 64, block 16, 2 layers,
                             2 heads, 32 wide); the .pt is its state_dict as
                             is, lm_head.weight tied to transformer.wte.weight
                             (and, on PyTorch 1.13, the attn.bias masks)
  gpt2_hf.safetensors        a GPT-2-shaped nanoGPT (GPT-2's vocabulary of
                             50257; 2 layers, 2 heads, 8 wide, 16 positions)
                             in the layout of Hugging Face's transformers
                             (h.N.attn.c_attn.weight in Conv1D's [in, out]
                             layout, no lm_head, the attn.bias and
                             attn.masked_bias buffers), its logits, and the
                             20 tokens greedy decoding appends to [5, 17, 42]
  nanogpt_ckpt.pt            nanoGPT's checkpoint dict: 'model' (the mlp's
                             state_dict), 'iter_num', 'config' (an
                             argparse.Namespace, an object of a class hotloop
                             does not build), 'best_val_loss'
  dtypes.pt, dtypes.safetensors
                             one tensor of each of the ten dtypes (values
                             arange(6) cast, 'bool' = arange(6) % 2), a
                             transposed view 't' of arange(6) as [3, 2], 'a'
                             and 'b' sharing one storage (b = a[1:3]), and a
                             Parameter 'p'
  lightning.ckpt             Lightning 2.x's checkpoint layout around the
                             mlp (Debian has no Lightning to write one):
                             'state_dict' with the LightningModule's
                             attribute as prefix ('model.layers.0.weight'),
                             'optimizer_states' (AdamW after a step),
                             'lr_schedulers', 'callbacks' (a ModelCheckpoint
                             state with a tensor), 'loops', 'hparams_name',
                             'hyper_parameters' (float, list, str, bool,
                             None), 'epoch', 'global_step' and
                             'pytorch-lightning_version'
  legacy.pt, complex.pt, mixed.pt
                             what hotloop refuses: the mlp's state_dict in
                             torch.save's pre-1.6 format, a complex64 tensor,
                             a dict with an integer beside a tensor
"""

import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "interop")
sys.path.insert(0, HERE)
from make_models_reference import GPT, GPTConfig, Mlp  # noqa: E402

INPUT_SCALE = 64
TOLERANCE = 1e-5

# --- safetensors, from the format's specification -------------------------

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
    "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
    "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}
NAMES = {v: k for k, v in DTYPES.items()}


def tensor_bytes(t):
    t = t.detach().contiguous()
    # Through uint8, which every dtype (bfloat16 too) can be viewed as.
    return t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def write_safetensors(path, tensors, metadata=None):
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    data = b""
    for name, t in tensors.items():
        b = tensor_bytes(t)
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n, = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    metadata = header.pop("__metadata__", {})
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        b = bytearray(data[begin:end])
        t = torch.frombuffer(b, dtype=torch.uint8) if b else \
            torch.empty(0, dtype=torch.uint8)
        out[name] = t.view(DTYPES[e["dtype"]]).reshape(e["shape"]).clone()
    return out, metadata


# --- the models -------------------------------------------------------------


class FashionCnn(nn.Module):
    """hotloop::models::FashionCnn: conv (no bias) -> BatchNorm -> ReLU ->
    max-pool per block in `features`, Flatten -> Linear -> ReLU -> Linear in
    `head`."""

    def __init__(self, channels=(4, 8), hidden=16, num_classes=10, size=28):
        super().__init__()
        layers, c = [], 1
        for o in channels:
            layers += [nn.Conv2d(c, o, 3, padding=1, bias=False),
                       nn.BatchNorm2d(o), nn.ReLU(inplace=True),
                       nn.MaxPool2d(2)]
            c, size = o, size // 2
        self.features = nn.Sequential(*layers)
        head, width = [nn.Flatten()], c * size * size
        if hidden:
            head += [nn.Linear(width, hidden), nn.ReLU(inplace=True)]
            width = hidden
        head.append(nn.Linear(width, num_classes))
        self.head = nn.Sequential(*head)

    def forward(self, x):
        return self.head(self.features(x))


def gpt_config():
    return GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2,
                     n_embd=32)


class GptLogits(nn.Module):
    """nanoGPT's GPT returning every position's logits (its forward takes
    targets)."""

    def __init__(self):
        super().__init__()
        self.gpt = GPT(gpt_config())

    def forward(self, idx):
        return self.gpt(idx, torch.zeros_like(idx))[0]


def resnet18():
    import torchvision
    return torchvision.models.resnet18(num_classes=10)


def model(case):
    torch.manual_seed(0)
    if case == "cnn":
        return FashionCnn()
    if case == "mlp":
        return Mlp(20, [16, 8], 5, "relu")
    if case == "gpt":
        return GptLogits().gpt
    if case == "resnet18":
        return resnet18()
    raise ValueError(case)


def forward(case, m, x):
    m.eval()
    with torch.no_grad():
        if case == "gpt":
            return m(x, torch.zeros_like(x))[0]
        return m(x)


def case_input(case):
    g = torch.Generator().manual_seed(7)
    if case == "gpt":
        return torch.randint(0, 64, (2, 16), generator=g)
    shape = {"cnn": (2, 1, 28, 28), "mlp": (3, 4, 5),
             "resnet18": (2, 3, 64, 64)}[case]
    return torch.round(torch.randn(shape, generator=g) * INPUT_SCALE) \
        / INPUT_SCALE


# --- reference lines ("<case> <field> <name> <shape> <values...>") ---------


def shape_str(shape):
    return "[" + ",".join(str(d) for d in shape) + "]"


def input_line(case, x):
    if x.dtype == torch.int64:
        values = x.flatten().tolist()
        return f"{case} tokens idx {shape_str(x.shape)} " + \
            " ".join(str(v) for v in values)
    k = torch.round(x * INPUT_SCALE).to(torch.int64).flatten().tolist()
    return f"{case} input x {shape_str(x.shape)} " + \
        " ".join(str(v) for v in k)


def output_line(case, y, name="logits"):
    values = " ".join(f"{float(v):.8g}" for v in y.flatten().tolist())
    return f"{case} output {name} {shape_str(y.shape)} {values}"


def read_lines(path):
    rows = {}
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            parts = line.split()
            rows[(parts[0], parts[1])] = (
                [int(d) for d in parts[3][1:-1].split(",") if d],
                parts[4:])
    return rows


# --- the committed files ----------------------------------------------------


def trained_cnn():
    m = model("cnn")
    optimizer = torch.optim.SGD(m.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(3)
    m.train()
    for _ in range(3):
        x = torch.randn(8, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (8,), generator=g)
        optimizer.zero_grad()
        nn.functional.cross_entropy(m(x), y).backward()
        optimizer.step()
    return m


def gpt_twin():
    m = model("gpt")
    # As make_models_reference.py's gpt_tiny: O(1) activations, biases and
    # LayerNorm weights off their initial values.
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() == 2:
                p.mul_(10.0)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.1)
            else:
                p.normal_(1.0, 0.1)
    return m


def lightning_checkpoint(module):
    """What Lightning 2.x's trainer.save_checkpoint writes for a
    LightningModule holding `module` as self.model, after one AdamW step
    (on a copy, so that `module` keeps its weights)."""
    import copy
    trained = copy.deepcopy(module)
    optimizer = torch.optim.AdamW(trained.parameters(), lr=1e-3)
    trained(torch.ones(2, 20)).sum().backward()
    optimizer.step()
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, 3)
    return {
        "epoch": 3,
        "global_step": 120,
        "pytorch-lightning_version": "2.1.0",
        "state_dict": {"model." + k: v for k, v in module.state_dict().items()},
        "loops": {"fit_loop": {"state_dict": {}, "epoch_progress": {
            "total": {"ready": 4, "completed": 3}}}},
        "callbacks": {"ModelCheckpoint{'monitor': 'val_loss', 'mode': 'min'}": {
            "best_model_score": torch.tensor(0.25),
            "best_model_path": "/runs/epoch=2.ckpt", "dirpath": "/runs"}},
        "optimizer_states": [optimizer.state_dict()],
        "lr_schedulers": [schedule.state_dict()],
        "hparams_name": "kwargs",
        "hyper_parameters": {"lr": 1e-3, "hidden": [16, 8], "name": "mlp",
                             "compile": False, "ckpt": None},
    }


def hf_gpt2_layout(gpt, vocab=None):
    """The gpt twin's weights as transformers' GPT2LMHeadModel stores them
    with save_pretrained (model.safetensors): no 'transformer.' prefix, the
    attention and MLP weights in Conv1D's [in, out] layout, lm_head left out
    (tied to wte), attn.bias (the causal mask) and attn.masked_bias kept as
    older transformers versions save them."""
    out = {}
    n = gpt.config.block_size
    for name, t in gpt.state_dict().items():
        if name == "lm_head.weight" or name.endswith("attn.bias") and \
                t.dim() == 4:
            continue
        key = name[len("transformer."):]
        if any(key.endswith(s) for s in ("attn.c_attn.weight",
                                         "attn.c_proj.weight",
                                         "mlp.c_fc.weight",
                                         "mlp.c_proj.weight")):
            t = t.t()
        out[key] = t.contiguous()
    for i in range(gpt.config.n_layer):
        out[f"h.{i}.attn.bias"] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
        out[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    return out


def gpt2_twin():
    """A GPT-2-shaped model small enough to commit: GPT-2's vocabulary of
    50257, 2 layers of 2 heads, 8 wide, 16 positions."""
    torch.manual_seed(11)
    m = GPT(GPTConfig(vocab_size=50257, block_size=16, n_layer=2, n_head=2,
                      n_embd=8))
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() == 2:
                p.mul_(20.0)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.1)
            else:
                p.normal_(1.0, 0.1)
    return m


def greedy(m, idx, steps):
    with torch.no_grad():
        for _ in range(steps):
            logits = m(idx[:, -16:], torch.zeros_like(idx[:, -16:]))[0]
            top = logits[0, -1].topk(2).values
            # No near-tie that rounding could flip in another program.
            assert top[0] - top[1] > 1e-3, top
            idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], 1)
    return idx


def make_committed():
    os.makedirs(OUT, exist_ok=True)
    lines = []

    cnn = trained_cnn()
    torch.save(cnn.state_dict(), os.path.join(OUT, "cnn.pt"))
    write_safetensors(os.path.join(OUT, "cnn.safetensors"), cnn.state_dict(),
                      {"format": "pt"})
    x = case_input("cnn")
    lines += [input_line("cnn", x), output_line("cnn", forward("cnn", cnn, x))]

    mlp = model("mlp")
    torch.save(mlp.state_dict(), os.path.join(OUT, "mlp.pt"))
    torch.save(mlp.state_dict(), os.path.join(OUT, "mlp_protocol4.pt"),
               pickle_protocol=4)
    x = case_input("mlp")
    lines += [input_line("mlp", x), output_line("mlp", forward("mlp", mlp, x))]

    gpt = gpt_twin()
    torch.save(gpt.state_dict(), os.path.join(OUT, "gpt.pt"))
    write_safetensors(os.path.join(OUT, "gpt.safetensors"),
                      {k: v for k, v in gpt.state_dict().items()
                       if k != "lm_head.weight" and
                       not (k.endswith("attn.bias") and v.dim() == 4)})
    x = case_input("gpt")
    lines += [input_line("gpt", x), output_line("gpt", forward("gpt", gpt, x))]

    gpt2 = gpt2_twin().eval()
    write_safetensors(os.path.join(OUT, "gpt2_hf.safetensors"),
                      hf_gpt2_layout(gpt2), {"format": "pt"})
    x = case_input("gpt")
    # The first 256 of the 50257 logits per position: enough to compare,
    # small enough to keep.
    lines += [input_line("gpt2_hf", x),
              output_line("gpt2_hf", forward("gpt", gpt2, x)[..., :256],
                          "logits256")]
    prompt = torch.tensor([[5, 17, 42]])
    tokens = greedy(gpt2, prompt, 20)
    lines.append(f"gpt2_hf greedy tokens {shape_str(tokens.shape)} "
                 + " ".join(str(v) for v in tokens.flatten().tolist()))

    import argparse as ap
    torch.save({"model": mlp.state_dict(), "iter_num": 5,
                "config": ap.Namespace(lr=0.1, name="mlp"),
                "best_val_loss": torch.tensor(1.5)},
               os.path.join(OUT, "nanogpt_ckpt.pt"))
    torch.save(lightning_checkpoint(mlp), os.path.join(OUT, "lightning.ckpt"))

    dtypes = {}
    for name, dtype in DTYPES.items():
        base = torch.arange(6)
        dtypes[name] = (base % 2).to(dtype) if dtype == torch.bool \
            else base.to(dtype)
    dtypes["t"] = torch.arange(6, dtype=torch.float32).view(2, 3).t()
    a = torch.arange(4, dtype=torch.float32) * 10
    dtypes["a"] = a
    dtypes["b"] = a[1:3]
    dtypes["p"] = nn.Parameter(torch.ones(2))
    torch.save(dtypes, os.path.join(OUT, "dtypes.pt"))
    write_safetensors(os.path.join(OUT, "dtypes.safetensors"),
                      {k: v for k, v in dtypes.items()},
                      {"note": "written by make_interop_reference.py"})

    # What hotloop refuses, each with its message.
    torch.save(mlp.state_dict(), os.path.join(OUT, "legacy.pt"),
               _use_new_zipfile_serialization=False)
    torch.save({"c": torch.ones(2, dtype=torch.complex64)},
               os.path.join(OUT, "complex.pt"))
    torch.save({"w": torch.ones(2), "step": 3},
               os.path.join(OUT, "mixed.pt"))

    with open(os.path.join(OUT, "interop.txt"), "w") as f:
        f.write(f"# Generated by tests/reference/make_interop_reference.py "
                f"with PyTorch {torch.__version__}; do not edit.\n"
                f"# <case> <field> <name> <shape> <values...>; input: k/64\n")
        f.write("\n".join(lines) + "\n")
    for name in sorted(os.listdir(OUT)):
        print(f"wrote {os.path.join(OUT, name)} "
              f"({os.path.getsize(os.path.join(OUT, name))} bytes)")


# --- at test time -----------------------------------------------------------


def make_resnet(folder):
    m = resnet18()
    # Off the initial values, so that every entry is tested: BatchNorm's
    # statistics and affine parameters from one training step.
    g = torch.Generator().manual_seed(5)
    m.train()
    optimizer = torch.optim.SGD(m.parameters(), lr=0.1)
    optimizer.zero_grad()
    nn.functional.cross_entropy(
        m(torch.randn(4, 3, 64, 64, generator=g)),
        torch.randint(0, 10, (4,), generator=g)).backward()
    optimizer.step()
    torch.save(m.state_dict(), os.path.join(folder, "resnet18.pt"))
    write_safetensors(os.path.join(folder, "resnet18.safetensors"),
                      m.state_dict())
    x = case_input("resnet18")
    with open(os.path.join(folder, "resnet18.txt"), "w") as f:
        f.write(input_line("resnet18", x) + "\n")
        f.write(output_line("resnet18", forward("resnet18", m, x)) + "\n")


def load_file(path):
    if path.endswith(".safetensors"):
        return read_safetensors(path)[0]
    if "weights_only" in torch.load.__code__.co_varnames:
        return torch.load(path, weights_only=True)
    return torch.load(path)


def check(folder):
    failures = 0
    for name in sorted(os.listdir(folder)):
        stem, ext = os.path.splitext(name)
        if ext not in (".pt", ".safetensors"):
            continue
        case = stem.split("_")[0]
        rows = read_lines(os.path.join(folder, case + ".txt"))
        m = model(case)
        state = load_file(os.path.join(folder, name))
        kind = type(state).__name__
        missing, unexpected = m.load_state_dict(state, strict=False)
        # What hotloop leaves out on purpose: nanoGPT's causal masks
        # (buffers PyTorch 1.13's nanoGPT keeps), and in safetensors the
        # tied lm_head.weight, which is transformer.wte.weight.
        allowed = [k for k in missing if k.endswith("attn.bias") or
                   (ext == ".safetensors" and k == "lm_head.weight")]
        if unexpected or len(allowed) != len(missing):
            print(f"FAIL {name}: missing {missing}, unexpected {unexpected}")
            failures += 1
            continue
        if case == "gpt" and "lm_head.weight" in missing:
            m.lm_head.weight = m.transformer.wte.weight
        shape, values = rows[(case, "tokens" if case == "gpt" else "input")]
        if case == "gpt":
            x = torch.tensor([int(v) for v in values]).view(shape)
        else:
            x = torch.tensor([int(v) for v in values],
                             dtype=torch.float32).view(shape) / INPUT_SCALE
        shape, values = rows[(case, "output")]
        expected = torch.tensor([float(v) for v in values]).view(shape)
        got = forward(case, m, x)
        diff = (got - expected).abs().max().item()
        ok = diff <= TOLERANCE
        failures += not ok
        print(f"{'ok' if ok else 'FAIL'} {name}: {kind} of {len(state)} "
              f"tensors, logits max |diff| {diff:.3g}")
    return 1 if failures else 0


def main():
    torch.set_num_threads(1)
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", nargs="?", default="committed",
                        choices=["committed", "resnet", "check"])
    parser.add_argument("folder", nargs="?")
    args = parser.parse_args()
    if args.mode == "committed":
        make_committed()
    elif args.mode == "resnet":
        make_resnet(args.folder)
    else:
        sys.exit(check(args.folder))


if __name__ == "__main__":
    main()
