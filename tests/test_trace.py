"""`make trace`: tlparse reads this torch's TORCH_TRACE logs of notebook 05's compiles and writes its report."""
import subprocess
from tests import REPO



def test_make_trace_writes_a_tlparse_report_with_the_breaks():
    done = subprocess.run(["make", "-s", "trace"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = REPO / "build" / "trace" / "report"
    index = (report / "index.html").read_text()
    assert "Success with restart (e.g., graph break)" in index              # tlparse marks the broken frames
    reasons = [p.read_text() for p in report.rglob("dynamo_graph_break_reason_*.txt")]
    assert any("Failed to trace builtin operator" in r for r in reasons)    # noisy()'s print
    assert any("Unsupported Tensor.backward() call" in r for r in reasons)  # the training step
