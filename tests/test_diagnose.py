"""diagnose.run on models nobody here wrote and on models with one planted problem each: every number it checks
against PyTorch's own tools agrees, each planted problem is in the top three findings with its place, the model
is left as it was, the timeline adds up and its snapshot is one torch.cuda._memory_viz reads, and the CLI says
what to fix."""
import contextlib
import copy
import gc
import io
import json
import pickle
import subprocess
import sys
import weakref

import pytest
import torch
from torch import nn
from torch.cuda import _memory_viz

from nbhelpers import memory_timeline, module_work, planted_models
from nbhelpers.diagnosis import diagnose
from nbhelpers.diagnosis import view as diagnosis_view
from tests import REPO, cli_in_process
from tests.test_unseen_models import ARCHITECTURES, Recurrent


class TwoBreaks(nn.Module):
    """Two graph breaks in one forward: a print, and a branch on a value."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(6, 6), nn.Linear(6, 3)

    def forward(self, x):
        h = self.a(x).relu()
        print("", end="")                               # break one
        if h.sum() > 0:                                 # break two: a branch on a tensor
            h = h * 2
        return self.b(h)


# six architectures the notebooks never use: torchvision, recurrent, attention, depthwise, tied, two breaks
UNSEEN = {"squeezenet": ARCHITECTURES["squeezenet"], "lstm": (lambda: Recurrent(nn.LSTM), ARCHITECTURES["lstm"][1]),
          "transformer_layer": ARCHITECTURES["transformer_layer"], "depthwise": ARCHITECTURES["depthwise"],
          "tied_weights": ARCHITECTURES["tied_weights"], "two_breaks": (TwoBreaks, lambda: torch.rand(4, 6))}
TOOLS = {"MemTracker", "FlopCounterMode", "torch._dynamo.explain", "saved_tensors_hooks"}


@pytest.fixture(scope="module")
def unseen():
    found = {}
    for name, (make, example) in UNSEEN.items():
        torch.manual_seed(0)
        found[name] = diagnose.run(make(), example())
    return found


class Attention(nn.Module):
    """Attention as ViTs and GPTs call it: on a CPU, FlopCounterMode has no formula for its kernel."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
        return nn.functional.scaled_dot_product_attention(q, k, v)


def test_only_numbers_both_sides_measure_apart_count_as_independent():
    # MemTracker's parameter and buffer rows are totals of the same lists; CPU attention's FLOPs, which
    # FlopCounterMode has no formula for, are left out of the FLOP rows instead of added to both sides alike
    torch.manual_seed(0)
    d = diagnose.run(Attention(), torch.rand(2, 5, 8))
    assert {a.name for a in d.agreements if not a.independent} == {"peak Parameter bytes", "peak Buffer bytes"}
    whole = next(a for a in d.agreements if a.name == "FLOPs of the whole step")
    total = d.work[module_work.TOTAL]
    assert total.added_flops > 0 and whole.ours == whole.theirs == total.flops - total.added_flops
    assert "of them 2 are totals both sides add up from the same list" in d.summary()


class TwoHeads(nn.Module):
    """Two outputs, the default loss on the first: the second head's saves are made, and freed with it."""

    def __init__(self):
        super().__init__()
        self.body, self.first, self.second = nn.Linear(8, 8), nn.Linear(8, 3), nn.Linear(8, 5)

    def forward(self, x):
        h = torch.tanh(self.body(x))
        return self.first(h), self.second(torch.sigmoid(h))


def test_saved_bytes_of_a_model_with_two_heads_are_every_outputs_graph_against_the_hooks():
    torch.manual_seed(0)
    d = diagnose.run(TwoHeads(), torch.rand(4, 8))
    (row,) = [a for a in d.agreements if a.tool == "saved_tensors_hooks"]
    in_loss = sum(s.nbytes for n in d.graph.nodes for s in n.saved)
    # the second head saves sigmoid's output twice (its own backward, the Linear's input: 4x8 float32 each) and
    # the Linear's weight (5x8): 2 * 128 + 160 B the loss's graph does not hold
    assert row.ours == row.theirs == in_loss + 2 * 128 + 160
    assert row.name == f"bytes saved for backward by every output's graph (the loss's: {in_loss:,} B)"


