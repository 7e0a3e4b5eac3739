#!/usr/bin/env python3
"""hotloop's benchmark workloads trained in plain PyTorch: the Python baselines.

The Python rows of bench/run. Each workload mirrors hotloop's recipe in
configs/bench/<workload>.yaml — same model, data, augmentation, optimizer,
schedule and batch size — so that the ratios bench/run prints compare loops,
not recipes. Styles:

  naive       what the training-speed guides warn about: DataLoader
              (num_workers=0), batch 32 for cnn/mlp,
              zero_grad(set_to_none=False), every loss kept as a tensor in a
              list until the epoch ends, evaluation without torch.no_grad(),
              torch's default thread count, cudnn.benchmark off.
  tuned       every tip that applies: persistent prefetching DataLoader
              workers (1 on CPU; on CUDA min(4, cores / 2), pinned memory,
              non_blocking copies), the recipe's batch size,
              zero_grad(set_to_none=True), loss.item() only every 50 steps,
              evaluation in eval mode under torch.inference_mode(),
              torch.set_num_threads(--threads), and on CUDA cudnn.benchmark,
              channels_last (image models), the fused optimizer update and
              the recipe's autocast precision.
  compile     tuned, with the model wrapped in torch.compile() (default mode).
  compile-ro  tuned, with torch.compile(mode="reduce-overhead") (CUDA graphs)
              and torch.compiler.cudagraph_mark_step_begin() before each step.
  lightning   the tuned model, data and optimizer in a LightningModule run by
              lightning's Trainer (benchmark=True, the precision mapped,
              logger=False, enable_checkpointing=False, no progress bar,
              validation after every epoch).

compile and compile-ro need torch >= 2.0, lightning the `lightning` (or
`pytorch_lightning`) package: where missing, the script prints
{"skipped": "why"} and exits with status 3.

Workloads: cnn, mlp, resnet18 (Fashion-MNIST), resnet18_cifar (synthetic
3x32x32 images), gpt_tiny (bytes of a text file), gpt2 (GPT-2 124M on a
uint16 token file; --write-tokens makes one).

Usage:
  python3 bench/python_train.py --workload WORKLOAD
      [--style naive|tuned|compile|compile-ro|lightning] [--epochs N]
      [--limit-batches N] [--limit-val-batches N] [--target-acc X]
      [--threads N] [--workers N] [--batch-size N] [--device cpu|cuda]
      [--precision auto|32|bf16-mixed|16-mixed] [--data-root DIR]
      [--text-file PATH] [--token-file PATH] [--block-size N]
      [--synthetic-size N] [--seed N] [--trace PATH [--trace-steps N]]
  python3 bench/python_train.py --write-tokens PATH [--num-tokens N] [--seed N]

Progress goes to stderr; the only output on stdout is one JSON line: impl,
workload, samples_per_s (training samples / training seconds, evaluation
excluded, the whole run), steady_samples_per_s (the same after the first 10
batches, leaving out the step of each batch shape first seen after them:
compilation and warm-up do not count), epoch_samples_per_s, epochs, steps,
final_acc, time_to_target_s (seconds from the start of training to the end of
the first evaluation reaching --target-acc: compilation counts here),
peak_rss_mb (this process), wall_s, process_to_first_step_s and
process_to_step10_s (from the process's start, by the kernel's record of
it, to the first training step's start and to the end of step 10 with the
device's work done), tokens_per_s / steady_tokens_per_s and
flops_per_token / mfu (gpt workloads), evals. On CUDA every clock reading
follows torch.cuda.synchronize(). Failures print {"error": "..."} and exit
with status 2.
"""

import time

_PROCESS_START = time.perf_counter()


def seconds_since_process_start():
    """Seconds since this process started by the kernel's record of it
    (/proc/self/stat's start time against CLOCK_BOOTTIME, to the clock tick)
    — hotloop's core/process_clock.h reads the same, so the warm-up of both
    sides is counted from the same moment: the interpreter's start and its
    imports included. Since this module's import where /proc is missing."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        ticks = int(stat[stat.rindex(")") + 2:].split()[19])
        start = ticks / os.sysconf("SC_CLK_TCK")
        return time.clock_gettime(time.CLOCK_BOOTTIME) - start
    except (OSError, ValueError, IndexError, AttributeError):
        return time.perf_counter() - _PROCESS_START

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402

MEAN = 0.2860
STD = 0.3530
# CIFAR-10's per-channel statistics, the normalization of resnet18_cifar's
# synthetic images (configs/bench/resnet18_cifar.yaml: data.mean, data.std).
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
FASHION_WORKLOADS = ("cnn", "mlp", "resnet18")
IMAGE_WORKLOADS = FASHION_WORKLOADS + ("resnet18_cifar",)
TEXT_WORKLOADS = ("gpt_tiny", "gpt2")
WORKLOADS = IMAGE_WORKLOADS + TEXT_WORKLOADS
STYLES = ("naive", "tuned", "compile", "compile-ro", "lightning")
TUNED_STYLES = ("tuned", "compile", "compile-ro", "lightning")
PRECISIONS = ("32", "bf16-mixed", "16-mixed")
LOG_EVERY = 50  # tuned: loss.item() once per this many steps
WARMUP_BATCHES = 10  # steady samples/s counts the batches after these

# GPT-2 124M as nanoGPT trains it: the vocabulary padded from GPT-2's 50257
# to 50304 (a multiple of 64); the token files hold ids below 50257.
GPT2 = {"n_layer": 12, "n_head": 12, "n_embd": 768, "block_size": 1024,
        "vocab_size": 50304, "bias": True}
GPT2_TOKEN_VOCAB = 50257
GPT2_TOKENS = 8 * 1024 * 1024
SYNTHETIC_SIZE = 51200

# Dense bfloat16 tensor-core peak per GPU, from NVIDIA's data sheets (the
# sparsity figures halved), matched against torch.cuda.get_device_name() in
# this order: the first entry whose words all appear in the name wins.
PEAK_BF16_FLOPS = (
    (("H100", "PCIe"), 756e12),
    (("H100", "NVL"), None),  # a different part: no figure here, say n/a
    (("H100",), 989.4e12),    # H100 SXM, "NVIDIA H100 80GB HBM3"
    (("H200", "NVL"), None),
    (("H200",), 989.4e12),
    (("A100",), 312e12),
)


def log(message):
    print(message, file=sys.stderr, flush=True)


class Skip(Exception):
    """The style cannot run with this Python (a missing package or a torch
    too old): reported as a skipped row, not a failure."""


# --------------------------------------------------------------------------
# FLOPs and MFU (bench/run imports these, so both sides use one formula)


def gpt_params(n_layer, n_embd, vocab_size, bias=True):
    """nanoGPT's get_num_params() (non_embedding=True): every parameter but
    the position embeddings, the tied token embedding counted once."""
    per_block = 12 * n_embd * n_embd + 2 * n_embd  # 4 linears, 2 LayerNorms
    if bias:
        per_block += 11 * n_embd  # linear biases 3E+E+4E+E, LayerNorm 2E
    ln_f = 2 * n_embd if bias else n_embd
    return n_layer * per_block + ln_f + vocab_size * n_embd


def gpt_flops_per_token(n_layer, n_head, n_embd, vocab_size, block_size,
                        bias=True):
    """nanoGPT's estimate_mfu: 6N + 12 L H Q T FLOPs per trained token (the
    forward's 2 per parameter and the backward's 4, plus attention)."""
    n = gpt_params(n_layer, n_embd, vocab_size, bias)
    q = n_embd // n_head
    return 6 * n + 12 * n_layer * n_head * q * block_size


def peak_bf16_flops(gpu_name):
    """The GPU's dense bf16 peak in FLOP/s, or None when not in the table."""
    if not gpu_name:
        return None
    words = gpu_name.upper()
    for keys, flops in PEAK_BF16_FLOPS:
        if all(k.upper() in words for k in keys):
            return flops
    return None


