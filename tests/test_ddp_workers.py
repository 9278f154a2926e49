"""nbhelpers.ddp_workers on one rank: with nobody to average with, DDP must change nothing."""
import torch

from nbhelpers import ddp_workers, distributed


def test_one_rank_ddp_gradients_equal_local_ones():
    (result,) = distributed.launch(ddp_workers.gradient_equivalence, 1, 0, timeout_s=120)
    for local, synced, by_hand in zip(result["local"], result["synced"], result["by_hand"]):
        torch.testing.assert_close(synced, local)
        torch.testing.assert_close(by_hand, local)


def test_no_sync_skips_the_all_reduce():
    (result,) = distributed.launch(ddp_workers.accumulate_with_no_sync, 1, 0, timeout_s=120)
    assert (result["allreduces_during_no_sync"], result["allreduces_total"]) == (0, 1)


def test_two_heads_leaves_the_spare_head_without_gradient():
    model = ddp_workers.TwoHeads()
    model(torch.randn(4, 8)).sum().backward()
    assert model.spare.weight.grad is None and model.head.weight.grad is not None


def test_digit_batch_is_the_same_in_every_call():
    (x1, y1), (x2, y2) = ddp_workers.digit_batch(8), ddp_workers.digit_batch(8)
    assert x1.shape == (8, 1, 28, 28) and torch.equal(x1, x2) and torch.equal(y1, y2)