class SharedModule(nn.Module):
    """CoaT's trait (timm): one module held in two places. named_modules() names it by the first path (`a`), torch's
    ModuleTracker by the last its walk meets (`b.0`)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Sequential(self.a, nn.ReLU())

    def forward(self, x):
        return self.b(x)


def test_a_module_held_in_two_places_is_one_module_to_both_flop_counts():
    torch.manual_seed(0)
    d = diagnose.run(SharedModule(), torch.rand(4, 8))
    flops = {a.name: a for a in d.agreements if a.name.startswith("forward FLOPs of")}
    assert flops["forward FLOPs of SharedModule.a"].ours == flops["forward FLOPs of SharedModule.a"].theirs == 512
    assert [a for a in d.agreements if not a.agrees] == [] and "forward FLOPs of SharedModule.b.0" not in flops


@pytest.mark.parametrize("name", UNSEEN)
def test_every_agreement_holds_on_a_model_nobody_here_wrote(unseen, name):
    d = unseen[name]
    assert not d.error and not d.unchecked, (d.error, d.unchecked)
    assert {a.tool for a in d.agreements} == TOOLS
    assert [a for a in d.agreements if not a.agrees] == []
    assert d.graph is not None and d.forward is not None and d.compile is not None and len(d.export) == 2


def test_two_breaks_are_two_findings_at_their_lines(unseen):
    breaks = [f for f in unseen["two_breaks"].findings if f.kind == "graph-break"]
    assert sorted(f.where.split(": ", 1)[1] for f in breaks) == ['if h.sum() > 0:                                 # '
                                                               'break two: a branch on a tensor',
                                                               'print("", end="")                               # '
                                                               'break one']
    assert all(f.where.startswith("test_diagnose.py:") for f in breaks)
    assert next(a for a in unseen["two_breaks"].agreements if a.name == "graph breaks (one call)").ours == 2


PLACES = {"item": ".item() > 0.5", "outer product": "h[:, :, None] * h[:, None, :]", "float32 copy": "reference",
          "loop over batch": "range(x.shape[0])", "dropout left on": "DropoutLeftOn.drop",
          "buffer elsewhere": "BufferElsewhere.mask"}


@pytest.mark.parametrize("name", planted_models.PLANTED)
def test_each_planted_problem_is_in_the_top_three_findings_with_its_place(name):
    make, example, kind = planted_models.PLANTED[name]
    torch.manual_seed(0)
    d = diagnose.run(make(), example())
    top = [f for f in d.findings[:3] if f.kind == kind]
    assert top, [f"{f.kind}: {f.title}" for f in d.findings]
    assert PLACES[name] in top[0].where
    assert [a for a in d.agreements if not a.agrees] == []


def test_the_fixed_model_has_none_of_the_planted_findings():
    torch.manual_seed(0)
    d = diagnose.run(planted_models.Fixed(), torch.randn(8, 32))
    assert {f.kind for f in d.findings} <= {"memory", "checkpoint", "regime"}


def _flat(state: dict) -> list:
    """An optimizer's state_dict as plain numbers, to compare by value."""
    return [(k, name, v.tolist() if isinstance(v, torch.Tensor) else v)
            for k, entry in sorted(state["state"].items()) for name, v in sorted(entry.items())] + [state["param_groups"]]


