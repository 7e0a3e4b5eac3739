#!/usr/bin/env python3
"""Writes tests/reference/samplers.txt: index sequences of the samplers of
torch.utils.data computed by Python PyTorch, for the C++ parity tests in
tests/data/sampler_test.cpp.

Run with a Python that has PyTorch (1.13 or later):

    /usr/bin/python3 tests/reference/make_sampler_reference.py

Format, one case a line (lines starting with '#' are comments):

    <sampler> <key>=<value> ... : <index> <index> ...

with the sampler's constructor arguments and the epoch as keys; lists
(`weights`, `indices`) are comma-separated, booleans 0/1. hotloop seeds epoch
e with seed + e, so the random samplers here get
`generator=torch.Generator().manual_seed(seed + epoch)`, and
DistributedSampler gets seed and `set_epoch(epoch)`.
"""

import os

import torch
from torch.utils.data import (
    BatchSampler,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)
from torch.utils.data.distributed import DistributedSampler


def generator(seed, epoch):
    return torch.Generator().manual_seed(seed + epoch)


def line(name, args, indices):
    fields = []
    for key, value in args.items():
        if isinstance(value, bool):
            value = int(value)
        elif isinstance(value, (list, tuple)):
            value = ",".join(repr(v) for v in value)
        fields.append(f"{key}={value}")
    return " ".join([name] + fields + [":"] + [str(int(i)) for i in indices])


def sequential_cases():
    for n in [0, 1, 6]:
        yield line("sequential", {"n": n, "epoch": 0},
                   list(SequentialSampler(range(n))))


def random_cases():
    # (n, replacement, num_samples or None, seed, epoch)
    cases = [
        (10, False, None, 0, 0),
        (10, False, None, 0, 1),
        (10, False, None, 42, 0),
        (10, False, None, 42, 3),
        (1, False, None, 7, 0),
        (7, False, 17, 5, 2),  # two full permutations and 3 of a third
        (7, False, 4, 5, 0),  # fewer than n
        (10, True, None, 1, 0),  # only the remainder chunk
        (10, True, 70, 1, 0),  # two chunks of 32 and 6
        (10, True, 70, 1, 2),
        (3, True, 64, 9, 1),  # whole chunks only
        (30, False, None, 2**40 + 5, 0),  # a seed above 32 bits
    ]
    for n, replacement, num_samples, seed, epoch in cases:
        sampler = RandomSampler(range(n), replacement=replacement,
                                num_samples=num_samples,
                                generator=generator(seed, epoch))
        args = {"n": n, "replacement": replacement}
        if num_samples is not None:
            args["num_samples"] = num_samples
        args.update(seed=seed, epoch=epoch)
        yield line("random", args, list(sampler))


def subset_cases():
    subset = [3, 9, 4, 20, 11, 0, 7]
    for indices, seed, epoch in [(subset, 2, 0), (subset, 2, 1),
                                 (subset, 11, 0), ([], 0, 0), ([5], 0, 4)]:
        sampler = SubsetRandomSampler(indices, generator=generator(seed, epoch))
        yield line("subset", {"indices": indices, "seed": seed, "epoch": epoch},
                   list(sampler))


def weighted_cases():
    weights = [0.1, 0.9, 0.4, 0.7, 3.0, 0.6]
    with_zero = [1.0, 0.0, 2.5, 0.0, 0.5]
    # (weights, num_samples, replacement, seed, epoch)
    cases = [
        (weights, 10, True, 0, 0),
        (weights, 10, True, 0, 1),
        (weights, 40, True, 3, 0),
        (weights, 5, False, 0, 0),
        (weights, 6, False, 8, 2),
        (weights, 1, False, 4, 0),  # the argmax path
        (weights, 1, True, 4, 0),
        (with_zero, 12, True, 6, 1),
        (with_zero, 3, False, 6, 1),
    ]
    for w, num_samples, replacement, seed, epoch in cases:
        sampler = WeightedRandomSampler(w, num_samples, replacement=replacement,
                                        generator=generator(seed, epoch))
        yield line("weighted",
                   {"weights": w, "num_samples": num_samples,
                    "replacement": replacement, "seed": seed, "epoch": epoch},
                   list(sampler))


