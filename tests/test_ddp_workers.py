"""nbhelpers.ddp_workers' pieces on one process (notebook 07 runs its DDP workers on two ranks under nbval)."""
import torch

from nbhelpers import ddp_workers


def test_two_heads_leaves_the_spare_head_without_gradient():
    model = ddp_workers.TwoHeads()
    model(torch.randn(4, 8)).sum().backward()
    assert model.spare.weight.grad is None and model.head.weight.grad is not None


def test_digit_batch_is_the_same_in_every_call():
    (x1, y1), (x2, y2) = ddp_workers.digit_batch(8), ddp_workers.digit_batch(8)
    assert x1.shape == (8, 1, 28, 28) and torch.equal(x1, x2) and torch.equal(y1, y2)