def test_the_model_the_optimizer_and_the_rng_are_left_as_they_were():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Dropout(0.2), nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    x = torch.randn(5, 6)
    model(x).sum().backward()
    optimizer.step()                                           # state exists, and gradients are kept
    grads = [p.grad for p in model.parameters()]
    before = ({k: v.clone() for k, v in model.state_dict().items()}, [g.clone() for g in grads],
              _flat(optimizer.state_dict()), torch.random.get_rng_state())
    model[2].eval()
    d = diagnose.run(model, x, optimizer=optimizer)
    assert not d.error and "Adam.step()" in d.step
    assert all(torch.equal(v, before[0][k]) for k, v in model.state_dict().items())
    assert all(p.grad is g and torch.equal(g, kept) for p, g, kept in zip(model.parameters(), grads, before[1]))
    assert _flat(optimizer.state_dict()) == before[2]
    assert torch.equal(torch.random.get_rng_state(), before[3])
    assert model.training and not model[2].training


@pytest.mark.parametrize("make, example", [
    (lambda: nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2)), lambda: torch.randn(5, 6)),
    (lambda: nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), lambda: torch.randn(4, 3, 8)),
], ids=["mlp", "transformer_layer"])
def test_once_the_diagnosis_is_dropped_nothing_of_the_model_stays_alive(make, example):
    """Three ways a diagnosis kept every model it saw: strict export leaves Dynamo's compiled graph (holding the
    parameters) as a global of torch._dynamo.functional_export; saved-tensor hooks that return the tensor itself
    make a graph that saves its output hold itself; MemTracker's ModTracker leaves a hook on each module input's
    node that holds the node (nbhelpers/modtracker_hooks.py)."""
    torch.manual_seed(0)
    model = make()
    alive = [weakref.ref(model), *map(weakref.ref, model.parameters())]
    d = diagnose.run(model, example())
    assert not d.error and d.export and d.export[0].strict and d.export[0].ok     # strict export ran, and worked
    assert any(a.tool == "MemTracker" for a in d.agreements)
    del model, d
    gc.collect()
    assert [r for r in alive if r() is not None] == []


class Counting(nn.Module):
    """Changes a tensor it keeps as a plain attribute in place, in forward (a running mean kept by hand)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 2)
        self.ema = torch.zeros(2)

    def forward(self, x):
        y = self.fc(x)
        self.ema.mul_(0.9).add_(y.detach().mean(0))
        return y


class WeightedLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, out, target):
        return (self.scale * (out - target) ** 2).mean()


def test_what_the_optimizer_and_the_loss_hold_outside_the_model_is_put_back_too():
    torch.manual_seed(0)
    model, loss_fn, extra = Counting(), WeightedLoss(), nn.Parameter(torch.ones(3))
    optimizer = torch.optim.Adam([*model.parameters(), *loss_fn.parameters(), extra], lr=0.1)
    x, y = torch.randn(5, 6), torch.randn(5, 2)
    loss_fn(model(x), y).backward()
    extra.grad = torch.full((3,), 0.5)
    optimizer.step()
    held = {name: t.clone() for name, t in [("ema", model.ema), ("scale", loss_fn.scale), ("extra", extra)]}
    state_tensors = [v for entry in optimizer.state.values() for v in entry.values()]
    before = _flat(optimizer.state_dict())
    d = diagnose.run(model, x, target=y, loss_fn=loss_fn, optimizer=optimizer)
    assert not d.error and "loss = WeightedLoss(output, target)" in d.step
    assert all(torch.equal(t, held[name]) for name, t in [("ema", model.ema), ("scale", loss_fn.scale),
                                                          ("extra", extra)])
    assert torch.equal(extra.grad, torch.full((3,), 0.5))
    assert _flat(optimizer.state_dict()) == before
    assert [v for entry in optimizer.state.values() for v in entry.values()] == state_tensors   # the same objects


def test_lazy_parameters_are_refused_with_what_to_do():
    with pytest.raises(ValueError, match="call it once on an example input"):
        diagnose.run(nn.LazyLinear(3), torch.randn(2, 4))


def test_a_sparse_buffer_is_no_obstacle():
    class Graph(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.register_buffer("adjacency", torch.eye(5).to_sparse())

        def forward(self, x):
            return torch.sparse.mm(self.adjacency, self.fc(x))

    d = diagnose.run(Graph(), torch.randn(5, 4))
    assert not d.error and d.graph is not None


class TwoSaved(nn.Module):
    """A node that saves a big tensor and a small one: the finding names the big one's line."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 64)

    def forward(self, x):
        h = self.fc(x)
        outer = h[:, :, None] * h[:, None, :]
        w = torch.sigmoid(h)[:, None, :]
        return (outer * w).sum(-1)