# --------------------------------------------------------------------------
# Data


def read_idx(path):
    """An IDX file (gzip or raw) as a uint8 torch tensor of its shape."""
    import torch

    # One reader for both Python benchmarks: python_dataloader.py's.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from python_dataloader import read_idx as read_idx_array

    return torch.from_numpy(read_idx_array(path).copy())


def find_file(root, stem):
    for name in (stem + ".gz", stem):
        path = os.path.join(root, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"{os.path.join(root, stem)}[.gz] not found "
                            "(pass --data-root DIR with the Fashion-MNIST "
                            "IDX files)")


def load_split(root, train):
    prefix = "train" if train else "t10k"
    images = read_idx(find_file(root, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(find_file(root, f"{prefix}-labels-idx1-ubyte")).long()
    if images.dim() != 3 or labels.shape[0] != images.shape[0]:
        raise ValueError(f"{root}: {prefix} images {tuple(images.shape)} and "
                         f"labels {tuple(labels.shape)} do not match")
    return images, labels


def make_image_dataset_class():
    import torch

    class FashionMNIST(torch.utils.data.Dataset):
        """Fashion-MNIST held as one uint8 tensor; the transform works on
        tensors (no PIL): RandomCrop(28, padding) on the zero-padded image,
        RandomHorizontalFlip, ToTensor, Normalize(MEAN, STD); `channels` 3
        expands the grey channel to three."""

        def __init__(self, images, labels, padding=0, flip=False, channels=1):
            self.size = images.shape[-1]
            self.padding = padding
            self.flip = flip
            self.channels = channels
            if padding > 0:
                images = torch.nn.functional.pad(
                    images, (padding, padding, padding, padding))
            self.images = images
            self.labels = labels

        def __len__(self):
            return self.images.shape[0]

        def __getitem__(self, index):
            image = self.images[index]
            if self.padding > 0:
                top = random.randint(0, 2 * self.padding)
                left = random.randint(0, 2 * self.padding)
                image = image[top:top + self.size, left:left + self.size]
            if self.flip and random.random() < 0.5:
                image = image.flip(-1)
            x = image.unsqueeze(0).float().div_(255).sub_(MEAN).div_(STD)
            if self.channels != 1:
                x = x.expand(self.channels, self.size, self.size)
            return x, self.labels[index]

    return FashionMNIST


def synthetic_images(torch, size, seed, train, classes=10, shape=(3, 32, 32)):
    """Uniformly random uint8 images [N, C, H, W] and int64 labels [N], as
    hotloop's data.dataset=synthetic draws them (images, then labels, from
    one generator seeded 2 * seed, +1 for the validation fifth)."""
    n = size if train else max(size // 5, 1)
    generator = torch.Generator()
    generator.manual_seed(seed * 2 + (0 if train else 1))
    images = torch.randint(0, 256, (n,) + tuple(shape), generator=generator,
                           dtype=torch.uint8)
    labels = torch.randint(0, classes, (n,), generator=generator,
                           dtype=torch.long)
    return images, labels


def make_synthetic_dataset_class():
    import torch

    class SyntheticImages(torch.utils.data.Dataset):
        """uint8 [N, C, H, W] images to float, Normalize(mean, std) per
        channel; no augmentation."""

        def __init__(self, images, labels, mean, std):
            self.images = images
            self.labels = labels
            self.mean = torch.tensor(mean).view(-1, 1, 1)
            self.std = torch.tensor(std).view(-1, 1, 1)

        def __len__(self):
            return self.images.shape[0]

        def __getitem__(self, index):
            x = self.images[index].float().div_(255).sub_(self.mean)
            return x.div_(self.std), self.labels[index]

    return SyntheticImages


def default_text():
    """The regular files of Debian's /usr/share/common-licenses, in name
    order, concatenated (the symlinks would only repeat them)."""
    folder = "/usr/share/common-licenses"
    chunks = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, "rb") as f:
                chunks.append(f.read())
    return b"".join(chunks)


def make_token_dataset_class():
    import torch

    class ByteWindows(torch.utils.data.Dataset):
        """Windows of block_size + 1 bytes starting every `stride` bytes:
        input the first block_size, target the same shifted by one."""

        def __init__(self, tokens, block_size, starts):
            self.tokens = tokens
            self.block_size = block_size
            self.starts = starts

        def __len__(self):
            return len(self.starts)

        def __getitem__(self, index):
            start = self.starts[index]
            window = self.tokens[start:start + self.block_size + 1].long()
            return window[:-1], window[1:]

    return ByteWindows


def make_uint16_dataset_class():
    import numpy as np
    import torch

    class TokenWindows(torch.utils.data.Dataset):
        """Windows of uint16 token ids (a numpy array or memmap), as
        hotloop's data.dataset=text with data.token_bytes=2."""

        def __init__(self, tokens, block_size, starts):
            self.tokens = tokens
            self.block_size = block_size
            self.starts = starts

        def __len__(self):
            return len(self.starts)

        def __getitem__(self, index):
            start = self.starts[index]
            window = torch.from_numpy(
                self.tokens[start:start + self.block_size + 1].astype(
                    np.int64))
            return window[:-1], window[1:]

    return TokenWindows


def random_tokens(count, seed):
    """count random token ids below GPT-2's 50257 as uint16, from numpy's
    default_rng(seed): the same ids for the same arguments."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return rng.integers(0, GPT2_TOKEN_VOCAB, size=count, dtype=np.uint16)


def write_tokens(path, count, seed):
    """random_tokens(count, seed) written to path (bench/run's token file
    for hotloop and this script alike)."""
    random_tokens(count, seed).tofile(path)
    return {"path": path, "tokens": count, "seed": seed,
            "bytes": os.path.getsize(path)}


# --------------------------------------------------------------------------
# Models


def fashion_cnn(widths=(16, 32), hidden=128):
    """configs/bench/cnn.yaml's model (model.channels, model.hidden): conv
    blocks without bias -> BatchNorm -> ReLU -> max-pool, then the head."""
    from torch import nn

    layers = []
    channels_in = 1
    size = 28
    for channels in widths:
        layers += [
            nn.Conv2d(channels_in, channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        ]
        channels_in = channels
        size //= 2
    layers += [
        nn.Flatten(),
        nn.Linear(channels_in * size * size, hidden),
        nn.ReLU(inplace=True),
        nn.Linear(hidden, 10),
    ]
    return nn.Sequential(*layers)


def mlp():
    from torch import nn

    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(784, 512),
        nn.ReLU(inplace=True),
        nn.Linear(512, 256),
        nn.ReLU(inplace=True),
        nn.Linear(256, 10),
    )


def resnet18(in_channels):
    """torchvision's ResNet-18 with the CIFAR stem: a 3x3 stride-1 conv1 and
    no max-pool (hotloop's model.stem=cifar)."""
    from torch import nn
    import torchvision

    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1,
                            bias=False)
    nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out",
                            nonlinearity="relu")
    model.maxpool = nn.Identity()
    return model


def make_gpt(vocab_size, block_size, n_layer, n_head, n_embd, bias=True):
    """nanoGPT's model: dropout 0, exact GELU, lm_head tied to wte."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    flash = hasattr(F, "scaled_dot_product_attention")  # torch >= 2.0

    def layer_norm():
        if bias:
            return nn.LayerNorm(n_embd)
        return nn.LayerNorm(n_embd, bias=False)  # torch >= 2.1

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
            self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
            if not flash:
                self.register_buffer(
                    "bias",
                    torch.tril(torch.ones(block_size, block_size)).view(
                        1, 1, block_size, block_size),
                    persistent=False)

        def forward(self, x):
            b, t, c = x.size()
            q, k, v = self.c_attn(x).split(c, dim=2)
            q = q.view(b, t, n_head, c // n_head).transpose(1, 2)
            k = k.view(b, t, n_head, c // n_head).transpose(1, 2)
            v = v.view(b, t, n_head, c // n_head).transpose(1, 2)
            if flash:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                att = att.masked_fill(self.bias[:, :, :t, :t] == 0,
                                      float("-inf"))
                att = F.softmax(att, dim=-1)
                y = att @ v
            y = y.transpose(1, 2).contiguous().view(b, t, c)
            return self.c_proj(y)

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = layer_norm()
            self.attn = CausalSelfAttention()
            self.ln_2 = layer_norm()
            self.mlp = Mlp()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(vocab_size, n_embd),
                wpe=nn.Embedding(block_size, n_embd),
                h=nn.ModuleList([Block() for _ in range(n_layer)]),
                ln_f=layer_norm(),
            ))
            self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # tied
            self.apply(self._init_weights)
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    nn.init.normal_(p, mean=0.0,
                                    std=0.02 / math.sqrt(2 * n_layer))

        @staticmethod
        def _init_weights(module):
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, idx):
            t = idx.size(1)
            pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
            x = self.transformer.wte(idx) + self.transformer.wpe(pos)
            for block in self.transformer.h:
                x = block(x)
            return self.lm_head(self.transformer.ln_f(x))

    return Gpt()


def gpt_shape(args):
    """(n_layer, n_head, n_embd, vocab_size, bias) of the gpt workloads."""
    if args.workload == "gpt2":
        return (GPT2["n_layer"], GPT2["n_head"], GPT2["n_embd"],
                GPT2["vocab_size"], GPT2["bias"])
    return 4, 4, 128, 256, True


def build_model(args):
    if args.workload == "cnn":
        return fashion_cnn(args.cnn_channels, args.cnn_hidden)
    if args.workload == "mlp":
        return mlp()
    if args.workload == "resnet18":
        return resnet18(args.resnet_channels)
    if args.workload == "resnet18_cifar":
        return resnet18(3)
    n_layer, n_head, n_embd, vocab, bias = gpt_shape(args)
    return make_gpt(vocab_size=vocab, block_size=args.block_size,
                    n_layer=n_layer, n_head=n_head, n_embd=n_embd, bias=bias)


# --------------------------------------------------------------------------
# Recipes


def decay_groups(model, weight_decay):
    """Weight decay on the weights of convolutions, linear layers and
    embeddings (the parameters with 2+ dimensions); none on biases and
    normalization parameters — hotloop's optimizer.no_decay_norm_and_bias."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def recipe(workload, style):
    """Batch sizes of configs/bench/<workload>.yaml (the naive loop's smaller
    batch for cnn and mlp is one of its mistakes)."""
    if workload in ("cnn", "mlp"):
        return {"batch_size": 32 if style == "naive" else 256,
                "val_batch_size": 1000}
    if workload == "resnet18":
        return {"batch_size": 32, "val_batch_size": 1000}
    if workload == "resnet18_cifar":
        return {"batch_size": 256, "val_batch_size": 1000}
    if workload == "gpt2":
        return {"batch_size": 16, "val_batch_size": 16}
    return {"batch_size": 32, "val_batch_size": 64}


def default_precision(workload, device):
    """The workload's own precision: bf16 autocast for ResNet-18 CIFAR and
    GPT-2 on CUDA (the issue's recipes), float32 everywhere else."""
    if device.type == "cuda" and workload in ("resnet18_cifar", "gpt2"):
        return "bf16-mixed"
    return "32"


def fast_update_kwargs(torch, optimizer_class, device, style):
    """The tuned styles on CUDA: the fused update where this torch's
    optimizer has one, else the multi-tensor (foreach) one. On CPU both
    measured no faster than the default per-parameter loop (torch 1.13), so
    CPU keeps the default."""
    if style not in TUNED_STYLES or device.type != "cuda":
        return {}
    import inspect

    params = inspect.signature(optimizer_class.__init__).parameters
    if "fused" in params:
        return {"fused": True}
    if "foreach" in params:
        return {"foreach": True}
    return {}


def build_optimizer(torch, workload, model, device, style, total_steps):
    if workload in ("cnn", "mlp"):
        extra = fast_update_kwargs(torch, torch.optim.AdamW, device, style)
        optimizer = torch.optim.AdamW(
            decay_groups(model, 1e-4), lr=0.004, betas=(0.9, 0.999), **extra)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=0.004, total_steps=total_steps, pct_start=0.3,
            anneal_strategy="cos", div_factor=25.0, final_div_factor=1e4,
            cycle_momentum=True, base_momentum=0.85, max_momentum=0.95)
        return optimizer, scheduler
    if workload in ("resnet18", "resnet18_cifar"):
        extra = fast_update_kwargs(torch, torch.optim.SGD, device, style)
        lr = 0.05 if workload == "resnet18" else 0.1
        optimizer = torch.optim.SGD(
            model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4,
            nesterov=False, **extra)
        return optimizer, None
    extra = fast_update_kwargs(torch, torch.optim.AdamW, device, style)
    if workload == "gpt2":
        optimizer = torch.optim.AdamW(
            decay_groups(model, 0.1), lr=6e-4, betas=(0.9, 0.95), **extra)
    else:
        optimizer = torch.optim.AdamW(
            decay_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.95), **extra)
    return optimizer, None


