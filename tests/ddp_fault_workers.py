"""Workers that fail on purpose, for tests/test_distributed.py (importable, so spawn can run them)."""
import time

import torch
import torch.distributed as dist


def rank_one_raises(rank, world_size):
    if rank == 1:
        raise ValueError("boom on purpose")
    dist.all_reduce(torch.ones(1))     # rank 0 waits here for a partner that never comes
    return rank


def everyone_hangs(rank, world_size):
    time.sleep(600)


def exits_hard(rank, world_size):
    if rank == 0:
        import os
        os._exit(3)
    return rank


def echo(rank, world_size, value):
    return {"rank": rank, "world_size": world_size, "value": value, "tensor": torch.full((2,), float(rank))}