def test_the_saved_tensor_finding_names_the_line_of_the_big_tensor():
    torch.manual_seed(0)
    d = diagnose.run(TwoSaved(), torch.randn(4, 16))
    (found,) = [f for f in d.findings if f.kind == "saved-for-backward"]
    assert found.where.endswith("outer = h[:, :, None] * h[:, None, :]"), found.where


def test_a_layer_that_reads_no_mode_is_not_a_mode_finding():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    model[0].eval()                                    # Linear's forward never reads self.training
    assert "mode" not in {f.kind for f in diagnose.run(model, torch.randn(3, 4)).findings}
    model[0].train()
    model.add_module("drop", nn.Dropout(0.1))
    model.drop.eval()
    modes = [f for f in diagnose.run(model, torch.randn(3, 4)).findings if f.kind == "mode"]
    assert len(modes) == 1 and modes[0].where == "Sequential.drop"


def test_a_compiled_model_is_diagnosed_as_the_eager_module_it_wraps():
    torch.manual_seed(0)
    d = diagnose.run(torch.compile(planted_models.Fixed()), torch.randn(8, 32))
    assert d.model == "Fixed" and "model._orig_mod" in d.step and all(a.agrees for a in d.agreements)
    torch.compiler.reset()


def test_a_model_in_eval_mode_is_diagnosed_for_inference():
    torch.manual_seed(0)
    d = diagnose.run(planted_models.Fixed().eval(), torch.randn(8, 32))
    assert d.step.startswith("inference") and d.graph is None and d.tracker.events
    assert {e.phase for e in d.tracker.events} == {"forward"}


def test_a_lens_that_cannot_run_says_why_instead_of_raising():
    torch.manual_seed(0)
    d = diagnose.run(nn.EmbeddingBag(20, 8, sparse=True), torch.randint(0, 20, (3, 5)))
    assert any(text.startswith("memory vs MemTracker: ValueError") for text in d.unchecked)
    assert "not checked: memory vs MemTracker" in d.summary()


@pytest.mark.parametrize("call, error, words", [
    (lambda: diagnose.run(lambda x: x, torch.ones(2)), TypeError, "`model`"),
    (lambda: diagnose.run(planted_models.Fixed(), [torch.ones(2, 32)]), TypeError, "`example_inputs`"),
    (lambda: diagnose.run(planted_models.Fixed(), torch.ones(2, 32), target=[1, 2]), TypeError, "`target`"),
    (lambda: diagnose.run(planted_models.Fixed(), torch.ones(2, 32), loss_fn="mse"), TypeError, "`loss_fn`"),
    (lambda: diagnose.run(planted_models.Fixed(), torch.ones(2, 32), optimizer="sgd"), TypeError, "`optimizer`"),
    (lambda: diagnosis_view.summary(None, top=0), ValueError, "`top`"),
])
def test_a_wrong_call_says_what_to_pass(call, error, words):
    with pytest.raises(error, match=words):
        call()


@pytest.fixture(scope="module")
def outer():
    torch.manual_seed(0)
    return diagnose.run(planted_models.OuterProduct(), torch.randn(8, 32))


def test_the_timeline_adds_up_to_the_live_bytes_by_category_and_by_module(outer):
    state = memory_timeline.state(outer)
    for by in ("category", "module"):
        stacked = memory_timeline.series(state, by)
        assert all(sum(v[i] for v in stacked.values()) == e.live_bytes for i, e in enumerate(outer.tracker.events))


