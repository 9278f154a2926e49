"""nbhelpers.ddp_timeline: overlap on timelines built by hand; the plot draws every bar; one real launch."""
import pytest

from nbhelpers import ddp_timeline, distributed
from nbhelpers.ddp_timeline import RankTimeline



def test_overlap_is_the_share_of_all_reduce_time_before_compute_ends():
    compute = (("AddmmBackward0", 0.0, 4.0), ("AddmmBackward0", 4.0, 10.0))
    after = RankTimeline(0, compute, ((0, 100, 10.0, 14.0),), 14.0, 100)
    during = RankTimeline(0, compute, ((0, 50, 2.0, 6.0), (1, 50, 8.0, 12.0)), 12.0, 100)
    assert ddp_timeline.overlap(after) == 0.0
    assert ddp_timeline.overlap(during) == pytest.approx((4.0 + 2.0) / 8.0)
    assert ddp_timeline.overlap(RankTimeline(0, compute, (), 10.0, 100)) == 0.0     # nothing sent


def test_the_plot_draws_every_op_and_every_bucket():
    t = RankTimeline(0, (("A", 0.0, 1.0), ("B", 1.0, 2.0)), ((0, 2**20, 1.5, 3.0),), 3.0, 2**20)
    ax = ddp_timeline.plot({"run": [t, RankTimeline(1, t.compute, t.allreduce, 3.0, 2**20)]})
    assert len(ax.collections) == 4                      # per rank: one compute row, one all-reduce row
    assert [text.get_text() for text in ax.texts] == [" b0 1.0 MiB"] * 2
    assert [label.get_text() for label in ax.get_yticklabels()] == ["run, rank 0", "run, rank 1"]


def test_one_bucket_is_sent_after_the_last_gradient():
    ranks = distributed.launch(ddp_timeline.profile_backward, 2, 25, timeout_s=180)
    for t in ranks:
        assert [nbytes for _, nbytes, _, _ in t.allreduce] == [t.parameter_bytes]
        assert ddp_timeline.overlap(t) == 0.0 and t.backward_ms >= t.allreduce[0][3]


def test_no_step_is_refused_before_any_process_group_is_needed():
    with pytest.raises(ValueError, match="`steps` must be an int of at least 1"):
        ddp_timeline.profile_backward(0, 1, None, steps=0)