# --------------------------------------------------------------------------
# Arguments


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=WORKLOADS)
    parser.add_argument("--style", choices=STYLES, default="tuned")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--limit-batches", type=int, default=0,
                        help="training batches per epoch; 0: all")
    parser.add_argument("--limit-val-batches", type=int, default=0,
                        help="evaluation batches; 0: all")
    parser.add_argument("--target-acc", type=float, default=None)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads; default: every core "
                        "(tuned styles), torch's default (naive)")
    parser.add_argument("--workers", type=int, default=None,
                        help="DataLoader worker processes; default: 0 "
                        "(naive), 1 on CPU and min(4, cores / 2) on CUDA "
                        "(tuned styles)")
    parser.add_argument("--batch-size", type=int, default=0,
                        help="training batch size; 0: the recipe's")
    parser.add_argument("--cnn-channels", default="16,32",
                        help="cnn: each conv block's output channels "
                        "(model.channels of configs/bench/cnn.yaml)")
    parser.add_argument("--cnn-hidden", type=int, default=128,
                        help="cnn: the head's hidden width (model.hidden)")
    parser.add_argument("--crop-padding", type=int, default=2,
                        help="cnn: random crop after zero padding by this "
                        "much, 0: off (data.crop_padding)")
    parser.add_argument("--device", default="cpu",
                        help="cpu or cuda[:N] (default cpu)")
    parser.add_argument("--precision", default="auto",
                        choices=("auto", "32", "32-true") + PRECISIONS[1:],
                        help="auto: bf16-mixed for resnet18_cifar and gpt2 "
                        "on CUDA, 32 otherwise; 16-mixed (float16 autocast "
                        "and loss scaling) needs CUDA")
    parser.add_argument("--data-root",
                        default="/usr/share/datasets/fashion-mnist",
                        help="folder with the Fashion-MNIST IDX files")
    parser.add_argument("--text-file", default=None,
                        help="gpt_tiny: the training text (default: the "
                        "files of /usr/share/common-licenses concatenated)")
    parser.add_argument("--token-file", default=None,
                        help="gpt2: uint16 token ids below 50304 (default: "
                        f"{GPT2_TOKENS} random ones made in memory with "
                        "--seed, as --write-tokens writes them)")
    parser.add_argument("--block-size", type=int, default=0,
                        help="gpt workloads: tokens per window (default 64 "
                        "for gpt_tiny, 1024 for gpt2)")
    parser.add_argument("--stride", type=int, default=0,
                        help="gpt workloads: tokens between window starts "
                        "(default: 1 for gpt_tiny, the block size for gpt2)")
    parser.add_argument("--val-fraction", type=float, default=0.1,
                        help="gpt workloads: the file's last fraction of "
                        "windows, held out of training (default 0.1)")
    parser.add_argument("--synthetic-size", type=int, default=SYNTHETIC_SIZE,
                        help="resnet18_cifar: training images (default "
                        f"{SYNTHETIC_SIZE})")
    parser.add_argument("--resnet-channels", type=int, choices=(1, 3),
                        default=1,
                        help="resnet18: input channels; 1 feeds the grey "
                        "images as hotloop does, 3 expands them (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trace", metavar="PATH", default=None,
                        help="record torch.profiler over the first "
                        "--trace-steps training steps (each marked "
                        "ProfilerStep#N) and write its Chrome trace to PATH "
                        "(not the lightning style)")
    parser.add_argument("--trace-steps", type=int, default=13,
                        help="steps --trace records (default 13: the 10 "
                        "warm-up steps and 3 steady ones)")
    parser.add_argument("--write-tokens", metavar="PATH", default=None,
                        help="write --num-tokens random uint16 token ids "
                        "(seeded by --seed) to PATH and exit")
    parser.add_argument("--num-tokens", type=int, default=GPT2_TOKENS)
    args = parser.parse_args(argv)
    if args.write_tokens:
        if args.num_tokens < 1:
            parser.error(f"--num-tokens must be >= 1, got {args.num_tokens}")
        return args
    if args.workload is None:
        parser.error("--workload is required (or --write-tokens PATH)")
    if args.epochs < 1:
        parser.error(f"--epochs must be >= 1, got {args.epochs}")
    if args.limit_batches < 0 or args.limit_val_batches < 0:
        parser.error("--limit-batches and --limit-val-batches must be >= 0")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    if args.workers is not None and args.workers < 0:
        parser.error(f"--workers must be >= 0, got {args.workers}")
    if args.batch_size < 0 or args.block_size < 0 or args.stride < 0:
        parser.error("--batch-size, --block-size and --stride must be >= 0")
    if args.synthetic_size < 1:
        parser.error("--synthetic-size must be >= 1")
    if args.trace_steps < 1:
        parser.error(f"--trace-steps must be >= 1, got {args.trace_steps}")
    if args.trace and args.style == "lightning":
        parser.error("--trace: the lightning style is not traced (its loop is "
                     "Lightning's)")
    text = args.cnn_channels
    try:
        args.cnn_channels = tuple(int(c) for c in text.split(","))
    except ValueError:
        args.cnn_channels = ()
    if not args.cnn_channels or min(args.cnn_channels) < 1:
        parser.error("--cnn-channels: expected positive integers separated "
                     f"by commas, such as 16,32, got '{text}'")
    if args.cnn_hidden < 1 or args.crop_padding < 0:
        parser.error("--cnn-hidden must be >= 1 and --crop-padding >= 0")
    if args.precision == "32-true":
        args.precision = "32"
    if args.block_size == 0:
        args.block_size = GPT2["block_size"] if args.workload == "gpt2" else 64
    if args.stride == 0:
        args.stride = args.block_size if args.workload == "gpt2" else 1
    return args


