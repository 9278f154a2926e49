"""pictures, compile_picture and picture_canvas: the fields decode to torch's own values, the SVG is escaped, legible and the
same on every run, and it has colours for dark mode; the compile pipeline's numbers are its report's."""
import math
import xml.etree.ElementTree as ET

import pytest
import torch
from torch import nn

from torch.utils.data import DataLoader, TensorDataset

from nbhelpers import compile_lens, compile_picture, loader_timing, models, pictures
from nbhelpers.compile_report import Break, CompileReport, FxGraph, FxNode, Kernel
from nbhelpers._tools.notebook_tools import apply_rules, sanitize_rules
from nbhelpers.picture_canvas import MIN_TEXT_PX, Canvas

FLOATS = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
VALUES = (0.1, -1e-5, 1.0, -2.5, 3e-8, 1e-40, 0.0, -0.0, 65504.0, 1e5, math.inf, -math.inf)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("value", VALUES)
def test_the_fields_decode_to_what_torch_stores(value, dtype):
    bits = pictures.float_bits(value, dtype)
    held = torch.tensor([value], dtype=dtype).item()
    assert bits.decoded() == held and math.copysign(1, bits.decoded()) == math.copysign(1, held)
    assert len(bits.bits) == 1 + bits.exponent_bits + bits.mantissa_bits == torch.finfo(dtype).bits


def test_nan_decodes_to_nan():
    assert math.isnan(pictures.float_bits(math.nan, torch.float16).decoded())


def test_field_widths_are_the_formats():
    widths = {d: (b.exponent_bits, b.mantissa_bits) for d in FLOATS for b in [pictures.float_bits(1.0, d)]}
    assert widths == {torch.float32: (8, 23), torch.bfloat16: (8, 7), torch.float16: (5, 10),
                      torch.float64: (11, 52)}


def test_the_bits_are_the_tensors_memory():
    bits = pictures.float_bits(-2.0, torch.float32)
    assert bits.bits == "1" + "10000000" + "0" * 23      # -1 * 2**(128-127) * 1.0


def test_bad_arguments_name_themselves():
    with pytest.raises(TypeError, match="value"):
        pictures.float_bits("0.1", torch.float32)
    with pytest.raises(ValueError, match="dtype"):
        pictures.float_bits(0.1, torch.int32)
    with pytest.raises(TypeError, match="rows"):
        pictures.draw_float_bits([])
    with pytest.raises(TypeError, match="model"):
        pictures.module_parts("model")


def _all_pictures():
    rows = [pictures.float_bits(-1e-5, d) for d in FLOATS[:3]]
    model = models.mlp()
    layout = pictures.LoaderLayout("_MultiProcessingDataLoaderIter", 3, 3, 3, True, True, 2, "w3 b64", 0.5, 1e4)
    return [pictures.draw_float_bits(rows), pictures.draw_parts(pictures.module_parts(model, torch.rand(2, 1, 28, 28))),
            pictures.draw_loader(layout), compile_picture.draw_pipeline(compile_picture.pipeline_counts(
                _report(), "train_step"))]


def _node(name: str) -> FxNode:
    return FxNode(name, "call_function", name, "", "")


def _report(graphs=(3, 5), breaks=(("GB0123", 1), ("GB0025", 2)), kernels=("cpp_fused_relu_0",)) -> CompileReport:
    """A report as compile_lens fills it in, made by hand: `graphs` node counts, (code, count) breaks, kernels."""
    fx = tuple(FxGraph(tuple(_node(f"n{i}") for i in range(n)), forward=(_node("f"),) * 4,
                       backward=(_node("b"),) * 6) for n in graphs)
    return CompileReport(fx, tuple(Break(code, "a reason", f"line_{code}()", count, "", ()) for code, count in breaks),
                         tuple(Kernel(name, "", (), ()) for name in kernels))


def test_the_svg_parses_and_is_the_same_on_every_run():
    first, second = _all_pictures(), _all_pictures()
    assert [p.svg for p in first] == [p.svg for p in second]
    for p in first:
        root = ET.fromstring(p.svg)
        assert root.tag.endswith("svg") and " id=" not in p.svg    # no ids: two pictures on a page never clash


def test_every_label_is_legible_and_inside_its_box():
    for p in _all_pictures():
        assert p.labels and all(label.size >= MIN_TEXT_PX and label.inside() for label in p.labels)


def test_dark_mode_switches_the_background_with_the_text():
    svg = _all_pictures()[0].svg
    dark = svg[svg.index("@media (prefers-color-scheme: dark)"):]
    assert "svg.pic text{fill:#eee}" in dark and "svg.pic .pic-bg{fill:#1e1e1e}" in dark


