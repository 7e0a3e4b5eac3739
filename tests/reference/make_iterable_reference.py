#!/usr/bin/env python3
"""Writes tests/reference/iterable_loader.txt: the batches PyTorch's
DataLoader gives from an IterableDataset whose workers' streams differ in
length, for tests/data/iterable_loader_test.cpp to compare with
hotloop::data::DataLoader over an IterableDataset.

The dataset: the stream read by worker w (w = 0 without workers) in epoch e
yields lengths[w] samples; sample k has target 1000 * e + 100 * w + k and
input [target, -target] (float32). `len(dataset)` is sum(lengths), so
`len(loader)` is PyTorch's count from it.

    /usr/bin/python3 tests/reference/make_iterable_reference.py

Format, per case:
    case <name> workers <n> batch_size <b or none> drop_last <0|1>
         prefetch <p> epoch <e> lengths <l0,l1,...> len <len(loader)>
    batch <target...>          (one line per batch, in the loader's order)
    end
"""

import os

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "iterable_loader.txt")


class Streams(IterableDataset):
    def __init__(self, lengths, epoch):
        self.lengths = lengths
        self.epoch = epoch

    def __len__(self):
        return sum(self.lengths)

    def __iter__(self):
        info = get_worker_info()
        w = 0 if info is None else info.id
        for k in range(self.lengths[w]):
            t = 1000 * self.epoch + 100 * w + k
            yield torch.tensor([float(t), float(-t)]), torch.tensor(t)


CASES = [
    # name, workers, batch_size, drop_last, prefetch, epoch, lengths
    ("inline", 0, 4, False, None, 0, [10]),
    ("inline_drop_last", 0, 4, True, None, 0, [10]),
    ("two_uneven", 2, 3, False, None, 0, [7, 4]),
    ("two_uneven_epoch3", 2, 3, False, None, 3, [7, 4]),
    ("three_uneven", 3, 2, False, None, 0, [9, 5, 1]),
    ("three_uneven_drop_last", 3, 2, True, None, 0, [9, 5, 1]),
    ("three_prefetch1", 3, 2, False, 1, 0, [6, 1, 4]),
    ("first_empty", 2, 2, False, None, 0, [0, 5]),
    ("unbatched", 2, None, False, None, 0, [3, 2]),
    ("one_worker", 1, 5, False, 3, 0, [12]),
]


def main():
    lines = []
    for name, workers, batch_size, drop_last, prefetch, epoch, lengths in CASES:
        kwargs = {}
        if prefetch is not None:
            kwargs["prefetch_factor"] = prefetch
        loader = DataLoader(Streams(lengths, epoch), batch_size=batch_size,
                            drop_last=drop_last, num_workers=workers,
                            **kwargs)
        lines.append(" ".join([
            "case", name, "workers", str(workers), "batch_size",
            "none" if batch_size is None else str(batch_size), "drop_last",
            str(int(drop_last)), "prefetch",
            str(prefetch if prefetch is not None else 0), "epoch", str(epoch),
            "lengths", ",".join(str(n) for n in lengths), "len",
            str(len(loader))]))
        for inputs, targets in loader:
            assert torch.equal(inputs[..., 0], targets.to(torch.float32))
            lines.append("batch " + " ".join(
                str(int(t)) for t in targets.reshape(-1)))
        lines.append("end")
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
