"""Worker functions for `distributed.launch`, and the pieces notebook 07's own workers build on. Each worker
runs on one rank inside an initialised process group, as `worker(rank, world_size, *args)`, and returns plain
data or tensors.

They live in a module, not in a notebook, because a rank imports the function it runs by name. The two
workers at the heart of 07 (DDP's gradients, and no_sync with a comm hook) are written by the notebook itself,
with %%writefile, so a learner reads the DDP code the ranks run; they use `seeded_mlp`, `shard`, `digit_batch`
and `gradients` from here.

Example:
    results = distributed.launch(ddp_workers.all_reduce_by_hand, 2)
"""
from __future__ import annotations

import hashlib
import io
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from nbhelpers import compilation, data, models, training
from nbhelpers.atomic import write_atomic

__all__ = ["all_reduce_by_hand", "fails_on", "waits_for_a_stuck_rank", "digit_batch", "seeded_mlp", "shard",
           "gradients", "train_digits", "unused_parameters", "TwoHeads", "compile_orders"]


def all_reduce_by_hand(rank: int, world_size: int) -> dict:
    """The collectives DDP is built on: all_reduce, all_gather and broadcast of one number per rank.
    With NCCL the tensors live on this rank's GPU, since NCCL moves only GPU memory."""
    device = torch.device("cuda", rank) if dist.get_backend() == "nccl" else torch.device("cpu")
    mine = torch.tensor([float(rank + 1)], device=device)
    total = mine.clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    gathered = [torch.zeros(1, device=device) for _ in range(world_size)]
    dist.all_gather(gathered, mine)
    announced = torch.tensor([42.0], device=device) if rank == 0 else torch.zeros(1, device=device)
    dist.broadcast(announced, src=0)
    return {"rank": rank, "backend": dist.get_backend(), "sent": mine.item(), "all_reduce_sum": total.item(),
            "all_gather": [g.item() for g in gathered], "broadcast_from_0": announced.item()}


def fails_on(rank: int, world_size: int, failing_rank: int) -> int:
    """Raise on `failing_rank`; the others wait in a barrier that rank never reaches."""
    if rank == failing_rank:
        raise ValueError(f"a bug on rank {rank}")
    dist.barrier()
    return rank


def waits_for_a_stuck_rank(rank: int, world_size: int) -> int:
    """Rank 0 enters an all_reduce while the other ranks are stuck elsewhere: the classic hang."""
    if rank == 0:
        dist.all_reduce(torch.ones(1))
    else:
        time.sleep(3600)       # stands for a rank stuck in I/O, a deadlock, or a skipped collective
    return rank


def digit_batch(n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """The first `n` training digits as (n, 1, 28, 28) floats and labels, the same in every process."""
    digits = data.LazyDigits(train=True)
    images, labels = zip(*(digits[i] for i in range(n)))
    return torch.stack(images), torch.tensor(labels)


def train_digits(rank: int, world_size: int, epochs: int, save_path: str | None = None, seed: int = 0,
                 device: str = "cpu") -> dict:
    """DDP training of the MLP sandwich on the 8,000 digits, each rank reading its DistributedSampler
    shard; rank 0 alone saves the weights. Returns this rank's view, including every rank's digest.

    device="cuda" trains on this process's current GPU (the launcher or torchrun's entry point sets it, one
    per rank) and needs the NCCL backend; the returned state is on the CPU either way."""
    if (device == "cuda") != (dist.get_backend() == "nccl"):
        raise ValueError(f"device={device!r} with the {dist.get_backend()} backend: CPU tensors need gloo, "
                         f"one GPU per rank needs NCCL; launch with device={device!r}")
    here = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    torch.manual_seed(seed)
    ddp = DDP(models.mlp(device=here), device_ids=[here.index] if here.type == "cuda" else None)
    train = data.LazyDigits(train=True)
    sampler = DistributedSampler(train, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    loader = DataLoader(train, batch_size=64, sampler=sampler)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=2e-3)
    start, seen = time.perf_counter(), 0
    for epoch in range(epochs):
        sampler.set_epoch(epoch)       # a new shuffle each epoch, the same on every rank
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(ddp(x.to(here)), y.to(here)).backward()
            optimizer.step()
            seen += len(y)
    seconds = time.perf_counter() - start
    if save_path is not None and rank == 0:
        buffer = io.BytesIO()
        torch.save(ddp.module.state_dict(), buffer)
        write_atomic(save_path, buffer.getvalue())
    dist.barrier()                     # nobody reads the checkpoint before rank 0 has written it
    digests = [None] * world_size
    dist.all_gather_object(digests, _digest(ddp.module))
    return {"rank": rank, "backend": dist.get_backend(), "samples_seen": seen, "seconds": seconds, "digest": digests[rank],
            "all_digests": digests, "accuracy": _accuracy(ddp.module),
            "state": {k: v.cpu() for k, v in ddp.module.state_dict().items()}}


class TwoHeads(nn.Module):
    """A body with two heads, of which forward uses only `head`: `spare` never gets a gradient."""

    def __init__(self, skip_dropout: bool = False):
        super().__init__()
        self.body, self.head, self.spare = nn.Linear(8, 8), nn.Linear(8, 2), nn.Linear(8, 2)
        self.dropout, self.skip_dropout = nn.Dropout(0.5), skip_dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.body(x))
        return self.head(h if self.skip_dropout else self.dropout(h))


