"""Findings ranked by what they cost, measured, one per cause, placed at the learner's own line and saying what to
change as code: on issue 38's example (a `.item()` branch that breaks the graph and fails both exports, in a model
whose backward peaks at over a thousand times its parameters), on every planted model, and on a recurrent state
carried into the next step, which `retain_graph=True` turns into a leak."""
import json

import pytest
import torch
from torch import nn

from nbhelpers import compile_lens, planted_models
from nbhelpers.diagnosis import compile_findings, diagnose, fixes, leaks, memory_findings, rank
from nbhelpers.diagnosis import view as diagnosis_view


class BranchOnItem(nn.Module):
    """Issue 38's ranking example, small enough for a CPU: the costliest problem is the peak, not the branch."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)                   # 272 parameters: 1,088 B

    def forward(self, x):
        h = self.fc(x)                                # (B, 16)
        wide = h.repeat(1, 1024).tanh()               # (B, 16384): saved for backward
        if x.sum().item() > 0:                        # a branch on a value
            wide = wide * 2
        return wide.mean(-1)


class Widen(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        return self.fc(x).repeat(1, 256).tanh()       # (B, 4096): what checkpointing this block frees


class Widened(nn.Module):
    def __init__(self):
        super().__init__()
        self.widen = Widen()

    def forward(self, x):
        return self.widen(x).sin()


class Carry(nn.Module):
    """A recurrent state kept from step to step without .detach(): the next backward runs into the freed graph of
    the step before, and the learner's usual way out, retain_graph=True, keeps every step's graph alive."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.h = torch.zeros(8, 16)

    def forward(self, x):
        self.h = torch.tanh(self.fc(x) + self.h)      # the planted problem: carries this step's graph on
        return self.h


def _run(model, *inputs):
    torch.manual_seed(0)
    return diagnose.run(model, *inputs)


def _branch_input(seed: int) -> torch.Tensor:
    return torch.randn(8, 16, generator=torch.Generator().manual_seed(seed))


def _branch_goes(x: torch.Tensor) -> list[bool]:
    """Which way the branch goes at the four batch sizes the compile lens calls (the first rows repeated)."""
    return [bool(x[torch.arange(8 + k) % 8].sum() > 0) for k in range(4)]


@pytest.fixture(scope="module")
def ranking():
    x = _branch_input(0)
    assert _branch_goes(x) == [True] * 4       # one way at every size: no recompile on the value (see below)
    return _run(BranchOnItem(), x)


@pytest.fixture(scope="module")
def diagnoses(ranking, carried):
    """Every diagnosis of this file, by name: the planted models', issue 38's, a block to checkpoint, a carried
    state (together they make every kind of finding)."""
    found = {name: _run(make(), *example()) for name, (make, example, _) in planted_models.PLANTED.items()}
    return found | {"ranking": ranking, "widen": _run(Widened(), torch.randn(8, 16)), "carry": carried[2]}


@pytest.fixture(scope="module")
def carried():
    """A Carry model, the state it held before its diagnosis, and the diagnosis."""
    model = Carry()
    return model, model.h, _run(model, torch.randn(8, 16))


def _every(findings):
    for f in findings:
        yield f
        yield from f.consequences


def test_the_peak_of_over_a_thousand_times_the_parameters_ranks_first(ranking):
    first = ranking.findings[0]
    assert first.cost.unit == "B" and first.cost.share > 0.99, first.cost
    assert first.cost.amount > 1000 * first.cost.parameters == 1000 * 1088
    assert first.where.startswith("test_diagnose_ranking.py:") and "wide = h.repeat(1, 1024).tanh()" in first.where
    assert [c.kind for c in first.consequences] == ["memory"] and first.kind == "saved-for-backward"
    assert first.consequences[0].cost == first.cost            # the group costs what its costliest member does


def test_one_data_dependent_branch_is_one_finding_with_the_break_and_both_exports_under_it(ranking):
    placed = [f for f in _every(ranking.findings) if "if x.sum().item() > 0:" in f.where]
    assert len(placed) == 3                                     # the break, strict export, non-strict export
    branch = ranking.findings[1]
    assert branch.kind == "graph-break" and "if x.sum().item() > 0:" in branch.where
    assert [c.title.split(" fails:")[0] for c in branch.consequences] == ["torch.export (strict)",
                                                                           "torch.export (non-strict)"]
    assert branch.cost.unit == "ops" and 0 < branch.cost.share <= 0.5
    assert branch.fix.startswith("out = torch.cond(x.sum() > 0, true_fn, false_fn, operands)")


def test_a_branch_that_goes_the_other_way_recompiles_under_its_break_not_as_a_batch_size_problem():
    x = _branch_input(2)
    assert _branch_goes(x) == [True, False, True, False]
    report = compile_lens.capture_calls(BranchOnItem(), [(x[torch.arange(8 + k) % 8],) for k in range(4)])
    torch.compiler.reset()
    resumed = [e for e in report.entries if e.function.startswith("torch_dynamo_resume_in_forward_at_")]
    assert [e.failed[0].split(": ", 1)[1] for e in resumed[1:]] == ["tensor 'wide' size mismatch at index 0. "
                                                                    "expected 8, actual 9", "___stack0 <= 0.0"]
    found = compile_findings.compiled(report, None, rank.Budget(10**6, 10**4, seconds=1e-3))
    (branch,) = rank.ranked(found)                      # one cause: the break heads, the recompile under it
    assert branch.kind == "graph-break" and [c.kind for c in branch.consequences] == ["recompile"]
    (again,) = branch.consequences
    assert again.where == branch.where and "if x.sum().item() > 0:" in again.where and again.fix == branch.fix
    assert "___stack0 <= 0.0" in again.evidence and "not a guard on a size" in again.evidence
    assert branch.cost == again.cost and again.cost.unit == "s"     # one compile, measured, against the step's time


