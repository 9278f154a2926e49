"""nbhelpers.profiling: a real exported trace reads back with the record_function ranges in it."""
import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function

from nbhelpers import profiling, stderr_capture



def test_trace_summary_reads_an_exported_trace(tmp_path):
    with stderr_capture.without_kineto_lines(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            with record_function("three_matmuls"):
                torch.randn(64, 64) @ torch.randn(64, 64)
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    summary = profiling.trace_summary(tmp_path / "t.json", top=5)
    by_name = {o.name: o for o in summary}
    assert by_name["three_matmuls"].calls == 3 and by_name["three_matmuls"].category == "user_annotation"
    assert [o.total_us for o in summary] == sorted((o.total_us for o in summary), reverse=True)
    ax = profiling.plot_top_ops(summary)
    assert sorted(p.get_width() for p in ax.patches) == sorted(o.total_us for o in summary)    # a bar per op
    assert ax.get_yticklabels()[-1].get_text() == f"{summary[0].name} (x{summary[0].calls})"  # largest on top


def test_trace_summary_rejects_other_files(tmp_path):
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ValueError, match="not a Chrome trace"):
        profiling.trace_summary(tmp_path / "x.json")


def test_work_counts_a_matmuls_flops_and_bytes():
    a, b = torch.rand(64, 32), torch.rand(32, 16)
    assert profiling.work(lambda: a @ b) == profiling.Work(2 * 64 * 32 * 16, (64 * 32 + 32 * 16 + 64 * 16) * 4)
    x = torch.rand(100)
    assert profiling.work(lambda: x.view(10, 10).t() * 2) == profiling.Work(0, 2 * 100 * 4)   # views move nothing


PEAKS = profiling.Peaks(1e11, 1e10)          # fixed ceilings: the tests need no measurement of this machine


def test_regime_refuses_bad_input_clearly():
    def raises(size):
        def call():
            raise RuntimeError("the model's own error")
        return call

    with pytest.raises(ValueError, match="the call raised RuntimeError: the model's own error"):
        profiling.regime(raises, (1, 2), peaks=PEAKS)
    with pytest.raises(ValueError, match="did no tensor work"):
        profiling.regime(lambda size: (lambda: sum(range(1000))), (1, 2), peaks=PEAKS)   # returns a Python int
    with pytest.raises(ValueError, match="two increasing integer sizes"):
        profiling.regime(lambda size: (lambda: None), (4, 2), peaks=PEAKS)
    with pytest.raises(TypeError, match="must return the call to time"):
        profiling.regime(lambda size: 3, (1, 2), peaks=PEAKS)


def test_a_call_too_fast_for_the_timer_gets_no_regime(monkeypatch):
    x = torch.rand(1)
    monkeypatch.setattr(profiling, "median_seconds", lambda fn, min_run_time=0.3: 50e-9)   # as fast as an empty call
    verdict = profiling.regime(lambda size: (lambda: x + 1), (1, 2), peaks=PEAKS)
    assert verdict.verdict == "too fast to classify" and "within 20x of an empty call" in verdict.evidence


def test_the_verdict_follows_the_roofline():
    a, b = torch.rand(256, 256), torch.rand(256, 256)
    slow = profiling.Peaks(1.0, 1.0)                 # ceilings so low that any work explains all the time
    assert profiling.regime(lambda n: (lambda: a @ b), (1, 2), peaks=slow).verdict == "compute-bound"
    huge = profiling.Peaks(1e30, 1e30)               # ceilings so high that nothing but overhead is left
    result = profiling.regime(lambda n: (lambda: a @ b), (1, 2), peaks=huge)
    assert result.verdict == "overhead-bound" and result.overhead_share > 0.99


def test_bytes_moved_counts_the_elements_that_exist():
    a, column = torch.rand(256, 256), torch.rand(256, 1)
    # a broadcast column is 256 floats, however far it is expanded; the result is 256 x 256
    assert profiling.work(lambda: a + column.expand(256, 256)).bytes_moved == (2 * 256 * 256 + 256) * 4
    x = torch.rand(1000)
    assert profiling.work(lambda: x * x).bytes_moved == 2 * 1000 * 4       # one input passed twice is read once


def test_cpu_attention_flops_are_counted_by_torchs_own_formula():
    from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

    q = torch.rand(2, 4, 16, 8, requires_grad=True)
    step = lambda: F.scaled_dot_product_attention(q, q, q).sum().backward()   # noqa: E731
    official = FlopCounterMode(display=False)
    with official:
        step()
    shape = (2, 4, 16, 8)
    formula = sdpa_flop_count(shape, shape, shape) + sdpa_backward_flop_count(shape, shape, shape, shape)
    counted = profiling.work(step)
    assert official.get_total_flops() == 0                 # torch 2.14.1: no formula for the CPU kernels
    assert counted.flops == counted.added_flops == formula > 0


def _timed(monkeypatch, seconds: dict[int, float]):
    """median_seconds answers from `seconds` by the size the call was made for (an empty call: 1 ns)."""
    monkeypatch.setattr(profiling, "median_seconds",
                        lambda fn, min_run_time=0.3: seconds[fn.size] if hasattr(fn, "size") else 1e-9)


def _sized(size, fn):
    fn.size = size
    return fn


@pytest.mark.parametrize("times, verdict", [
    ({1: 1e-3, 2: 1.05e-3}, "overhead-bound"),                  # 2x the work, the same time
    ({1: 1e-3, 2: 2e-3}, "compute-bound (not matmul)"),         # time grows with it, no ceiling explains it
])
def test_time_that_grows_with_the_work_is_not_overhead(monkeypatch, times, verdict):
    data = {1: torch.rand(1000), 2: torch.rand(2000)}
    _timed(monkeypatch, times)
    result = profiling.regime(lambda n: _sized(n, lambda: torch.sort(data[n])), (1, 2), peaks=PEAKS)
    assert result.verdict == verdict, result.evidence


def test_work_bound_time_closer_than_a_fifth_to_a_ceiling_is_that_ceilings(monkeypatch):
    data = {1: torch.rand(1000), 2: torch.rand(2000)}
    work = profiling.work(lambda: data[1] * 2)
    _timed(monkeypatch, {1: 1.0, 2: 2.0})
    bandwidth_share = 0.3
    peaks = profiling.Peaks(1e30, work.bytes_moved / bandwidth_share)
    result = profiling.regime(lambda n: _sized(n, lambda: data[n] * 2), (1, 2), peaks=peaks)
    assert result.verdict == "bandwidth-bound" and result.bandwidth_share == pytest.approx(bandwidth_share)