# --------------------------------------------------------------------------
# Data loaders


def make_loaders(torch, args, device, batch_size, val_batch_size):
    """(train_loader, val_loader or None)."""
    loader_kwargs = {"num_workers": args.workers}
    if args.style in TUNED_STYLES and args.workers > 0:
        loader_kwargs.update(persistent_workers=True, prefetch_factor=2)
    if args.style in TUNED_STYLES:
        loader_kwargs["pin_memory"] = device.type == "cuda"
    generator = torch.Generator()
    generator.manual_seed(args.seed)

    def loader(dataset, batch, shuffle):
        return torch.utils.data.DataLoader(
            dataset, batch_size=batch, shuffle=shuffle,
            generator=generator if shuffle else None, **loader_kwargs)

    if args.workload in FASHION_WORKLOADS:
        dataset_class = make_image_dataset_class()
        images, labels = load_split(args.data_root, train=True)
        augment = args.workload == "cnn"
        channels = args.resnet_channels if args.workload == "resnet18" else 1
        train_set = dataset_class(images, labels,
                                  padding=args.crop_padding if augment else 0,
                                  flip=augment, channels=channels)
        val = None
        if args.workload != "resnet18":
            val_images, val_labels = load_split(args.data_root, train=False)
            val = loader(dataset_class(val_images, val_labels,
                                       channels=channels),
                         val_batch_size, False)
        return loader(train_set, batch_size, True), val

    if args.workload == "resnet18_cifar":
        # Throughput only, as configs/bench/resnet18_cifar.yaml: no
        # validation set is built.
        dataset_class = make_synthetic_dataset_class()
        images, labels = synthetic_images(torch, args.synthetic_size,
                                          args.seed, train=True)
        train_set = dataset_class(images, labels, CIFAR_MEAN, CIFAR_STD)
        return loader(train_set, batch_size, True), None

    if args.workload == "gpt2":
        import numpy as np

        if args.token_file:
            tokens = np.memmap(args.token_file, dtype=np.uint16, mode="r")
        else:
            tokens = random_tokens(GPT2_TOKENS, args.seed)
        count = len(tokens)
        dataset_class = make_uint16_dataset_class()
    else:
        dataset_class = make_token_dataset_class()
        if args.text_file:
            with open(args.text_file, "rb") as f:
                text = f.read()
        else:
            text = default_text()
        tokens = torch.frombuffer(bytearray(text), dtype=torch.uint8)
        count = len(tokens)
    windows = (count - (args.block_size + 1)) // args.stride + 1
    val_windows = int(math.floor(args.val_fraction * windows))
    if windows - val_windows < 1:
        raise ValueError(f"the token file has {count} tokens: too few for "
                         f"one training window of {args.block_size + 1}")
    starts = [i * args.stride for i in range(windows - val_windows)]
    train_set = dataset_class(tokens, args.block_size, starts)
    return loader(train_set, batch_size, True), None