def test_a_forward_op_is_held_by_the_node_that_saved_its_bytes_and_a_backward_op_by_the_node_running(outer):
    state, graph = memory_timeline.state(outer), outer.graph
    for e in outer.tracker.events:
        node = state["node"][e.index]
        if e.phase == "backward":
            assert node >= 0 and node in outer.nodes.values()
        elif node >= 0:
            made = {a.key for a in outer.tracker.allocations if a.op_index == e.index}
            assert made & {s.storage_ptr for s in graph.nodes[node].saved}, e


def test_the_backward_is_timed_node_by_node_on_the_same_graph_the_memory_lens_traced(outer):
    graph, times = outer.timed
    assert [n.label for n in graph.nodes] == [n.label for n in outer.graph.nodes]     # the same step's graph
    assert [n.modules for n in graph.nodes] == [n.modules for n in outer.graph.nodes]
    assert sorted(t.node for t in times.nodes) == list(range(len(graph.nodes)))        # every node once
    assert sum(t.us for t in times.nodes) + sum(us for _, us in times.unowned) == pytest.approx(times.total_us)
    assert outer.seconds["backward's time by node"] > 0
    shown = outer.show_times()
    assert shown.timeline and "<rect" in shown._above
    inference = diagnose.run(nn.Linear(3, 2).eval(), torch.randn(2, 3))
    assert inference.timed is None
    with pytest.raises(ValueError, match="no backward was timed"):
        inference.show_times()