class Evil(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module("<b>&x", nn.Linear(2, 2))


def test_names_from_user_code_are_escaped():
    svg = pictures.draw_parts(pictures.module_parts(Evil())).svg
    assert "&lt;b&gt;&amp;x" in svg and "<b>" not in svg
    ET.fromstring(svg)


def test_a_long_name_is_cut_to_fit_its_box():
    canvas = Canvas(100, 40)
    label = canvas.text("a_very_long_parameter_name_indeed", canvas.box(0, 0, 100, 40), size=12)
    assert label.text.endswith("…") and label.inside()
    with pytest.raises(ValueError, match="size"):
        canvas.text("tiny", canvas.area(0, 0, 100, 40), size=8)


def test_module_parts_reads_the_live_model_and_removes_its_hooks():
    model = models.mlp()
    parts = pictures.module_parts(model, torch.rand(3, 1, 28, 28))
    assert [(p.name, p.kind) for p in parts] == [(n, type(c).__name__) for n, c in model.named_children()]
    assert sum(p.parameters for p in parts) == sum(p.numel() for p in model.parameters())
    assert parts[0].shape_in == (3, 1, 28, 28) and parts[0].shape_out == parts[1].shape_in == (3, 784)
    assert parts[2].shape_in is None                      # forward returns logits; the adapter is not called
    assert all(not m._forward_hooks for m in model.modules())


def _timing(first_s: float) -> loader_timing.LoaderTiming:
    return loader_timing.LoaderTiming(loader_timing.LoaderSetup(2, False, 10), 100, (first_s, 0.1), (1.0, 0.5))


def test_loader_layout_reads_a_live_iterator():
    batches = iter(DataLoader(TensorDataset(torch.arange(40.0)), batch_size=10, num_workers=2, timeout=30))
    next(batches)
    layout = pictures.loader_layout(batches, _timing(0.25))
    del batches
    assert (layout.workers, layout.alive, layout.index_queues, layout.result_queue) == (2, 2, 2, True)
    assert not layout.pin_memory_thread and layout.prefetch_factor == 2
    assert (layout.setup, layout.first_batch_s, layout.items_per_s) == ("w2 b10", 0.25, 200.0)
    single = pictures.loader_layout(iter(DataLoader(TensorDataset(torch.arange(4.0)))))
    assert (single.iterator, single.workers, single.result_queue) == ("_SingleProcessDataLoaderIter", 0, False)
    assert "no timing given" in pictures.draw_loader(single).texts()
    with pytest.raises(TypeError, match="iterator"):
        pictures.loader_layout([1, 2])


def test_nbval_compares_a_loader_picture_except_its_measured_numbers():
    def drawn(first_s, workers=2):
        layout = pictures.LoaderLayout("_MultiProcessingDataLoaderIter", workers, workers, workers, True, False, 2,
                                       "w2 b10", first_s, 100 / first_s)
        return apply_rules(pictures.draw_loader(layout).svg, sanitize_rules())
    assert drawn(0.31) == drawn(0.77) and "0.31" not in drawn(0.31)
    assert drawn(0.31) != drawn(0.31, workers=3)


def test_pipeline_counts_are_the_reports_and_explains(capsys):
    def noisy(x):
        y = torch.relu(x)
        print("side effect")
        return y * 2

    sample = torch.randn(16)
    report = compile_lens.capture(noisy, sample)
    explained = torch._dynamo.explain(noisy)(sample)
    torch.compiler.reset()
    counts = compile_picture.pipeline_counts(report, "noisy")
    assert counts.graphs == len(report.graphs) == explained.graph_count == 2
    assert counts.fx_nodes == tuple(len(g.graph.nodes) for g in explained.graphs)
    assert counts.break_count == explained.graph_break_count == 1 and counts.breaks[0][0] == "GB0059"
    assert (counts.aot_forward, counts.aot_backward) == (len(report.graphs[0].forward), 0)   # no grad needed
    assert counts.kernels == tuple(k.name for k in report.kernels) and counts.kernels
    texts = compile_picture.draw_pipeline(counts).texts()
    assert {"2 graphs", "1 break", f"graph 0: {counts.fx_nodes[0]} nodes", *counts.kernels} <= set(texts)
    assert "GB0059 x1 print(\"side effect\")" in texts


def test_the_pipeline_picture_says_each_count_and_cuts_nothing_it_needs():
    picture = compile_picture.draw_pipeline(compile_picture.pipeline_counts(_report(graphs=(3, 5, 7, 9, 11)), "f"))
    texts = picture.texts()
    assert {"5 graphs", "3 breaks", "at 2 places", "forward 4 nodes", "backward 6 nodes", "1 kernel"} <= set(texts)
    assert "graph 3: 9 nodes" in texts and "... 1 more" in texts and "graph 4: 11 nodes" not in texts
    assert "GB0025 x2 line_GB0025()" in texts and "cpp_fused_relu_0" in texts
    alone = compile_picture.draw_pipeline(compile_picture.pipeline_counts(_report(graphs=(3,), breaks=()), "f"))
    assert "none: one graph" in alone.texts() and "0 breaks" in alone.texts()


def test_the_pipeline_refuses_what_is_not_a_report():
    with pytest.raises(TypeError, match="report"):
        compile_picture.pipeline_counts("report", "f")
    with pytest.raises(ValueError, match="no FX graph"):
        compile_picture.pipeline_counts(CompileReport((), (), ()), "f")
    with pytest.raises(TypeError, match="counts"):
        compile_picture.draw_pipeline(_report())
