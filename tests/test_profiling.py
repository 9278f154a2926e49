"""nbhelpers.profiling: a real exported trace reads back with the record_function ranges in it."""
import matplotlib
import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from nbhelpers import profiling, stderr_capture

matplotlib.use("agg")   # this test process only


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
    with pytest.raises(ValueError, match="two increasing sizes"):
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