# --------------------------------------------------------------------------
# Timing


class Meter:
    """Training time and samples over the whole run and steady: after the
    first WARMUP_BATCHES batches, leaving out the step of each batch shape
    first seen after them (torch.compile compiles again for a new shape,
    such as an epoch's last, smaller batch; cudnn.benchmark searches again).
    Every clock reading on CUDA follows torch.cuda.synchronize(), so queued
    kernels count to the interval that queued them."""

    def __init__(self, torch, device):
        if device.type == "cuda":
            self.sync = lambda: torch.cuda.synchronize(device)
        else:
            self.sync = lambda: None
        self.fit_start = None
        self.train_seconds = 0.0
        self.train_samples = 0
        self.steps = 0
        self.epoch_rates = []
        self.epoch_start = None
        self.epoch_samples = 0
        self.steady_start = None
        self.steady_seconds = 0.0
        self.steady_samples = 0
        self.excluded_seconds = 0.0
        self.shapes = set()
        self.new_shape_start = None
        # From the process start (seconds_since_process_start): the first
        # step's start, and the end of step WARMUP_BATCHES with the device's
        # work done.
        self.process_to_first_step = None
        self.process_to_warmup_end = None

    def now(self):
        self.sync()
        return time.perf_counter()

    def start_fit(self):
        self.fit_start = self.now()

    def elapsed(self):
        return self.now() - self.fit_start

    def start_epoch(self):
        self.epoch_start = self.now()
        self.epoch_samples = 0

    def epoch_open(self):
        return self.epoch_start is not None

    def before_step(self, shape):
        if self.process_to_first_step is None:
            self.process_to_first_step = seconds_since_process_start()
        new = shape not in self.shapes
        self.shapes.add(shape)
        if new and self.steady_start is not None:
            self.new_shape_start = self.now()

    def after_step(self, samples):
        self.steps += 1
        self.epoch_samples += samples
        if self.new_shape_start is not None:
            self.excluded_seconds += self.now() - self.new_shape_start
            self.new_shape_start = None
        elif self.steady_start is not None:
            self.steady_samples += samples
        if self.steps == WARMUP_BATCHES:
            self.steady_start = self.now()
            self.process_to_warmup_end = seconds_since_process_start()

    def end_epoch(self):
        """Closes the epoch's training time; returns its seconds."""
        end = self.now()
        seconds = end - self.epoch_start
        self.train_seconds += seconds
        self.train_samples += self.epoch_samples
        if self.steady_start is not None:
            self.steady_seconds += end - max(self.epoch_start,
                                             self.steady_start)
        self.epoch_rates.append(
            self.epoch_samples / seconds if seconds > 0 else None)
        self.epoch_start = None
        return seconds

    def samples_per_s(self):
        if self.train_seconds <= 0:
            return 0.0
        return self.train_samples / self.train_seconds

    def steady_samples_per_s(self):
        seconds = self.steady_seconds - self.excluded_seconds
        if self.steady_samples == 0 or seconds <= 0:
            return None
        return self.steady_samples / seconds