def test_the_costly_findings_come_in_the_order_of_their_shares(diagnoses):
    for name, d in diagnoses.items():
        tiers = [rank.tier(f) for f in d.findings]
        assert tiers == sorted(tiers), name
        shares = [f.cost.share for f in d.findings if rank.tier(f) == 1]
        assert shares == sorted(shares, reverse=True), name


def test_the_text_and_the_page_list_the_cost_the_fix_and_the_consequences_under_their_finding(ranking):
    text = ranking.summary(3)
    at = text.index("2. [graph-break]")
    lines = text[at:].splitlines()
    assert lines[3] == f"   cost: {ranking.findings[1].cost}" and lines[4].startswith("   fix: out = torch.cond(")
    assert lines[5:8] == ["   the same line also causes:",
                          f"   - [export] {ranking.findings[1].consequences[0].title}",
                          f"   - [export] {ranking.findings[1].consequences[1].title}"]
    page = diagnosis_view.page(ranking)
    data = json.loads(page.split('id="report-data">', 1)[1].split("</script>", 1)[0])
    branch = data["findings"][1]
    assert [c["kind"] for c in branch["consequences"]] == ["export", "export"]
    assert branch["fix"] == ranking.findings[1].fix and branch["cost"] == str(ranking.findings[1].cost)


def test_every_place_is_a_line_of_the_learners_file(diagnoses):
    for name, d in diagnoses.items():
        home = "planted_models.py:" if name in planted_models.PLANTED else "test_diagnose_ranking.py:"
        for f in _every(d.findings):
            assert f.where.startswith(home), (name, f.kind, f.where)


def test_every_kind_of_finding_says_what_to_change_as_python_code(diagnoses):
    seen = set()
    for d in diagnoses.values():
        for f in _every(d.findings):
            compile(f.fix, f"<fix of {f.kind}>", "exec")         # raises on anything but Python
            assert f.fix.strip() and not f.fix.lstrip().startswith("#"), f
            seen.add(f.kind)
    assert seen == set(rank.ORDER)


@pytest.mark.parametrize("fix", [fixes.checkpoint("ResNet.layer1.0"), fixes.mode("eval", "layer1.0.bn1"),
                                 fixes.branch("elif h.mean().item() > 0.5 and x.sum() > 0:  # why"),
                                 fixes.register("total", "m.py:3: self.total = torch.zeros(()) [Net.total]")],
                         ids=["checkpoint", "mode", "branch", "register"])
def test_a_fix_reaches_a_child_by_index_and_drops_comments_and_paths(fix):
    compile(fix, "<fix>", "exec")
    assert "[Net.total]" not in fix and ".0" not in fix.split("#")[0].replace("0.5", "")


def test_a_state_carried_into_the_next_step_is_found_as_retain_graph_would_keep_it(diagnoses):
    d = diagnoses["carry"]
    (leak,) = [f for f in _every(d.findings) if f.kind == "leak"]
    assert leak.title == "Carry.h carries the autograd graph from one step into the next"
    assert d.growth.retained and d.growth.holders[0].spans == 3 and all(n > 0 for n in d.growth.per_step)
    assert "retain_graph=True" in leak.evidence and "Trying to backward through the graph a second time" in leak.evidence
    assert leak.fix.startswith("self.h = torch.tanh(self.fc(x) + self.h).detach()")
    assert leak.where.startswith("test_diagnose_ranking.py:") and leak.where.endswith("carries this step's graph on")


def test_the_carried_state_is_put_back_without_a_graph(carried):
    model, kept, _ = carried
    assert model.h is kept and model.h.grad_fn is None and torch.equal(model.h, torch.zeros(8, 16))


KEPT = []


class Wide(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 256)

    def forward(self, x):
        return self.fc(x).tanh()


def test_losses_kept_after_backward_with_retain_graph_keep_their_saved_tensors_and_are_named():
    model, x = Wide(), torch.randn(8, 16)

    def step():
        loss = model(x).sum()
        loss.backward(retain_graph=True)
        KEPT.append(loss)                             # every step's loss, with its graph and its saved tensors

    try:
        growth = leaks.across_steps(step, {"model": model})
    finally:
        KEPT.clear()
    (held,) = growth.holders
    assert held.path == "tests.test_diagnose_ranking.KEPT" and held.retained == held.graphs == 2
    assert all(n >= 8 * 256 * 4 for n in growth.per_step)      # the tanh output each graph saved, at least
    (leak,) = memory_findings.leak(growth, rank.Budget(10**6, 10**4))
    assert "retain_graph=True" in leak.evidence and leak.fix == "KEPT.append(loss.detach())"


def test_a_layer_left_in_eval_mode_in_a_training_model_ranks_after_what_is_measured():
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2))
    model[1].eval()                                   # often meant (a frozen BatchNorm is): no cost, last tier
    found = _run(model, torch.randn(6, 4)).findings
    (mode,) = [f for f in found if f.kind == "mode"]
    assert mode.maybe_meant and rank.tier(mode) == 2 and mode.fix.startswith("model.train()")
    assert found[0].cost is not None and found.index(mode) > 0        # what is measured comes first