def unused_parameters(rank: int, world_size: int) -> dict:
    """Three training steps of TwoHeads under DDP in four set-ups; the error message, or "ok"."""
    setups = {
        "find_unused_parameters=False": lambda m: DDP(m),
        "find_unused_parameters=True": lambda m: DDP(m, find_unused_parameters=True),
        "spare head frozen": lambda m: DDP(_frozen(m, m.spare)),
        "spare head removed": lambda m: DDP(_without_spare(m)),
    }
    outcome = {name: _three_steps(wrap, rank) for name, wrap in setups.items()}
    outcome["dropout skipped, no spare"] = _three_steps(lambda m: DDP(_without_spare(m)), rank, skip_dropout=True)
    compiled = lambda m: DDP(torch.compile(m, backend="aot_eager"), find_unused_parameters=True)  # noqa: E731
    with compilation.watch_compiles():     # resets Dynamo, holds back its log lines
        outcome["compiled, find_unused_parameters=True"] = _three_steps(compiled, rank)
    return outcome


def compile_orders(rank: int, world_size: int, backend: str = "aot_eager") -> dict:
    """Train 3 steps with DDP(compile(model)) and compile(DDP(model)), for the sandwich MLP and for the same
    layers in an nn.Sequential; per set-up: the graphs Dynamo compiled, the graph-break reasons, how often
    Dynamo's DDPOptimizer split a compiled graph at its estimate of DDP's buckets, and whether the ranks'
    weights stay identical."""
    from torch._dynamo.backends.distributed import DDPOptimizer
    from torch._dynamo.utils import counters

    splits = []
    original = DDPOptimizer.compile_fn

    def counted(self, gm, example_inputs, **configs):
        splits.append(len(gm.graph.nodes))
        return original(self, gm, example_inputs, **configs)

    report = {}
    DDPOptimizer.compile_fn = counted                    # this rank's process only; restored below
    try:
        for name in ("DDP(compile(model))", "compile(DDP(model))", "compile(DDP(nn.Sequential))"):
            breaks_before, splits_before = dict(counters["graph_break"]), len(splits)
            graphs, digest = _train_compiled(name, rank, world_size, backend)
            digests = [None] * world_size
            dist.all_gather_object(digests, digest)
            reasons = sorted({k.splitlines()[0] for k, v in counters["graph_break"].items()
                              if v > breaks_before.get(k, 0)})
            report[name] = {"graphs": graphs, "breaks": reasons, "ddp_optimizer": len(splits) - splits_before,
                            "ranks_agree": len(set(digests)) == 1}
    finally:
        DDPOptimizer.compile_fn = original
    return report


def _train_compiled(name: str, rank: int, world_size: int, backend: str) -> tuple[int, str]:
    """3 steps of the set-up `name` ("DDP(compile(model))", ...); the graphs Dynamo compiled, the weights' digest."""
    torch.manual_seed(0)
    model = models.mlp() if "Sequential" not in name else \
        nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = shard(*digit_batch(), rank, world_size)
    with compilation.watch_compiles() as log:            # resets Dynamo, holds back its log lines
        wrapped = DDP(torch.compile(model, backend=backend)) if name.startswith("DDP") else \
            torch.compile(DDP(model), backend=backend)
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(wrapped(x), y).backward()
            optimizer.step()
    return log.graphs, _digest(model)


def _three_steps(wrap, rank, skip_dropout=False) -> str:
    torch.manual_seed(0)
    ddp = wrap(TwoHeads(skip_dropout))
    optimizer = torch.optim.SGD([p for p in ddp.parameters() if p.requires_grad], lr=0.1)
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(rank))
    for step in range(1, 4):
        optimizer.zero_grad(set_to_none=True)
        phase = "forward"
        try:
            loss = ddp(x).square().mean()
            phase = "backward"
            loss.backward()
        except RuntimeError as e:                     # which call failed is part of the lesson
            return f"step {step} {phase}: {str(e).splitlines()[0]}"
        optimizer.step()
    digests = [None] * dist.get_world_size()
    dist.all_gather_object(digests, _digest(ddp.module))
    return "ok" if len(set(digests)) == 1 else "ok, but the weights differ across ranks"


def _frozen(model: nn.Module, part: nn.Module) -> nn.Module:
    part.requires_grad_(False)
    return model


def _without_spare(model: TwoHeads) -> nn.Module:
    del model.spare
    return model


def seeded_mlp(seed: int) -> nn.Module:
    """The sandwich MLP, seeded, dropout off: every rank builds the same one, and the comparisons are exact."""
    torch.manual_seed(seed)
    return models.mlp(models.CoreConfig(dropout=0.0))


def shard(x, y, rank: int, world_size: int):
    """This rank's contiguous share of a batch."""
    per_rank = len(x) // world_size
    return x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]


def gradients(model: nn.Module) -> list[torch.Tensor]:
    """A copy of each parameter's .grad."""
    return [p.grad.detach().clone() for p in model.parameters()]


def _digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _accuracy(model: nn.Module) -> float:
    test = DataLoader(data.LazyDigits(train=False), batch_size=500)
    return training.evaluate(model, test).accuracy
