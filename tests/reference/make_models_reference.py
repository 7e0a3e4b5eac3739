#!/usr/bin/env python3
"""Writes the reference files of tests/models/models_test.cpp: parameter
names, shapes and forward outputs of the PyTorch models that hotloop::models
reproduces (torchvision's ResNet-18/34, nanoGPT's GPT, a plain MLP).

Run with a Python that has PyTorch 1.13 or later and torchvision:

    /usr/bin/python3 tests/reference/make_models_reference.py

Both files hold one record a line (lines starting with '#' are comments):

    <case> <field> <name> <shape> <value> <value> ...

with <shape> written as [d0,d1,...] ([] for a scalar) and values flattened
row-major. Fields:

  state   (resnet_state_dicts.txt) a state_dict entry; no values.
  count   parameter counts: the number in the first value.
  param   a parameter, as integers k meaning k / 1024 (PARAM_SCALE). Weights
          are PyTorch's initialisation rounded to that grid, so C++ and Python
          hold bit-identical values.
  input   a float input, as integers k meaning k / 64 (INPUT_SCALE).
  tokens  int64 token ids (also `targets`, where -1 is ignored).
  output  the expected output, floats with 8 significant digits.
  loss    the expected loss, likewise.

The ResNet forward cases (resnet18_cifar, resnet50_cifar,
resnext50_32x4d_cifar) have no `param` lines: both languages
set every state_dict entry with deterministic_fill() below, in state_dict
order, and only the input and the logits are stored.
"""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
PARAM_SCALE = 1024
INPUT_SCALE = 64


def shape_str(shape):
    return "[" + ",".join(str(d) for d in shape) + "]"


def line(case, field, name, shape, values=()):
    parts = [case, field, name, shape_str(shape)]
    parts += [str(v) for v in values]
    return " ".join(parts)


def float_line(case, field, name, tensor):
    values = [f"{float(v):.8g}" for v in tensor.detach().flatten().tolist()]
    return line(case, field, name, tensor.shape, values)


def quantize_(tensor, scale):
    """Rounds `tensor` in place to multiples of 1/scale; returns the ints."""
    k = torch.round(tensor.detach() * scale).to(torch.int64)
    with torch.no_grad():
        tensor.copy_(k.to(tensor.dtype) / scale)
    return k


def param_lines(case, module):
    out = []
    for name, p in module.named_parameters():
        k = quantize_(p, PARAM_SCALE)
        out.append(line(case, "param", name, p.shape, k.flatten().tolist()))
    return out


