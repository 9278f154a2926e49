"""The torchrun entry point: DDP-train the MLP sandwich on the digits, on one machine or several.

    torchrun --nproc-per-node=2 -m nbhelpers.ddp_train --epochs 2 --out build/ddp

torchrun starts the processes and sets RANK, WORLD_SIZE and the rendezvous in their environment; this
module joins the process group they describe, trains with `ddp_workers.train_digits`, and writes each
rank's summary (rank-N.json) atomically. Notebooks use `distributed.launch` instead, which starts the
processes itself. As there, the backend follows `--device`, not the machine: gloo on the CPU (the
default, also on a GPU host), NCCL with `--device cuda`, one GPU per process on each machine.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist

from nbhelpers import ddp_workers
from nbhelpers.atomic import write_atomic

__all__ = ["main"]


def main(argv: list[str] | None = None) -> dict:
    """torchrun entry point: DDP-train the MLP sandwich on the digits; every rank writes its weights' digest.

    Single machine:  torchrun --nproc-per-node=2 -m nbhelpers.ddp_train --epochs 2 --out build/ddp
    Two machines:    torchrun --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d
                        --rdzv-endpoint=HOST:29500 --rdzv-id=digits -m nbhelpers.ddp_train --out DIR
    On GPUs:         add --device cuda (NCCL; --nproc-per-node at most the GPUs of each machine)
    """
    parser = argparse.ArgumentParser(prog="python -m nbhelpers.ddp_train", description=main.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True, help="directory for rank-N.json and model.pt")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where each rank trains: cpu joins the ranks with gloo, cuda with NCCL (default: cpu)")
    options = parser.parse_args(argv)
    if "RANK" not in os.environ:
        raise SystemExit("run me under torchrun, which sets RANK and WORLD_SIZE; see --help")
    local_rank, local_world = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    if options.device == "cuda":
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus < local_world:
            raise SystemExit(f"--device cuda trains each process on its own GPU: {local_world} processes on this "
                             f"machine, {gpus} GPUs; lower --nproc-per-node or drop --device cuda (gloo, CPU)")
        torch.cuda.set_device(local_rank)
    options.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
    dist.init_process_group("nccl" if options.device == "cuda" else "gloo")
    try:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        summary = ddp_workers.train_digits(rank, world_size, options.epochs, str(options.out / "model.pt"),
                                           device=options.device)
        summary = {k: v for k, v in summary.items() if k != "state"}
        write_atomic(options.out / f"rank-{rank}.json", json.dumps(summary).encode())
        return summary
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
