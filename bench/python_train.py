#!/usr/bin/env python3
"""hotloop's benchmark workloads trained in plain PyTorch: the Python baselines.

The Python rows of bench/run. Each workload mirrors hotloop's recipe in
configs/bench/<workload>.yaml — same model, data, augmentation, optimizer,
schedule and batch size — so that the ratios bench/run prints compare loops,
not recipes. Two styles:

  naive  what the training-speed guides warn about: DataLoader(num_workers=0),
         batch 32 for cnn/mlp, zero_grad(set_to_none=False), every loss kept
         as a tensor in a list until the epoch ends, evaluation without
         torch.no_grad(), torch's default thread count.
  tuned  every tip that applies: one persistent prefetching DataLoader worker
         (pinned memory on CUDA), the recipe's batch size,
         zero_grad(set_to_none=True), loss.item() only every 50 steps,
         evaluation in eval mode under torch.inference_mode(),
         torch.set_num_threads(--threads), and on CUDA cudnn.benchmark,
         channels_last, the fused (or foreach) optimizer update and optional
         bf16 autocast (--precision bf16-mixed).

Usage:
  /usr/bin/python3 bench/python_train.py --workload cnn|mlp|resnet18|gpt_tiny
      [--style naive|tuned] [--epochs N] [--limit-batches N] [--target-acc X]
      [--threads N] [--device cpu|cuda] [--precision 32|bf16-mixed]
      [--data-root DIR] [--text-file PATH] [--seed N]

Progress goes to stderr; the only output on stdout is one JSON line:
impl, workload, samples_per_s (training samples / training seconds, evaluation
excluded), epochs, steps, final_acc, time_to_target_s (seconds from the start
of training to the end of the first evaluation reaching --target-acc),
peak_rss_mb, wall_s, tokens_per_s (gpt_tiny), evals. Failures print
{"error": "..."} and exit with status 2.
"""

import time

_PROCESS_START = time.perf_counter()

import argparse
import gzip
import json
import math
import os
import random
import resource
import sys

MEAN = 0.2860
STD = 0.3530
IMAGE_WORKLOADS = ("cnn", "mlp", "resnet18")
WORKLOADS = IMAGE_WORKLOADS + ("gpt_tiny",)
LOG_EVERY = 50  # tuned: loss.item() once per this many steps


def log(message):
    print(message, file=sys.stderr, flush=True)


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


# --------------------------------------------------------------------------
# Models


