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
    profiling.plot_top_ops(summary)


def test_trace_summary_rejects_other_files(tmp_path):
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ValueError, match="not a Chrome trace"):
        profiling.trace_summary(tmp_path / "x.json")