def test_the_browser_stacks_the_timeline_as_python_does(outer, tmp_path):
    from tests.test_graph_layout_js import _node
    from nbhelpers import graph_view

    state = memory_timeline.state(outer)
    (tmp_path / "esm.mjs").write_text(graph_view.esm_source())
    (tmp_path / "driver.mjs").write_text(
        'import * as gv from "./esm.mjs";\nimport { readFileSync } from "fs";\n'
        'const tl = JSON.parse(readFileSync(0, "utf8"));\n'
        'const out = {};\nfor (const by of ["category", "module"]) { const s = gv.timelineSeries(tl, by); '
        'out[by] = Object.fromEntries(s.names.map((n, k) => [n, s.values[k]])); }\n'
        'process.stdout.write(JSON.stringify(out));\n')
    done = subprocess.run([_node(), "driver.mjs"], cwd=tmp_path, input=json.dumps(state), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {by: memory_timeline.series(state, by) for by in ("category", "module")}


def test_the_snapshot_is_one_torchs_memory_viz_reads(outer, tmp_path):
    outer.save_snapshot(tmp_path / "step.pickle")
    snapshot = pickle.loads((tmp_path / "step.pickle").read_bytes())
    trace = snapshot["device_traces"][0]
    assert _memory_viz.trace(snapshot).splitlines()[1] == f"{len(trace)} entries"
    assert "segments: " in _memory_viz.segsum(snapshot)
    flame = _memory_viz.memory(snapshot, format_flamegraph=lambda lines: lines)      # no flamegraph.pl download
    assert "planted_models.py" in flame
    assert sum(s["total_size"] for s in snapshot["segments"]) == outer.tracker.live_bytes
    made = [e["size"] for e in trace if e["action"] == "alloc"]
    assert [e["action"] for e in trace].count("segment_alloc") == len(made)
    assert sum(made) == sum(a.nbytes for a in outer.tracker.allocations)
    assert "snapshot.pickle" in _memory_viz.trace_plot(snapshot)                        # the viewer's own page
    with contextlib.redirect_stdout(io.StringIO()) as unpaired:                        # prints each free it cannot pair
        _memory_viz.filter_alloc_free_pairs(copy.deepcopy(snapshot))
    assert unpaired.getvalue() == ""


def test_the_page_is_one_file_under_a_megabyte_that_asks_for_nothing(tmp_path):
    import torchvision

    torch.manual_seed(0)
    d = diagnose.run(torchvision.models.resnet18(num_classes=10), torch.randn(2, 3, 64, 64))
    d.save_html(tmp_path / "report.html")
    page = (tmp_path / "report.html").read_text()
    assert len(page.encode()) <= diagnosis_view.MAX_PAGE_BYTES
    assert "default-src 'none'" in page and " src=" not in page and " href=" not in page and "<link" not in page
    data = json.loads(page.split('id="report-data">', 1)[1].split("</script>", 1)[0])
    assert len(data["widgets"]) == 3 and data["widgets"][0]["timeline"] and data["widgets"][1]["timeline"]


def test_a_hostile_name_in_the_data_cannot_end_the_script(tmp_path):
    model = nn.Sequential()
    model.add_module("</script><img src=x onerror=alert(1)>", nn.Linear(3, 3))
    model.add_module("@CODE@", nn.Tanh())
    d = diagnose.run(model, torch.randn(2, 3))
    d.save_html(tmp_path / "report.html")
    page = (tmp_path / "report.html").read_text()
    assert page.count("</script>") == 2 and "<img" not in page.split('id="report-data">', 1)[1].split("</script>")[0]


def _cli(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "nbhelpers", "diagnose", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env={**__import__("os").environ, "PYTHONPATH": str(REPO)})


def test_the_cli_prints_the_top_findings_and_writes_the_page_and_the_snapshot(tmp_path):
    done = _cli(tmp_path, "nbhelpers.planted_models:ItemInForward", "--input", "8x32", "--target", "10",
                "--top", "2", "--out", "report.html", "--snapshot", "step.pickle")
    assert done.returncode == 0, done.stderr
    assert "loss = cross_entropy(output, target)" in done.stdout and "1. [graph-break]" in done.stdout
    assert (tmp_path / "report.html").is_file() and (tmp_path / "step.pickle").is_file()


def test_the_cli_writes_what_it_measured_when_the_forward_raises(tmp_path):
    done = _cli(tmp_path, "nbhelpers.planted_models:BufferElsewhere", "--input", "8x32", "--out", "report.html")
    assert done.returncode == 1
    assert "the step raised RuntimeError" in done.stdout and "2. [device]" in done.stdout
    assert "BufferElsewhere.mask" in (tmp_path / "report.html").read_text()


@pytest.mark.parametrize("args, words", [
    (["nowhere_at_all:build", "--input", "2x3"], "cannot import 'nowhere_at_all'"),
    (["nbhelpers.planted_models", "--input", "2x3"], "is not MODULE:FACTORY"),
    (["nbhelpers.planted_models:Nothing", "--input", "2x3"], "has no function 'Nothing'"),
    (["builtins:dict", "--input", "2x3"], "returned dict, not a torch.nn.Module"),
    (["torch.nn:Linear", "--input", "2x3"], "raised TypeError"),
    (["nbhelpers.planted_models:Fixed", "--input", "8xthirty"], "--input '8xthirty' is not a shape"),
    (["nbhelpers.planted_models:Fixed", "--input", "8x32", "--dtype", "float33"], "is not a torch dtype"),
])
def test_the_cli_refuses_a_bad_command_line_with_what_to_fix(tmp_path, monkeypatch, args, words):
    done = cli_in_process.diagnose(tmp_path, monkeypatch, *args)
    assert done.returncode == 2 and words in done.stderr, done.stderr
    assert not (tmp_path / "report.html").exists()


class CountsItsCalls(nn.Module):
    """A small MLP that counts how often its forward runs (eagerly, or as a compiled call replays the += )."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(32, 64), nn.Linear(64, 10)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.fc2(self.fc1(x).relu())


def test_the_forward_runs_a_bounded_number_of_times_and_the_report_says_how_often_per_lens():
    torch.manual_seed(0)
    model = CountsItsCalls()
    d = diagnose.run(model, torch.randn(8, 32))
    assert set(d.forward_calls) == set(d.seconds) and all(n >= 0 for n in d.forward_calls.values())
    assert model.calls < 50 and sum(d.forward_calls.values()) < 50, (model.calls, d.forward_calls)
    assert model.calls <= sum(d.forward_calls.values())     # every call counted (an export's runs no Python +=)


class KeepsHistory(nn.Module):
    """Appends each step's activations to a list: every step's graph stays alive (the commonest real leak)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(32, 64), nn.Linear(64, 10)
        self.history = []

    def forward(self, x):
        h = self.fc1(x).relu()                  # (8, 64) float32: 2,048 B
        self.history.append(h)
        return self.fc2(h)


def test_a_list_the_forward_appends_to_is_a_leak_named_by_its_holder_and_is_put_back():
    torch.manual_seed(0)
    model, mine = KeepsHistory(), torch.zeros(1)
    model.history.append(mine)
    d = diagnose.run(model, torch.randn(8, 32))
    leak = d.findings[0]
    assert leak.kind == "leak" and "KeepsHistory.history" in leak.title, [f.title for f in d.findings]
    assert d.growth.grows and d.growth.per_step == (2048, 2048)
    assert leak.where.startswith("test_diagnose.py:") and leak.where.endswith("self.history.append(h)")
    assert "`self.history.append(h.detach())`" in leak.evidence
    assert len(model.history) == 1 and model.history[0] is mine          # nothing the diagnosis made is left


RUNNING = torch.zeros(())


def accumulating_mse(output, target):
    global RUNNING
    loss = nn.functional.mse_loss(output, target)
    RUNNING = RUNNING + loss                    # a running total kept with the graph of every step
    return loss


def test_a_loss_accumulated_with_its_graph_in_a_module_global_is_named_and_put_back():
    torch.manual_seed(0)
    before = RUNNING
    d = diagnose.run(planted_models.Fixed(), torch.randn(8, 32), target=torch.randn(8, 10), loss_fn=accumulating_mse)
    (leak,) = [f for f in d.findings if f.kind == "leak"]
    assert "tests.test_diagnose.RUNNING keeps the autograd graph of every step" in leak.title
    assert d.growth.holders[0].spans == 3
    assert "`RUNNING = RUNNING + loss.detach()`" in leak.evidence and leak.where.startswith("test_diagnose.py:")
    assert RUNNING is before and RUNNING.grad_fn is None and RUNNING.item() == 0


class TotalInPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 10)
        self.total = torch.zeros(())

    def forward(self, x):
        out = self.fc(x)
        self.total += out.sum()                 # in place: the old tensor now carries every step's graph
        return out


