"""Workers that fail on purpose or take their time, for the launcher's tests (importable, so a rank can run them)."""
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


def takes_two_seconds(rank, world_size):
    """Long enough for a waiting line to be redrawn (about once a second) before the ranks are done."""
    time.sleep(2)
    return {"rank": rank}


def where_it_runs(rank, world_size, variable):
    """What a rank sees of its caller: an environment variable, the working directory, the import path; and
    which process started it."""
    import os
    import sys
    return {"variable": os.environ.get(variable), "cwd": os.getcwd(), "path": list(sys.path), "parent": os.getppid()}