class StepTracer:
    """--trace: torch.profiler over the first `steps` training steps, each
    marked "ProfilerStep#N" from its start to the next step's (as hotloop's
    trainer.profiler=pytorch marks them), written as a Chrome trace for
    bench/trace_summary.py. CPU operators, and on CUDA the kernels, copies,
    runtime calls and the caching allocator's allocations (Kineto,
    profile_memory), as hotloop's trace records them."""

    def __init__(self, torch, path, steps, device):
        import torch.profiler as profiler
        self.torch = torch
        self.path = path
        self.steps = steps
        self.device = device
        activities = [profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(profiler.ProfilerActivity.CUDA)
        self.profiler = profiler.profile(
            activities=activities, profile_memory=device.type == "cuda")
        self.profiler.start()
        self.step = None
        self.done = False

    def begin_step(self, number):
        """Before training step `number` (from 1)."""
        if self.done:
            return
        self.end_step()
        if number > self.steps:
            self.finish()
            return
        self.step = self.torch.profiler.record_function(
            f"ProfilerStep#{number}")
        self.step.__enter__()

    def end_step(self):
        if self.step is not None:
            self.step.__exit__(None, None, None)
            self.step = None

    def finish(self):
        if self.done:
            return
        self.end_step()
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)
        self.profiler.stop()
        partial = self.path + ".tmp"
        self.profiler.export_chrome_trace(partial)
        os.replace(partial, self.path)
        self.done = True
        log(f"trace of {self.steps} steps written to {self.path}")


# --------------------------------------------------------------------------
# Training


class Run:
    """What every style shares: device, data, model, precision."""


