"""Wrong calls at the learner's entry points: each raises TypeError or ValueError whose message names the argument
(in backquotes), says what was given and what to pass; never an AttributeError from deep inside, never accepted.

Every row is a call a learner could make by mistake (None, a wrong type, an empty input, a directory for a file,
a number out of range); the table is the census the issue asked for, and every row must pass."""
import re

import pytest
import torch

from nbhelpers import (autograd_graph, compilation, compile_lens, compile_view, data, distributed, exercises,
                       graph_diff, graph_view, memory, memory_agreement, memory_timeline, mixed_precision, module_scope,
                       module_work, profiling, saving, storage, training)
from nbhelpers.diagnosis import diagnose


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


def _graph_data():
    return graph_view.from_autograd(autograd_graph.trace(_model()(torch.rand(2, 4)).sum()))


def _tracker():
    with memory.track() as tracker:
        torch.rand(3) * 2
    return tracker


def _loader():
    xs, ys = torch.rand(8, 4), torch.randint(0, 2, (8,))
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xs, ys), batch_size=4)


def _empty_loader():
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.rand(0, 4), torch.zeros(0)))


def _sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.1)


def _saved_file(tmp_path):
    model = _model()
    return saving.save(tmp_path / "model.ckpt", model)


def _trace_file(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text('{"traceEvents": []}')
    return path


def _double(x):
    return x * 2


def _step():
    return None


# (entry point, the wrong call given a tmp_path, the argument its message must name)
WRONG_CALLS = [
    ("autograd_graph.trace", lambda tmp: autograd_graph.trace(None), "t"),
    ("autograd_graph.trace", lambda tmp: autograd_graph.trace([1.0, 2.0]), "t"),
    ("autograd_graph.trace", lambda tmp: autograd_graph.trace(torch.ones(2)), "t"),
    ("autograd_graph.trace", lambda tmp: autograd_graph.trace(_model()(torch.rand(1, 4)).sum(), module="model"),
     "module"),
    ("graph_view.from_autograd", lambda tmp: graph_view.from_autograd(None), "graph"),
    ("module_scope.record", lambda tmp: module_scope.record(_model()), "module_scope.record"),
    ("graph_view.from_autograd", lambda tmp: graph_view.from_autograd(torch.ones(2, requires_grad=True) * 2), "graph"),
    ("graph_view.show", lambda tmp: graph_view.show(None), "data"),
    ("graph_view.show", lambda tmp: graph_view.show(autograd_graph.trace(_model()(torch.rand(1, 4)).sum())), "data"),
    ("graph_view.show", lambda tmp: graph_view.show(_graph_data(), selected="7"), "selected"),
    ("graph_view.show", lambda tmp: graph_view.show(_graph_data(), selected=10 ** 6), "selected"),
    ("graph_view.render_svg", lambda tmp: graph_view.render_svg(graph_view.view(_graph_data()), selected="7"),
     "selected"),
    ("graph_view.show", lambda tmp: graph_view.show(_graph_data(), expanded="NeuralNetwork"), "expanded"),
    ("graph_view.view", lambda tmp: graph_view.view(None), "data"),
    ("graph_view.view", lambda tmp: graph_view.view(_graph_data(), expanded=3), "expanded"),
    ("graph_view.show_diff", lambda tmp: graph_view.show_diff(None), "d"),
    ("graph_view.show_diff", lambda tmp: graph_view.show_diff(graph_diff.diff(_graph_data(), _graph_data()),
                                                              titles=("plain",)), "titles"),
    ("graph_view.show_diff", lambda tmp: graph_view.show_diff(_graph_data()), "d"),
    ("graph_diff.diff", lambda tmp: graph_diff.diff(None, _graph_data()), "a"),
    ("graph_diff.diff", lambda tmp: graph_diff.diff(_graph_data(), "b"), "b"),
    ("memory.track", lambda tmp: memory.track(device="tpu").__enter__(), "device"),
    ("memory.track", lambda tmp: memory.track(device=3.5).__enter__(), "device"),
    ("memory.timeline", lambda tmp: memory.timeline(None), "tracker"),
    ("memory.timeline", lambda tmp: memory.timeline(_tracker(), categories=[torch.ones(1)]), "categories"),
    ("memory.timeline", lambda tmp: memory.timeline(_tracker(), categories={"gradients": 5}), "categories"),
    ("memory.saved_bytes_by_module", lambda tmp: memory.saved_bytes_by_module(None, torch.rand(1, 4)), "model"),
    ("memory.saved_bytes_by_module", lambda tmp: memory.saved_bytes_by_module("model", torch.rand(1, 4)), "model"),
    ("memory.cuda_history", lambda tmp: memory.cuda_history("cpu").__enter__(), "device"),
    ("memory_agreement.against_memtracker",
     lambda tmp: memory_agreement.against_memtracker(None, _model(), _sgd(_model())), "step"),
    ("memory_agreement.against_memtracker",
     lambda tmp: memory_agreement.against_memtracker(_step, "model", _sgd(_model())), "model"),
    ("memory_agreement.against_memtracker",
     lambda tmp: memory_agreement.against_memtracker(_step, _model(), None), "optimizer"),
    ("compile_lens.capture", lambda tmp: compile_lens.capture(None), "fn"),
    ("compile_lens.capture", lambda tmp: compile_lens.capture("model.forward"), "fn"),
    ("compile_lens.capture_calls", lambda tmp: compile_lens.capture_calls(_double, []), "calls"),
    ("compile_lens.capture_calls", lambda tmp: compile_lens.capture_calls(_double, None), "calls"),
    ("compile_view.from_report", lambda tmp: compile_view.from_report(None), "report"),
    ("compile_view.from_calls", lambda tmp: compile_view.from_calls(None), "report"),
    ("compile_view.from_report", lambda tmp: compile_view.from_report(_graph_data()), "report"),
    ("compilation.find_breaks", lambda tmp: compilation.find_breaks(None), "fn"),
    ("compilation.find_breaks", lambda tmp: compilation.find_breaks(42, torch.rand(2)), "fn"),
    ("compilation.compare_backends", lambda tmp: compilation.compare_backends(None, (torch.rand(2),), []), "fn"),
    ("compilation.compare_backends",
     lambda tmp: compilation.compare_backends(_double, torch.rand(2), [("eager", None)]), "args"),
    ("compilation.compare_backends", lambda tmp: compilation.compare_backends(_double, (torch.rand(2),), "eager"),
     "backends"),
    ("compilation.compare_backends", lambda tmp: compilation.compare_backends(_double, (torch.rand(2),), ["eager"]),
     "backends"),
    ("profiling.work", lambda tmp: profiling.work(None), "fn"),
    ("profiling.work", lambda tmp: profiling.work(torch.rand(2)), "fn"),
    ("profiling.regime", lambda tmp: profiling.regime(None, (1, 2)), "make"),
    ("profiling.regime", lambda tmp: profiling.regime(lambda n: (lambda: torch.rand(n)), (2, 1)), "sizes"),
    ("profiling.regime", lambda tmp: profiling.regime(lambda n: (lambda: torch.rand(n)), "12"), "sizes"),
    ("profiling.regime", lambda tmp: profiling.regime(lambda n: torch.rand(n), (1, 2)), "make"),
    ("profiling.trace_summary", lambda tmp: profiling.trace_summary(None), "path"),
    ("profiling.trace_summary", lambda tmp: profiling.trace_summary(tmp), "path"),
    ("profiling.trace_summary", lambda tmp: profiling.trace_summary(tmp / "missing.json"), "path"),
    ("profiling.trace_summary", lambda tmp: profiling.trace_summary(_trace_file(tmp), top=0), "top"),
    ("saving.save", lambda tmp: saving.save(tmp, _model()), "path"),
    ("saving.save", lambda tmp: saving.save(None, _model()), "path"),
    ("saving.save", lambda tmp: saving.save(tmp / "m.ckpt", None), "model"),
    ("saving.save", lambda tmp: saving.save(tmp / "m.ckpt", _model(), optimizer="adam"), "optimizer"),
    ("saving.save", lambda tmp: saving.save(tmp / "m.ckpt", _model(), epoch="one"), "epoch"),
    ("saving.save", lambda tmp: saving.save(tmp / "m.ckpt", _model(), config=["lr"]), "config"),
    ("saving.load", lambda tmp: saving.load(tmp, _model()), "path"),
    ("saving.load", lambda tmp: saving.load(None, _model()), "path"),
    ("saving.load", lambda tmp: saving.load(tmp / "missing.ckpt", _model()), "path"),
    ("saving.load", lambda tmp: saving.load(_saved_file(tmp), None), "model"),
    ("saving.load", lambda tmp: saving.load(_saved_file(tmp), _model(), optimizer="sgd"), "optimizer"),
    ("storage.record_lifetimes", lambda tmp: storage.record_lifetimes(device="tpu").__enter__(), "device"),
    ("data.digits", lambda tmp: data.digits(train="yes"), "train"),
    ("data.digits", lambda tmp: data.digits(transform=5), "transform"),
    ("data.digits", lambda tmp: data.digits(root=_saved_file(tmp)), "root"),
    ("data.digits", lambda tmp: data.digits(source=tmp / "no-such-folder"), "source"),
    ("distributed.launch", lambda tmp: distributed.launch(None, 2), "worker"),
    ("distributed.launch", lambda tmp: distributed.launch(_double, 0), "world_size"),
    ("distributed.launch", lambda tmp: distributed.launch(_double, "2"), "world_size"),
    ("distributed.launch", lambda tmp: distributed.launch(_double, 2, timeout_s=0), "timeout_s"),
    ("distributed.launch", lambda tmp: distributed.launch(_double, 2, device="tpu"), "device"),
    ("distributed.launch", lambda tmp: distributed.launch(_double, 2, start_method="thread"), "start_method"),
    ("exercises.check", lambda tmp: exercises.check("no-such-exercise", 1), "exercise"),
    ("exercises.check", lambda tmp: exercises.check(None, 1), "exercise"),
    ("mixed_precision.train_with_precision",
     lambda tmp: mixed_precision.train_with_precision(None, None, _loader(), _loader(), 1), "model"),
    ("mixed_precision.train_with_precision",
     lambda tmp: mixed_precision.train_with_precision(_model(), "fp16", _loader(), _loader(), 1), "dtype"),
    ("mixed_precision.train_with_precision",
     lambda tmp: mixed_precision.train_with_precision(_model(), None, None, _loader(), 1), "train_loader"),
    ("mixed_precision.train_with_precision",
     lambda tmp: mixed_precision.train_with_precision(_model(), None, _loader(), _loader(), 0), "epochs"),
    ("mixed_precision.train_with_precision",
     lambda tmp: mixed_precision.train_with_precision(_model(), None, _loader(), _loader(), 1, lr=-1.0), "lr"),
    ("training.fit", lambda tmp: training.fit(None, _loader(), _loader(), _sgd(_model()), 1), "model"),
    ("training.fit", lambda tmp: training.fit(_model(), None, _loader(), _sgd(_model()), 1), "train_loader"),
    ("training.fit", lambda tmp: training.fit(_model(), _empty_loader(), _loader(), _sgd(_model()), 1),
     "train_loader"),
    ("training.fit", lambda tmp: training.fit(_model(), _loader(), _loader(), None, 1), "optimizer"),
    ("training.fit", lambda tmp: training.fit(_model(), _loader(), _loader(), _sgd(_model()), -1), "epochs"),
    ("training.fit", lambda tmp: training.fit(_model(), _loader(), _loader(), _sgd(_model()), 1, loss_fn=5),
     "loss_fn"),
    ("training.fit", lambda tmp: training.fit(_model(), _loader(), _loader(), _sgd(_model()), 1, device="tpu"),
     "device"),
    ("diagnose.run", lambda tmp: diagnose.run(None, torch.rand(2, 4)), "model"),
    ("diagnose.run", lambda tmp: diagnose.run(_model(), None), "example_inputs"),
    ("diagnose.run", lambda tmp: diagnose.run(_model(), (torch.rand(2, 4), "x")), "example_inputs"),
    ("diagnose.run", lambda tmp: diagnose.run(torch.nn.Linear(4, 2, device="meta"), torch.rand(2, 4)), "model"),
    ("diagnose.run", lambda tmp: diagnose.run(_model(), "a photo of a cat"), "example_inputs"),
    ("diagnose.run", lambda tmp: diagnose.run(_model(), ["a photo", "a cat"]), "example_inputs"),
    ("diagnose.run", lambda tmp: diagnose.run(_model(), args=(None,)), "args"),
    ("diagnose.run", lambda tmp: diagnose.run(_model(), args=[torch.rand(2, 4)]), "args"),
    ("diagnose.run", lambda tmp: diagnose.run(_model(), kwargs={"x": torch.rand(2, 4)}), "kwargs"),
    ("diagnose.run", lambda tmp: diagnose.run(_model(), torch.rand(2, 4), args=(torch.rand(2, 4),)),
     "example_inputs"),
    ("diagnose.run", lambda tmp: diagnose.run(_ByName(), (torch.rand(2, 4), 0.5)), "example_inputs"),
    ("diagnose.run", lambda tmp: diagnose.run(_model(), torch.rand(2, 4), target=[0, 1]), "target"),
    ("diagnose.run", lambda tmp: diagnose.run(_model(), torch.rand(2, 4), loss_fn="mse"), "loss_fn"),
    ("diagnose.run", lambda tmp: diagnose.run(_model(), torch.rand(2, 4), optimizer=_model()), "optimizer"),
    ("diagnose.run", lambda tmp: diagnose.run(_model(), torch.rand(2, 4), device="tpu"), "device"),
    ("Diagnosis.save_html", lambda tmp: _diagnosis().save_html(tmp), "path"),
    ("Diagnosis.save_html", lambda tmp: _diagnosis().save_html(tmp / "no-such-folder" / "r.html"), "path"),
    ("Diagnosis.save_snapshot", lambda tmp: _diagnosis().save_snapshot(None), "path"),
    ("Diagnosis.save_snapshot", lambda tmp: _diagnosis().save_snapshot(tmp / "no-such-folder" / "s.pickle"), "path"),
    ("memory.track", lambda tmp: memory.track(lines="yes").__enter__(), "lines"),
    ("memory_timeline.series", lambda tmp: memory_timeline.series({}, by="op"), "by"),
    ("module_work.by_module", lambda tmp: module_work.by_module(None), "fn"),
]


class _ByName(torch.nn.Module):
    """forward's scale can only be given by name: passing it positionally is refused before any step."""

    def forward(self, x, *, scale):
        return x * scale


def _diagnosis():
    return diagnose.run(_model().eval(), torch.rand(2, 4))


@pytest.mark.parametrize("entry, call, argument", WRONG_CALLS,
                         ids=[f"{entry}-{argument}-{k}" for k, (entry, _, argument) in enumerate(WRONG_CALLS)])
def test_a_wrong_call_gets_a_clear_error(tmp_path, entry, call, argument):
    with pytest.raises((TypeError, ValueError)) as caught:
        call(tmp_path)
    message = str(caught.value)
    assert re.search(rf"`{re.escape(argument)}`", message), message          # names the argument
    assert len(message) > len(argument) + 30, message                        # and says more than its name


def test_the_census_covers_the_entry_points_the_issue_names():
    named = {"autograd_graph.trace", "graph_view.from_autograd", "graph_view.show", "graph_view.show_diff",
             "graph_diff.diff", "memory.track", "memory.timeline", "memory.saved_bytes_by_module",
             "memory_agreement.against_memtracker", "compile_lens.capture", "compile_view.from_report",
             "compilation.find_breaks", "compilation.compare_backends", "profiling.work", "profiling.regime",
             "profiling.trace_summary", "saving.save", "saving.load", "storage.record_lifetimes", "data.digits",
             "distributed.launch", "exercises.check", "mixed_precision.train_with_precision", "training.fit",
             "module_scope.record", "diagnose.run", "Diagnosis.save_html"}
    assert named <= {entry for entry, _, _ in WRONG_CALLS}


def test_a_directory_is_not_said_to_be_missing(tmp_path):
    with pytest.raises(ValueError, match="is a directory, not a file") as caught:
        saving.load(tmp_path, _model())
    assert "does not exist" not in str(caught.value)


def test_a_cuda_device_on_a_machine_without_cuda_says_so(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="this machine has none"):
        memory.cuda_history("cuda").__enter__()