def fashion_cnn():
    from torch import nn

    layers = []
    channels_in = 1
    for channels in (16, 32):
        layers += [
            nn.Conv2d(channels_in, channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        ]
        channels_in = channels
    layers += [
        nn.Flatten(),
        nn.Linear(32 * 7 * 7, 128),
        nn.ReLU(inplace=True),
        nn.Linear(128, 10),
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


def make_gpt(vocab_size, block_size, n_layer, n_head, n_embd):
    """nanoGPT's model: dropout 0, biases, exact GELU, lm_head tied to wte."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    flash = hasattr(F, "scaled_dot_product_attention")  # torch >= 2.0

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)
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
            self.c_fc = nn.Linear(n_embd, 4 * n_embd)
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(n_embd)
            self.attn = CausalSelfAttention()
            self.ln_2 = nn.LayerNorm(n_embd)
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
                ln_f=nn.LayerNorm(n_embd),
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
    """Batch size and the rest of configs/bench/<workload>.yaml."""
    if workload in ("cnn", "mlp"):
        return {"batch_size": 32 if style == "naive" else 256,
                "val_batch_size": 1000}
    if workload == "resnet18":
        return {"batch_size": 32, "val_batch_size": 1000}
    return {"batch_size": 32, "val_batch_size": 64}


def optimizer_kwargs(torch, device, style):
    """tuned on CUDA: the fused AdamW update where torch has it, else the
    multi-tensor (foreach) one. On CPU both measured no faster than the
    default per-parameter loop (torch 1.13), so CPU keeps the default."""
    if style != "tuned" or device.type != "cuda":
        return {}
    import inspect

    params = inspect.signature(torch.optim.AdamW.__init__).parameters
    if "fused" in params:
        return {"fused": True}
    if "foreach" in params:
        return {"foreach": True}
    return {}


def build_optimizer(torch, workload, model, device, style, total_steps):
    extra = optimizer_kwargs(torch, device, style)
    if workload in ("cnn", "mlp"):
        optimizer = torch.optim.AdamW(
            decay_groups(model, 1e-4), lr=0.004, betas=(0.9, 0.999), **extra)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=0.004, total_steps=total_steps, pct_start=0.3,
            anneal_strategy="cos", div_factor=25.0, final_div_factor=1e4,
            cycle_momentum=True, base_momentum=0.85, max_momentum=0.95)
        return optimizer, scheduler
    if workload == "resnet18":
        if extra.pop("fused", None):
            extra["foreach"] = True
        optimizer = torch.optim.SGD(
            model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4,
            nesterov=False, **extra)
        return optimizer, None
    optimizer = torch.optim.AdamW(
        decay_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.95), **extra)
    return optimizer, None


# --------------------------------------------------------------------------
# Training


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=WORKLOADS, required=True)
    parser.add_argument("--style", choices=("naive", "tuned"),
                        default="tuned")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--limit-batches", type=int, default=0,
                        help="training batches per epoch; 0: all")
    parser.add_argument("--limit-val-batches", type=int, default=0,
                        help="evaluation batches; 0: all")
    parser.add_argument("--target-acc", type=float, default=None)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads; default: every core "
                        "(tuned), torch's default (naive)")
    parser.add_argument("--device", default="cpu",
                        help="cpu or cuda[:N] (default cpu)")
    parser.add_argument("--precision", choices=("32", "bf16-mixed"),
                        default="32")
    parser.add_argument("--data-root",
                        default="/usr/share/datasets/fashion-mnist",
                        help="folder with the Fashion-MNIST IDX files")
    parser.add_argument("--text-file", default=None,
                        help="gpt_tiny: the training text (default: the "
                        "files of /usr/share/common-licenses concatenated)")
    parser.add_argument("--block-size", type=int, default=64,
                        help="gpt_tiny: tokens per window (default 64)")
    parser.add_argument("--stride", type=int, default=1,
                        help="gpt_tiny: bytes between window starts "
                        "(default 1: a window at every offset)")
    parser.add_argument("--val-fraction", type=float, default=0.1,
                        help="gpt_tiny: the text's last fraction of windows, "
                        "held out of training (default 0.1)")
    parser.add_argument("--resnet-channels", type=int, choices=(1, 3),
                        default=1,
                        help="resnet18: input channels; 1 feeds the grey "
                        "images as hotloop does, 3 expands them (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error(f"--epochs must be >= 1, got {args.epochs}")
    if args.limit_batches < 0 or args.limit_val_batches < 0:
        parser.error("--limit-batches and --limit-val-batches must be >= 0")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    if args.block_size < 1 or args.stride < 1:
        parser.error("--block-size and --stride must be >= 1")
    return args


def make_loaders(torch, args, device, batch_size, val_batch_size):
    """(train_loader, val_loader or None, samples per training batch)."""
    tuned = args.style == "tuned"
    loader_kwargs = {"num_workers": 0}
    if tuned:
        loader_kwargs = {"num_workers": 1, "persistent_workers": True,
                         "prefetch_factor": 2,
                         "pin_memory": device.type == "cuda"}
    generator = torch.Generator()
    generator.manual_seed(args.seed)

    if args.workload in IMAGE_WORKLOADS:
        dataset_class = make_image_dataset_class()
        images, labels = load_split(args.data_root, train=True)
        augment = args.workload == "cnn"
        channels = args.resnet_channels if args.workload == "resnet18" else 1
        train_set = dataset_class(images, labels, padding=2 if augment else 0,
                                  flip=augment, channels=channels)
        train = torch.utils.data.DataLoader(
            train_set, batch_size=batch_size, shuffle=True,
            generator=generator, **loader_kwargs)
        val = None
        if args.workload != "resnet18":
            val_images, val_labels = load_split(args.data_root, train=False)
            val_set = dataset_class(val_images, val_labels, channels=channels)
            val = torch.utils.data.DataLoader(
                val_set, batch_size=val_batch_size, shuffle=False,
                **loader_kwargs)
        return train, val

    dataset_class = make_token_dataset_class()
    if args.text_file:
        with open(args.text_file, "rb") as f:
            text = f.read()
    else:
        text = default_text()
    tokens = torch.frombuffer(bytearray(text), dtype=torch.uint8)
    windows = (len(tokens) - (args.block_size + 1)) // args.stride + 1
    val_windows = int(math.floor(args.val_fraction * windows))
    if windows - val_windows < 1:
        raise ValueError(f"the text has {len(tokens)} bytes: too short for "
                         f"one training window of {args.block_size + 1}")
    starts = [i * args.stride for i in range(windows - val_windows)]
    train_set = dataset_class(tokens, args.block_size, starts)
    train = torch.utils.data.DataLoader(
        train_set, batch_size=batch_size, shuffle=True, generator=generator,
        **loader_kwargs)
    return train, None


def evaluate(torch, model, loader, device, args, autocast):
    """Accuracy over `loader` (the first --limit-val-batches batches)."""
    tuned = args.style == "tuned"
    model.eval()
    if tuned:
        correct = torch.zeros((), dtype=torch.long, device=device)
        seen = 0
        with torch.inference_mode(), autocast():
            for i, (x, y) in enumerate(loader):
                if args.limit_val_batches and i >= args.limit_val_batches:
                    break
                x = x.to(device, non_blocking=True)
                y = y.to(device, non_blocking=True)
                if device.type == "cuda" and x.dim() == 4:
                    x = x.contiguous(memory_format=torch.channels_last)
                correct += (model(x).argmax(1) == y).sum()
                seen += y.shape[0]
        accuracy = correct.item() / max(seen, 1)
    else:
        # The classic mistake: no torch.no_grad(), so every batch builds
        # the autograd graph it never uses.
        correct = 0
        seen = 0
        with autocast():
            for i, (x, y) in enumerate(loader):
                if args.limit_val_batches and i >= args.limit_val_batches:
                    break
                x, y = x.to(device), y.to(device)
                output = model(x)
                correct += (output.argmax(1) == y).sum().item()
                seen += y.shape[0]
        accuracy = correct / max(seen, 1)
    model.train()
    return accuracy


def train(args):
    import contextlib

    import torch
    import torch.nn.functional as F

    tuned = args.style == "tuned"
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda but torch.cuda.is_available() is "
                           "False")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    elif tuned:
        torch.set_num_threads(len(os.sched_getaffinity(0)))
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = tuned

    def autocast():
        if args.precision == "bf16-mixed":
            return torch.autocast(device_type=device.type,
                                  dtype=torch.bfloat16)
        return contextlib.nullcontext()

    r = recipe(args.workload, args.style)
    batch_size = r["batch_size"]
    train_loader, val_loader = make_loaders(
        torch, args, device, batch_size, r["val_batch_size"])

    if args.workload == "cnn":
        model = fashion_cnn()
    elif args.workload == "mlp":
        model = mlp()
    elif args.workload == "resnet18":
        model = resnet18(args.resnet_channels)
    else:
        model = make_gpt(vocab_size=256, block_size=args.block_size,
                         n_layer=4, n_head=4, n_embd=128)
    model = model.to(device)
    channels_last = (tuned and device.type == "cuda" and
                     args.workload in ("cnn", "resnet18"))
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()

    steps_per_epoch = len(train_loader)
    if args.limit_batches:
        steps_per_epoch = min(steps_per_epoch, args.limit_batches)
    total_steps = args.epochs * steps_per_epoch
    optimizer, scheduler = build_optimizer(
        torch, args.workload, model, device, args.style, total_steps)
    is_gpt = args.workload == "gpt_tiny"

    def loss_of(output, y):
        if is_gpt:
            return F.cross_entropy(output.view(-1, output.size(-1)),
                                   y.view(-1), ignore_index=-1)
        return F.cross_entropy(output, y)

    log(f"{args.workload} {args.style}: {len(train_loader.dataset)} "
        f"training samples, batch {batch_size}, {steps_per_epoch} "
        f"batches/epoch, {args.epochs} epochs, "
        f"{torch.get_num_threads()} intra-op threads, device {device}, "
        f"precision {args.precision}")

    evals = []
    train_seconds = 0.0
    train_samples = 0
    steps = 0
    time_to_target = None
    final_acc = None
    start = time.perf_counter()
    for epoch in range(args.epochs):
        epoch_start = time.perf_counter()
        epoch_samples = 0
        epoch_steps = 0
        losses = []            # naive
        running = None         # tuned: loss.detach() summed between logs
        running_steps = 0
        loss_sum = 0.0         # tuned: the epoch's losses, as floats
        for i, (x, y) in enumerate(train_loader):
            if i >= steps_per_epoch:
                break
            if tuned:
                x = x.to(device, non_blocking=True)
                y = y.to(device, non_blocking=True)
                if channels_last:
                    x = x.contiguous(memory_format=torch.channels_last)
                optimizer.zero_grad(set_to_none=True)
            else:
                x, y = x.to(device), y.to(device)
                optimizer.zero_grad(set_to_none=False)
            with autocast():
                loss = loss_of(model(x), y)
            loss.backward()
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            steps += 1
            epoch_steps += 1
            epoch_samples += y.shape[0]
            if tuned:
                detached = loss.detach()
                running = detached if running is None else running + detached
                running_steps += 1
                if running_steps == LOG_EVERY:
                    value = running.item()
                    loss_sum += value
                    log(f"  epoch {epoch + 1} step {i + 1}/{steps_per_epoch}"
                        f" loss {value / running_steps:.4f}")
                    running, running_steps = None, 0
            else:
                losses.append(loss)  # keeps every step's graph alive
        if tuned:
            if running is not None:
                loss_sum += running.item()
            train_loss = loss_sum / max(epoch_steps, 1)
        else:
            train_loss = torch.stack(losses).mean().item()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        epoch_seconds = time.perf_counter() - epoch_start
        train_seconds += epoch_seconds
        train_samples += epoch_samples
        line = (f"epoch {epoch + 1}/{args.epochs}  train_loss "
                f"{train_loss:.4f}  {epoch_samples / epoch_seconds:.0f} "
                f"samples/s  {epoch_seconds:.1f}s")
        if val_loader is not None:
            acc = evaluate(torch, model, val_loader, device, args, autocast)
            elapsed = time.perf_counter() - start
            final_acc = acc
            evals.append({"epoch": epoch + 1, "acc": acc,
                          "elapsed_s": elapsed})
            if (time_to_target is None and args.target_acc is not None and
                    acc >= args.target_acc):
                time_to_target = elapsed
            line += f"  val_acc {acc:.4f}  elapsed {elapsed:.1f}s"
        log(line)

    samples_per_s = train_samples / train_seconds if train_seconds > 0 else 0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "impl": f"python-{args.style}",
        "workload": args.workload,
        "samples_per_s": samples_per_s,
        "epochs": args.epochs,
        "steps": steps,
        "final_acc": final_acc,
        "time_to_target_s": time_to_target,
        "peak_rss_mb": peak_kb / 1024.0,
        "wall_s": time.perf_counter() - _PROCESS_START,
        "tokens_per_s": samples_per_s * args.block_size if is_gpt else None,
        "evals": evals,
        "batch_size": batch_size,
        "train_seconds": train_seconds,
        "threads": torch.get_num_threads(),
        "device": str(device),
        "precision": args.precision,
        "torch": torch.__version__,
    }


def main():
    args = parse_args()
    try:
        try:
            import torch  # noqa: F401
            import torchvision  # noqa: F401
        except ImportError as e:
            raise RuntimeError(f"{sys.executable} cannot import {e.name} "
                               "(use /usr/bin/python3, Debian's PyTorch)")
        result = train(args)
    except Exception as e:
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
        log(f"error: {type(e).__name__}: {e}")
        sys.exit(2)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
