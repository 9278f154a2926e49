"""Run a module as a program on what looks like a host with two GPUs, for tests:

    python -m tests.fake_gpu_host nbhelpers.ddp_train --epochs 1 --out DIR     (also under torchrun)

torch.cuda then reports two available GPUs that do not exist. What a real GPU host answers without any work
on a GPU is answered the same way (the current stream captures no CUDA graph, as Adam's step asks), so CPU
code runs as it would there; a program that puts work on CUDA because the machine has it (instead of because
its tensors live there) fails on its first real use of a GPU, NCCL's "no GPUs found" among them.
"""
import runpy
import sys

import torch


class _IdleStream:
    def is_capturing(self) -> bool:
        return False


def fake_two_gpus() -> None:
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 2
    torch.accelerator.current_stream = lambda device=None: _IdleStream()


if __name__ == "__main__":
    fake_two_gpus()
    module, sys.argv = sys.argv[1], [sys.argv[1], *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