def setup(args):
    import torch

    run = Run()
    run.torch = torch
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda but torch.cuda.is_available() is "
                           "False")
    run.device = device
    tuned = args.style in TUNED_STYLES
    if args.style in ("compile", "compile-ro") and not hasattr(torch,
                                                               "compile"):
        raise Skip(f"torch.compile needs torch >= 2.0; this is torch "
                   f"{torch.__version__}")
    if args.style == "lightning":
        run.lightning = import_lightning()  # skips before loading data
    if args.precision == "auto":
        args.precision = default_precision(args.workload, device)
    if args.precision == "16-mixed" and device.type != "cuda":
        raise ValueError("--precision 16-mixed needs --device cuda")
    if args.workers is None:
        cores = len(os.sched_getaffinity(0))
        if not tuned:
            args.workers = 0
        elif device.type == "cuda":
            args.workers = min(4, max(1, cores // 2))
        else:
            args.workers = 1
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    elif tuned:
        torch.set_num_threads(len(os.sched_getaffinity(0)))
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = tuned
        torch.cuda.reset_peak_memory_stats(device)

    r = recipe(args.workload, args.style)
    run.batch_size = args.batch_size or r["batch_size"]
    run.train_loader, run.val_loader = make_loaders(
        torch, args, device, run.batch_size, r["val_batch_size"])
    run.channels_last = (tuned and device.type == "cuda" and
                         args.workload in ("cnn", "resnet18",
                                           "resnet18_cifar"))
    model = build_model(args).to(device)
    if run.channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    run.model = model
    run.is_gpt = args.workload in TEXT_WORKLOADS
    steps = len(run.train_loader)
    if args.limit_batches:
        steps = min(steps, args.limit_batches)
    run.steps_per_epoch = steps
    run.total_steps = args.epochs * steps

    dtype = {"bf16-mixed": torch.bfloat16,
             "16-mixed": torch.float16}.get(args.precision)

    def autocast():
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=dtype)

    run.autocast = autocast

    def loss_of(output, y):
        if run.is_gpt:
            return torch.nn.functional.cross_entropy(
                output.view(-1, output.size(-1)), y.view(-1),
                ignore_index=-1)
        return torch.nn.functional.cross_entropy(output, y)

    run.loss_of = loss_of
    log(f"{args.workload} {args.style}: {len(run.train_loader.dataset)} "
        f"training samples, batch {run.batch_size}, {run.steps_per_epoch} "
        f"batches/epoch, {args.epochs} epochs, "
        f"{torch.get_num_threads()} intra-op threads, {args.workers} loader "
        f"workers, device {device}, precision {args.precision}")
    return run


def to_device(run, args, x, y):
    torch = run.torch
    if args.style == "naive":
        return x.to(run.device), y.to(run.device)
    x = x.to(run.device, non_blocking=True)
    y = y.to(run.device, non_blocking=True)
    if run.channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    return x, y


def evaluate(run, model, args, mark_step):
    """Accuracy over the validation loader (the first --limit-val-batches
    batches)."""
    torch = run.torch
    loader = run.val_loader
    model.eval()
    if args.style != "naive":
        correct = torch.zeros((), dtype=torch.long, device=run.device)
        seen = 0
        with torch.inference_mode(), run.autocast():
            for i, (x, y) in enumerate(loader):
                if args.limit_val_batches and i >= args.limit_val_batches:
                    break
                x, y = to_device(run, args, x, y)
                mark_step()
                correct += (model(x).argmax(1) == y).sum()
                seen += y.shape[0]
        accuracy = correct.item() / max(seen, 1)
    else:
        # The classic mistake: no torch.no_grad(), so every batch builds
        # the autograd graph it never uses.
        correct = 0
        seen = 0
        with run.autocast():
            for i, (x, y) in enumerate(loader):
                if args.limit_val_batches and i >= args.limit_val_batches:
                    break
                x, y = to_device(run, args, x, y)
                output = model(x)
                correct += (output.argmax(1) == y).sum().item()
                seen += y.shape[0]
        accuracy = correct / max(seen, 1)
    model.train()
    return accuracy


def make_scaler(torch, device, precision):
    """Loss scaling for float16 autocast (16-mixed), else None."""
    if precision != "16-mixed":
        return None
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(device.type)  # torch >= 2.3
    return torch.cuda.amp.GradScaler()


def train_eager(args, run):
    """naive, tuned, compile and compile-ro: one hand-written loop."""
    torch = run.torch
    tuned = args.style in TUNED_STYLES
    model = run.model
    optimizer, scheduler = build_optimizer(
        torch, args.workload, run.model, run.device, args.style,
        run.total_steps)
    scaler = make_scaler(torch, run.device, args.precision)
    mark_step = lambda: None  # noqa: E731
    if args.style in ("compile", "compile-ro"):
        mode = "reduce-overhead" if args.style == "compile-ro" else "default"
        model = torch.compile(run.model, mode=mode)
        mark = getattr(getattr(torch, "compiler", None),
                       "cudagraph_mark_step_begin", None)
        if args.style == "compile-ro" and mark is not None:
            # CUDA graphs reuse their output memory; this tells them where
            # one step ends (torch >= 2.1), as the compile docs ask of
            # training loops.
            mark_step = mark
    meter = Meter(torch, run.device)
    evals = []
    time_to_target = None
    final_acc = None
    tracer = (StepTracer(torch, args.trace, args.trace_steps, run.device)
              if args.trace else None)
    meter.start_fit()
    for epoch in range(args.epochs):
        meter.start_epoch()
        losses = []            # naive
        running = None         # tuned: loss.detach() summed between logs
        running_steps = 0
        loss_sum = 0.0         # tuned: the epoch's losses, as floats
        epoch_steps = 0
        for i, (x, y) in enumerate(run.train_loader):
            if i >= run.steps_per_epoch:
                break
            if tracer is not None:
                tracer.begin_step(meter.steps + 1)
            meter.before_step(tuple(x.shape))
            x, y = to_device(run, args, x, y)
            optimizer.zero_grad(set_to_none=tuned)
            mark_step()
            with run.autocast():
                loss = run.loss_of(model(x), y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
            if scheduler is not None:
                scheduler.step()
            epoch_steps += 1
            if tuned:
                detached = loss.detach()
                running = detached if running is None else running + detached
                running_steps += 1
                if running_steps == LOG_EVERY:
                    value = running.item()
                    loss_sum += value
                    log(f"  epoch {epoch + 1} step {i + 1}/"
                        f"{run.steps_per_epoch} loss "
                        f"{value / running_steps:.4f}")
                    running, running_steps = None, 0
            else:
                losses.append(loss)  # keeps every step's graph alive
            meter.after_step(y.shape[0])
        if tracer is not None:
            tracer.end_step()  # evaluation is no step's
        epoch_samples = meter.epoch_samples
        epoch_seconds = meter.end_epoch()
        if tuned:
            if running is not None:
                loss_sum += running.item()
            train_loss = loss_sum / max(epoch_steps, 1)
        else:
            train_loss = torch.stack(losses).mean().item()
        line = (f"epoch {epoch + 1}/{args.epochs}  train_loss "
                f"{train_loss:.4f}  {epoch_samples / epoch_seconds:.0f} "
                f"samples/s  {epoch_seconds:.1f}s")
        if run.val_loader is not None:
            acc = evaluate(run, model, args, mark_step)
            elapsed = meter.elapsed()
            final_acc = acc
            evals.append({"epoch": epoch + 1, "acc": acc,
                          "elapsed_s": elapsed})
            if (time_to_target is None and args.target_acc is not None and
                    acc >= args.target_acc):
                time_to_target = elapsed
            line += f"  val_acc {acc:.4f}  elapsed {elapsed:.1f}s"
        log(line)
    if tracer is not None:
        tracer.finish()
    return meter, evals, final_acc, time_to_target, {}


def import_lightning():
    """(lightning.pytorch or pytorch_lightning, "name version")."""
    try:
        import lightning
        import lightning.pytorch as pl
        return pl, f"lightning {lightning.__version__}"
    except ImportError:
        pass
    try:
        import pytorch_lightning as pl
        return pl, f"pytorch_lightning {pl.__version__}"
    except ImportError:
        raise Skip("neither `lightning` nor `pytorch_lightning` can be "
                   "imported (pip install lightning)")


def lightning_precision(pl, precision):
    """Our precision names in the installed Lightning's spelling."""
    major = int(pl.__version__.split(".")[0])
    if major >= 2:
        return {"32": "32-true", "bf16-mixed": "bf16-mixed",
                "16-mixed": "16-mixed"}[precision]
    return {"32": 32, "bf16-mixed": "bf16", "16-mixed": 16}[precision]


def train_lightning(args, run):
    """The tuned recipe as a LightningModule, run by lightning's Trainer;
    a callback times it the way Meter times the hand-written loop."""
    torch = run.torch
    pl, version = run.lightning
    meter = Meter(torch, run.device)
    state = {"evals": [], "final_acc": None, "time_to_target": None}

    class Module(pl.LightningModule):
        def __init__(self, net):
            super().__init__()
            self.net = net
            self.correct = None
            self.seen = 0

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            if run.channels_last and x.dim() == 4:
                x = x.contiguous(memory_format=torch.channels_last)
            return run.loss_of(self.net(x), y)

        def on_validation_epoch_start(self):
            self.correct = torch.zeros((), dtype=torch.long,
                                       device=self.device)
            self.seen = 0

        def validation_step(self, batch, batch_idx):
            x, y = batch
            if run.channels_last and x.dim() == 4:
                x = x.contiguous(memory_format=torch.channels_last)
            self.correct += (self.net(x).argmax(1) == y).sum()
            self.seen += y.shape[0]

        def configure_optimizers(self):
            optimizer, scheduler = build_optimizer(
                torch, args.workload, self.net, run.device, args.style,
                run.total_steps)
            if scheduler is None:
                return optimizer
            return {"optimizer": optimizer,
                    "lr_scheduler": {"scheduler": scheduler,
                                     "interval": "step"}}

    class Timing(pl.Callback):
        def on_train_start(self, trainer, module):
            meter.start_fit()

        def on_train_epoch_start(self, trainer, module):
            meter.start_epoch()

        def on_train_batch_start(self, trainer, module, batch, batch_idx,
                                 *rest):
            meter.before_step(tuple(batch[0].shape))

        def on_train_batch_end(self, trainer, module, outputs, batch,
                               batch_idx, *rest):
            meter.after_step(batch[1].shape[0])

        def on_validation_start(self, trainer, module):
            # Lightning validates inside the training epoch, after its last
            # batch: the epoch's training time ends here.
            if not trainer.sanity_checking and meter.epoch_open():
                meter.end_epoch()

        def on_validation_end(self, trainer, module):
            if trainer.sanity_checking or module.correct is None:
                return
            acc = module.correct.item() / max(module.seen, 1)
            elapsed = meter.elapsed()
            epoch = len(state["evals"]) + 1
            state["evals"].append({"epoch": epoch, "acc": acc,
                                   "elapsed_s": elapsed})
            state["final_acc"] = acc
            if (state["time_to_target"] is None and
                    args.target_acc is not None and acc >= args.target_acc):
                state["time_to_target"] = elapsed
            log(f"epoch {epoch}/{args.epochs}  val_acc {acc:.4f}  elapsed "
                f"{elapsed:.1f}s")

        def on_train_epoch_end(self, trainer, module):
            if meter.epoch_open():
                meter.end_epoch()

    if run.device.type == "cuda":
        accelerator = "gpu"
        devices = [run.device.index] if run.device.index is not None else 1
    else:
        accelerator, devices = "cpu", 1
    has_val = run.val_loader is not None
    trainer = pl.Trainer(
        accelerator=accelerator,
        devices=devices,
        max_epochs=args.epochs,
        limit_train_batches=(args.limit_batches if args.limit_batches
                             else 1.0),
        limit_val_batches=((args.limit_val_batches or 1.0) if has_val
                           else 0),
        num_sanity_val_steps=0,
        precision=lightning_precision(pl, args.precision),
        benchmark=True,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Timing()],
    )
    module = Module(run.model)
    trainer.fit(module, train_dataloaders=run.train_loader,
                val_dataloaders=run.val_loader if has_val else None)
    return (meter, state["evals"], state["final_acc"],
            state["time_to_target"], {"lightning": version})


def train(args):
    run = setup(args)
    torch = run.torch
    if args.style == "lightning":
        meter, evals, final_acc, ttt, extra = train_lightning(args, run)
    else:
        meter, evals, final_acc, ttt, extra = train_eager(args, run)

    device = run.device
    samples_per_s = meter.samples_per_s()
    steady = meter.steady_samples_per_s()
    result = {
        "impl": f"python-{args.style}",
        "workload": args.workload,
        "style": args.style,
        "samples_per_s": samples_per_s,
        "steady_samples_per_s": steady,
        "epoch_samples_per_s": meter.epoch_rates,
        "epochs": args.epochs,
        "steps": meter.steps,
        "final_acc": final_acc,
        "time_to_target_s": ttt,
        "peak_rss_mb":
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "wall_s": time.perf_counter() - _PROCESS_START,
        "evals": evals,
        "batch_size": run.batch_size,
        "train_seconds": meter.train_seconds,
        "threads": torch.get_num_threads(),
        "workers": args.workers,
        "device": str(device),
        "process_to_first_step_s": meter.process_to_first_step,
        "process_to_step10_s": meter.process_to_warmup_end,
        "precision": args.precision,
        "channels_last": run.channels_last,
        "torch": torch.__version__,
    }
    result.update(extra)
    if device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(device)
        result["cuda_max_allocated_mb"] = (
            torch.cuda.max_memory_allocated(device) / 2**20)
        result["cuda_max_reserved_mb"] = (
            torch.cuda.max_memory_reserved(device) / 2**20)
    if run.is_gpt:
        n_layer, n_head, n_embd, vocab, bias = gpt_shape(args)
        result["block_size"] = args.block_size
        result["tokens_per_s"] = samples_per_s * args.block_size
        result["steady_tokens_per_s"] = (
            steady * args.block_size if steady else None)
        flops = gpt_flops_per_token(n_layer, n_head, n_embd, vocab,
                                    args.block_size, bias)
        result["flops_per_token"] = flops
        result["params_non_embedding"] = gpt_params(n_layer, n_embd, vocab,
                                                    bias)
        peak = peak_bf16_flops(result.get("gpu"))
        rate = result["steady_tokens_per_s"] or result["tokens_per_s"]
        result["peak_flops"] = peak
        result["mfu"] = rate * flops / peak if peak else None
    return result


def main():
    args = parse_args()
    # Libraries (Lightning, torch.compile) may print to stdout: send all of
    # it to stderr, so that stdout carries only the JSON line.
    stdout = sys.stdout
    sys.stdout = sys.stderr
    status = 0
    try:
        if args.write_tokens:
            result = write_tokens(args.write_tokens, args.num_tokens,
                                  args.seed)
        else:
            try:
                import torch  # noqa: F401
                import torchvision  # noqa: F401
            except ImportError as e:
                raise RuntimeError(f"{sys.executable} cannot import {e.name} "
                                   "(use a Python with torch and "
                                   "torchvision, e.g. /usr/bin/python3)")
            result = train(args)
    except Skip as e:
        result, status = {"skipped": str(e)}, 3
        log(f"skipped: {e}")
    except Exception as e:
        result, status = {"error": f"{type(e).__name__}: {e}"}, 2
        log(f"error: {type(e).__name__}: {e}")
    print(json.dumps(result), file=stdout, flush=True)
    sys.exit(status)


if __name__ == "__main__":
    main()
