"""Judges for the exercises on batches: collating (04.1), counting (04.2), sharding across ranks
(07.1), and accumulating micro-batches into one step (07.2)."""
from __future__ import annotations

import itertools
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn

from nbhelpers.exercises.registry import INPUTS, call, draw, exercise, first_disagreement, inputs


# notebook 04 · collate and count

class _Sequences(torch.utils.data.Dataset):
    """Variable-length sequences with a label: (values, label), lengths 0 to 8, some values exactly 0."""

    def __init__(self, seed: int, dtype=torch.float32):
        g = torch.Generator().manual_seed(seed)
        self.items = []
        for _ in range(draw(g, 1, 9)):
            values = torch.randn(draw(g, 0, 8), generator=g, dtype=dtype)
            values[::3] = 0.0                                              # a padding value inside the data
            self.items.append((values, draw(g, 0, 9)))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


@exercise("04.1", "a collate_fn for sequences of different lengths",
          hint="the default collate stacks, which needs equal sizes; pad with "
               "torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True) and return (padded, lengths, labels)")
def _pad_collate(answer):
    for k, data in enumerate(inputs(lambda g, k: _Sequences(k, (torch.float32, torch.float64)[k % 2]))):
        size = 1 + (k + 2) % 4                                              # 3 first
        loader = torch.utils.data.DataLoader(data, batch_size=size, collate_fn=answer)
        for i, batch in enumerate(call(list, loader)):
            items = data.items[size * i:size * i + size]
            seqs = [s for s, _ in items]
            want = (nn.utils.rnn.pad_sequence(seqs, batch_first=True), torch.tensor([len(s) for s in seqs]),
                    torch.tensor([label for _, label in items]))
            if not (isinstance(batch, (tuple, list)) and len(batch) == 3):
                return f"batch {i} is a {type(batch).__name__}, expected (padded, lengths, labels)"
            for name, got, truth in zip(("padded", "lengths", "labels"), batch, want):
                if not (isinstance(got, torch.Tensor) and got.shape == truth.shape and got.dtype == truth.dtype
                        and torch.equal(got, truth)):
                    return (f"batch {i} of dataset {k}: {name} should be {truth.dtype} {tuple(truth.shape)} "
                            f"{[round(v, 3) for v in truth.flatten().tolist()][:8]}")
    return None


@exercise("04.2", "how many batches an epoch has",
          hint="ceil(n / batch_size), or floor with drop_last=True")
def _batches_per_epoch(answer):
    grid = [*itertools.product((0, 2, 9, 10), (3, 5), (False, True)),
            *itertools.product((1, 6, 7, 8, 14), (7,), (False, True)),
            *inputs(lambda g, k: (draw(g, 0, 10**6), draw(g, 1, 1000), bool(k % 2)), 8), (10**12, 7, False)]
    cases = [(f"{n}, {size}, drop_last={drop}", (n, size, drop),
              len(torch.utils.data.DataLoader(range(n), batch_size=size, drop_last=drop))) for n, size, drop in grid]
    built = []
    real_init = torch.utils.data.DataLoader.__init__

    def spy(self, *args, **kwargs):
        built.append(1)
        real_init(self, *args, **kwargs)
    with mock.patch.object(torch.utils.data.DataLoader, "__init__", spy):
        problem = first_disagreement(answer, cases, "batches_per_epoch({label}) returned {said!r}, "
                                                     "len(DataLoader) is {truth}")
    if problem:
        return problem
    return (f"your answer built {len(built)} DataLoaders: compute the count from n and batch_size alone"
            if built else None)


# notebook 07 · shards and accumulation

@exercise("07.1", "which samples each rank reads",
          hint="DistributedSampler (shuffle=False) pads the indices by wrapping around to a multiple of "
               "world_size, then gives rank r every world_size-th index starting at r")
def _shard(answer):
    sampler = torch.utils.data.DistributedSampler
    cases = [(f"{n}, rank={rank}, world_size={world}", (n, rank, world),
              list(sampler(range(n), num_replicas=world, rank=rank, shuffle=False)))
             for n, world in ((10, 3), (8, 4), (3, 4), (1, 4), (2, 8), (0, 2),
                              *inputs(lambda g, k: (lambda w: (draw(g, 0, 3 * w), w))(draw(g, 1, 8)), 6))
             for rank in range(world)]
    return first_disagreement(lambda *args: list(call(answer, *args)), cases,
                               "shard({label}) gave {said}, expected {truth}")


@exercise("07.2", "gradient accumulation that equals the big batch",
          hint="the loss is a mean over the batch: divide each micro-batch's loss by the number of "
               "micro-batches before backward, so the summed gradients equal the full batch's")
def _accumulate(answer):
    for k in range(INPUTS):
        g = torch.Generator().manual_seed(k)
        micro_batches = (1, 2, 3, 4, 6, 8)[k % 6]
        model = nn.Linear(draw(g, 2, 16), draw(g, 2, 10))
        x = torch.randn(micro_batches * draw(g, 1, 5), model.in_features, generator=g)
        if k % 2:
            loss_fn, y = F.mse_loss, torch.randn(len(x), model.out_features, generator=g)
        else:
            loss_fn, y = F.cross_entropy, torch.randint(0, model.out_features, (len(x),), generator=g)
        loss_fn(model(x), y).backward()
        truth = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        backwards = []
        model.weight.register_hook(lambda grad, seen=backwards: seen.append(1))
        call(answer, model, loss_fn, x, y, micro_batches)
        if not all(p.grad is not None and torch.allclose(p.grad, t, atol=1e-5)
                   for p, t in zip(model.parameters(), truth)):
            return (f"with {micro_batches} micro-batches the gradients differ from one batch of {len(x)} "
                    f"({loss_fn.__name__})")
        if len(backwards) != micro_batches:
            return (f"with {micro_batches} micro-batches backward reached the weight {len(backwards)} times: "
                    "call backward once per micro-batch")
    return None