def test_a_total_added_in_place_is_a_leak_and_its_graph_is_dropped_afterwards():
    torch.manual_seed(0)
    model = TotalInPlace()
    kept = model.total
    d = diagnose.run(model, torch.randn(8, 32))
    assert any(f.kind == "leak" and "TotalInPlace.total" in f.title for f in d.findings), [f.title for f in d.findings]
    assert model.total is kept and model.total.grad_fn is None and not model.total.requires_grad
    assert model.total.item() == 0


@pytest.mark.parametrize("odd", [nn.InstanceNorm1d(2), nn.BatchNorm1d(2, track_running_stats=False), nn.Dropout(0.0)],
                         ids=["instancenorm", "batchnorm_without_running_stats", "dropout_p0"])
def test_a_module_whose_mode_changes_nothing_is_not_a_mode_finding(odd):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Unflatten(1, (2, 4)), odd, nn.Flatten(), nn.Linear(8, 2))
    odd.eval()                                       # the model trains, this one module is in eval mode
    d = diagnose.run(model, torch.randn(6, 4))
    assert "mode" not in {f.kind for f in d.findings}, [f.title for f in d.findings]
    assert [(e.kind, e.change) for e in d.modes] == [(type(odd).__name__, 0.0)]
    assert model.training and not odd.training


def test_dropout_left_in_eval_mode_in_a_training_model_is_a_mode_finding_that_names_dropout():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2))
    model[1].eval()
    (found,) = [f for f in diagnose.run(model, torch.randn(6, 4)).findings if f.kind == "mode"]
    assert found.title.startswith("Dropout Sequential.1 is in eval mode while the model is in train mode")
    assert "BatchNorm" not in found.evidence and "`model.train()`" in found.evidence
    assert model.training and not model[1].training