def distributed_cases():
    # (n, num_replicas, shuffle, drop_last, seed, epoch); every rank.
    cases = [
        (10, 3, True, False, 0, 0),
        (10, 3, True, False, 0, 1),
        (10, 3, True, True, 0, 1),
        (10, 3, False, False, 0, 0),
        (10, 3, False, True, 0, 0),
        (12, 4, True, False, 17, 2),  # even split
        (11, 4, True, True, 5, 0),
        (2, 5, True, False, 3, 0),  # padding longer than the list
        (2, 5, False, False, 3, 0),
        (3, 5, True, False, 1, 1),
        (3, 5, True, True, 1, 1),  # nothing left
        (0, 2, True, False, 0, 0),
        (1, 1, True, False, 0, 0),
    ]
    for n, replicas, shuffle, drop_last, seed, epoch in cases:
        for rank in range(replicas):
            sampler = DistributedSampler(range(n), num_replicas=replicas,
                                         rank=rank, shuffle=shuffle, seed=seed,
                                         drop_last=drop_last)
            sampler.set_epoch(epoch)
            indices = list(sampler)
            assert len(indices) == len(sampler)
            yield line("distributed",
                       {"n": n, "num_replicas": replicas, "rank": rank,
                        "shuffle": shuffle, "seed": seed,
                        "drop_last": drop_last, "epoch": epoch},
                       indices)


def batch_cases():
    # Batches of SequentialSampler(n), flattened, with the batch sizes as
    # `sizes` so the C++ test can check the split.
    for n, batch_size, drop_last in [(10, 3, False), (10, 3, True),
                                     (9, 3, True), (2, 5, False),
                                     (2, 5, True)]:
        batches = list(BatchSampler(SequentialSampler(range(n)), batch_size,
                                    drop_last))
        assert len(batches) == len(BatchSampler(SequentialSampler(range(n)),
                                                batch_size, drop_last))
        yield line("batch",
                   {"n": n, "batch_size": batch_size, "drop_last": drop_last,
                    "sizes": [len(b) for b in batches], "epoch": 0},
                   [i for b in batches for i in b])


def length_grouped(lengths, batch_size, mega_batch_mult, g):
    """Hugging Face's length grouping (transformers' LengthGroupedSampler),
    written out from its documented steps: a random permutation, cut into
    megabatches, each sorted by length (longest first, stable), and the
    longest megabatch's first index traded with the very first."""
    if mega_batch_mult is None:
        mega_batch_mult = max(min(len(lengths) // (batch_size * 4), 50), 1)
    order = torch.randperm(len(lengths), generator=g).tolist()
    size = mega_batch_mult * batch_size
    groups = [sorted(order[i:i + size], key=lambda i: lengths[i], reverse=True)
              for i in range(0, len(order), size)]
    if not groups:
        return []
    longest = int(torch.argmax(torch.tensor([lengths[m[0]] for m in groups])))
    groups[0][0], groups[longest][0] = groups[longest][0], groups[0][0]
    return [i for m in groups for i in m]


def length_grouped_cases():
    g = torch.Generator().manual_seed(123)
    short = torch.randint(1, 9, (23,), generator=g).tolist()  # many ties
    long = torch.randint(5, 400, (203,), generator=g).tolist()
    ties = torch.randint(1, 9, (200,), generator=g).tolist()
    # (lengths, batch_size, mega_batch_mult or None, seed, epoch)
    cases = [
        (short, 4, None, 0, 0),  # 23 // 16 = 1: megabatches of 4
        (short, 4, None, 0, 1),
        (short, 2, 3, 7, 0),  # megabatches of 6, the last of 5
        (short, 8, None, 7, 2),  # one short megabatch at the end
        (long, 4, None, 5, 0),  # 203 // 16 = 12: megabatches of 48
        (long, 1, None, 5, 3),  # capped at 50
        (long, 16, 2, 11, 0),
        ([3], 4, None, 0, 0),
        ([], 4, None, 0, 0),
        (ties, 4, None, 2, 0),  # megabatches of 48 with many equal lengths
        (long + short, 1, None, 4, 1),  # 226 // 4 = 56, capped at 50
    ]
    for lengths, batch_size, mult, seed, epoch in cases:
        args = {"lengths": lengths, "batch_size": batch_size}
        if mult is not None:
            args["mega_batch_mult"] = mult
        args.update(seed=seed, epoch=epoch)
        yield line("length_grouped", args,
                   length_grouped(lengths, batch_size, mult,
                                  generator(seed, epoch)))


def main():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "samplers.txt")
    with open(path, "w") as out:
        out.write("# Generated by tests/reference/make_sampler_reference.py "
                  f"with PyTorch {torch.__version__}; do not edit.\n")
        out.write("# <sampler> <key>=<value> ... : <indices...>\n")
        for cases in [sequential_cases, random_cases, subset_cases,
                      weighted_cases, distributed_cases, batch_cases,
                      length_grouped_cases]:
            for text in cases():
                out.write(text + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