def quantized_input(case, shape, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    k = quantize_(x, INPUT_SCALE)
    return x, line(case, "input", "x", x.shape, k.flatten().tolist())


# --- ResNet (torchvision) ------------------------------------------------


def resnet(arch, stem, num_classes):
    """torchvision's `arch` (resnet18, resnext50_32x4d, ...)."""
    model = getattr(torchvision.models, arch)(num_classes=num_classes)
    if stem == "cifar":
        # The usual CIFAR recipe: 3x3 stride-1 stem, no max-pool.
        model.conv1 = nn.Conv2d(3, 64, 3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    return model


def deterministic_fill(state_dict):
    """Sets every entry from integer arithmetic that C++ repeats exactly:
    entry i of n elements gets u = ((j*j*7 + j*7919 + (i+1)*104729) % P
    - H) / H with P = 1000003 (prime), H = 500001, for j in 0..n-1: values
    in [-1, 1], spread like uniform noise; then scaled per kind of entry."""
    with torch.no_grad():
        for i, (name, t) in enumerate(state_dict.items()):
            if name.endswith("num_batches_tracked"):
                continue
            j = torch.arange(t.numel(), dtype=torch.int64)
            k = (j * j * 7 + j * 7919 + (i + 1) * 104729) % 1000003 - 500001
            u = k.to(torch.float64) / 500001.0
            if name.endswith("running_var"):
                v = u * 0.5 + 1.5
            elif name.endswith("running_mean"):
                v = u * 0.1
            elif t.dim() >= 2:  # conv / fc weight: kaiming-uniform scale
                fan_in = t.numel() // t.shape[0]
                v = u * math.sqrt(6.0 / fan_in)
            elif name.endswith("weight"):  # BatchNorm weight
                v = u * 0.1 + 0.9
            else:  # biases
                v = u * 0.1
            t.copy_(v.to(t.dtype).reshape(t.shape))


def conv_linear_flops(model, shape):
    """Forward FLOPs of one input: 2 x the multiply-adds of every Conv2d and
    Linear, counted from their outputs by forward hooks."""
    total = [0]

    def hook(module, inputs, output):
        if isinstance(module, nn.Conv2d):
            total[0] += (2 * module.in_channels // module.groups
                         * module.kernel_size[0] * module.kernel_size[1]
                         * output.numel())
        elif isinstance(module, nn.Linear):
            total[0] += 2 * module.in_features * output.numel()

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    was_training = model.training
    model.eval()
    with torch.no_grad():
        model(torch.zeros(shape))
    model.train(was_training)
    for handle in handles:
        handle.remove()
    return total[0]


def resnet_state_lines():
    out = []
    counts = {}
    cases = [(arch, stem) for arch in ("resnet18", "resnet34", "resnet50")
             for stem in ("imagenet", "cifar")]
    cases += [(arch, "imagenet") for arch in
              ("resnet101", "resnet152", "resnext50_32x4d", "wide_resnet50_2")]
    for arch, stem in cases:
        classes = 1000 if stem == "imagenet" else 10
        case = f"{arch}_{stem}"
        model = resnet(arch, stem, classes)
        for name, t in model.state_dict().items():
            out.append(line(case, "state", name, t.shape))
        n = sum(p.numel() for p in model.parameters())
        out.append(line(case, "count", "params", [], [n]))
        counts[case] = n
        size = 224 if stem == "imagenet" else 32
        out.append(line(case, "count", f"flops_{size}", [],
                        [conv_linear_flops(model, (1, 3, size, size))]))
    assert counts["resnet18_imagenet"] == 11689512, counts
    assert counts["resnet34_imagenet"] == 21797672, counts
    assert counts["resnet50_imagenet"] == 25557032, counts
    return out


def resnet_forward_lines():
    out = []
    # The Bottleneck cases come after the original one, whose seed they
    # reuse, so that resnet18_cifar's lines stay as they were.
    for arch in ("resnet18", "resnet50", "resnext50_32x4d"):
        case = f"{arch}_cifar"
        model = resnet(arch, "cifar", 10).eval()
        deterministic_fill(model.state_dict())
        x, x_line = quantized_input(case, (2, 3, 32, 32), seed=3)
        with torch.no_grad():
            y = model(x)
        out += [x_line, float_line(case, "output", "logits", y)]
    return out


# --- MLP -----------------------------------------------------------------


class Mlp(nn.Module):
    """hotloop::models::Mlp: flatten -> (Linear -> act) per hidden -> Linear,
    the Linears in `layers`."""

    def __init__(self, in_features, hidden, num_classes, activation):
        super().__init__()
        widths = [in_features] + list(hidden) + [num_classes]
        self.layers = nn.ModuleList(
            nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.act = F.gelu if activation == "gelu" else F.relu

    def forward(self, x):
        x = x.flatten(1)
        for layer in self.layers[:-1]:
            x = self.act(layer(x))
        return self.layers[-1](x)


def mlp_lines(activation, seed):
    case = f"mlp_{activation}"
    torch.manual_seed(seed)
    model = Mlp(20, [16, 8], 5, activation)
    out = param_lines(case, model)
    x, x_line = quantized_input(case, (3, 4, 5), seed=seed + 1)
    out.append(x_line)
    out.append(float_line(case, "output", "logits", model(x)))
    return out


# --- GPT (nanoGPT's model.py, as of 2023-2024) ----------------------------


class GPTConfig:
    def __init__(self, **kw):
        self.block_size = 1024
        self.vocab_size = 50257
        self.n_layer = 12
        self.n_head = 12
        self.n_embd = 768
        self.dropout = 0.0
        self.bias = True
        self.__dict__.update(kw)


class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias,
                            1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd,
                                bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd,
                                bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.flash = hasattr(F, "scaled_dot_product_attention")
        if not self.flash:
            self.register_buffer(
                "bias",
                torch.tril(torch.ones(config.block_size, config.block_size))
                .view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=None,
                dropout_p=self.dropout if self.training else 0,
                is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0,
                                  float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd,
                              bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd,
                                bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(
                    p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def get_num_params(self, non_embedding=True):
        n_params = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n_params -= self.transformer.wpe.weight.numel()
        return n_params

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(
            self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)),
                               targets.view(-1), ignore_index=-1)
        return logits, loss


def gpt_count_lines():
    # meta device would be faster, but 1.13's nn.init does not support it
    # everywhere; building the 124M model on CPU takes a few seconds.
    model = GPT(GPTConfig())
    total = model.get_num_params(non_embedding=False)
    non_embedding = model.get_num_params()
    assert total == 124439808, total
    assert non_embedding == 123653376, non_embedding
    return [line("gpt2_124m", "count", "params", [], [total, non_embedding])]


def gpt_tiny_lines():
    case = "gpt_tiny"
    torch.manual_seed(1)
    config = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2,
                       n_embd=32)
    model = GPT(config).eval()
    # At nanoGPT's 0.02 scale this tiny model is nearly linear (exact and
    # tanh GELU differ by < 1e-7 in its logits), so scale the matrices 10x
    # for O(1) activations and attention scores. nanoGPT starts biases at 0
    # and LayerNorm weights at 1; move them off those values so that loading
    # them by name is tested too.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.mul_(10.0)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.1)
            else:  # LayerNorm weight
                p.normal_(1.0, 0.1)
    out = param_lines(case, model)
    g = torch.Generator().manual_seed(2)
    idx = torch.randint(0, config.vocab_size, (2, config.block_size),
                        generator=g)
    targets = torch.randint(0, config.vocab_size, (2, config.block_size),
                            generator=g)
    targets[1, :5] = -1  # ignored positions
    logits, loss = model(idx, targets)
    out.append(line(case, "tokens", "idx", idx.shape, idx.flatten().tolist()))
    out.append(line(case, "targets", "targets", targets.shape,
                    targets.flatten().tolist()))
    out.append(float_line(case, "output", "logits", logits))
    out.append(float_line(case, "loss", "loss", loss))
    # nanoGPT's GPT.generate as sample.py runs it (torch.manual_seed, then
    # temperature and top-k sampling), past block_size so that the context
    # is cropped to the last 16 tokens.
    prompt = torch.tensor([[5, 17, 42]])
    torch.manual_seed(1337)
    generated = generate(model, prompt, max_new_tokens=20, temperature=0.8,
                         top_k=10)
    out.append(line(case, "generate", "tokens", generated.shape,
                    generated.flatten().tolist()))
    return out


@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None):
    """nanoGPT's GPT.generate (this forward computes every position's
    logits; nanoGPT's only the last one's, which are the same)."""
    block_size = model.config.block_size
    for _ in range(max_new_tokens):
        idx_cond = idx if idx.size(1) <= block_size else idx[:, -block_size:]
        logits, _ = model(idx_cond, torch.zeros_like(idx_cond))
        logits = logits[:, -1, :] / temperature
        if top_k is not None:
            v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
            logits[logits < v[:, [-1]]] = -float("Inf")
        probs = F.softmax(logits, dim=-1)
        idx_next = torch.multinomial(probs, num_samples=1)
        idx = torch.cat((idx, idx_next), dim=1)
    return idx


def write(path, header, lines):
    with open(path, "w") as f:
        f.write(f"# Generated by tests/reference/make_models_reference.py "
                f"with PyTorch {torch.__version__}, torchvision "
                f"{torchvision.__version__}; do not edit.\n")
        f.write(header)
        f.write("\n".join(lines) + "\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def main():
    torch.set_num_threads(1)
    write(os.path.join(HERE, "resnet_state_dicts.txt"),
          "# <case> state <name> <shape> | <case> count params [] <n>\n",
          resnet_state_lines())
    write(os.path.join(HERE, "models_forward.txt"),
          "# <case> <field> <name> <shape> <values...>; param: k/1024, "
          "input: k/64\n",
          mlp_lines("relu", 10) + mlp_lines("gelu", 20) + gpt_tiny_lines()
          + gpt_count_lines() + resnet_forward_lines())


if __name__ == "__main__":
    main()
