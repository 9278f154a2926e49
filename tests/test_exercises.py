"""Every exercise can be passed (its reference solution does) and failed (a tempting wrong answer does,
for the reason it should); the notebooks ship them unanswered, two or three per notebook."""
import re
from pathlib import Path

import nbformat
import pytest
import torch

from nbhelpers import exercises
from nbhelpers.exercises import registry
from tests.exercise_solutions import CASES, MORE_WRONG, RULE_BREAKERS

IDS = sorted(registry.EXERCISES)
VALUE_ANSWERS = {id for id, (solution, _, _) in CASES.items() if not callable(solution)}  # dicts, not code
NOTEBOOKS = sorted(Path(__file__).parent.parent.joinpath("notebooks").glob("[0-9][0-9]_*.ipynb"))
CHECK_CALL = re.compile(r'exercises\.check\("(\d\d)\.(\d)"')


def _stub(*args, **kwargs):
    raise NotImplementedError("your code here")


def test_every_exercise_has_a_reference_and_a_wrong_answer():
    assert set(CASES) == set(IDS)


@pytest.mark.parametrize("exercise", IDS)
def test_reference_solution_passes(exercise):
    verdict = exercises.grade(exercise, CASES[exercise][0])
    assert verdict.passed, str(verdict)
    assert str(verdict) == f"PASS {exercise} · {verdict.title}"


@pytest.mark.parametrize("exercise", IDS)
def test_wrong_answer_fails_for_its_reason(exercise):
    _, wrong, reason = CASES[exercise]
    verdict = exercises.grade(exercise, wrong)
    assert not verdict.passed
    assert reason in verdict.problem, str(verdict)
    assert str(verdict).startswith(f"FAIL {exercise} · ") and str(verdict).endswith(f"Hint: {verdict.hint}")


WRONG = [(exercise, k) for exercise in IDS for k in range(len(MORE_WRONG.get(exercise, ())))]


@pytest.mark.parametrize("exercise, k", WRONG, ids=[f"{e}-{k}" for e, k in WRONG])
def test_each_further_wrong_answer_fails_for_its_reason(exercise, k):
    wrong, reason = MORE_WRONG[exercise][k]
    verdict = exercises.grade(exercise, wrong)
    assert not verdict.passed and reason in verdict.problem, str(verdict)


@pytest.mark.parametrize("exercise", IDS)
def test_every_exercise_rejects_at_least_three_wrong_answers(exercise):
    """The blank (test_unanswered_exercise_says_so), the tempting one, and at least one more."""
    assert len(MORE_WRONG.get(exercise, ())) >= 1, f"{exercise} has only the blank and one wrong answer"


@pytest.mark.parametrize("exercise", IDS)
def test_unanswered_exercise_says_so(exercise):
    stubs = [...] if exercise in VALUE_ANSWERS else [..., _stub]
    for stub in stubs:
        verdict = exercises.grade(exercise, stub)
        assert not verdict.passed and verdict.problem.startswith("not answered yet"), str(verdict)
        assert "Hint" not in str(verdict), "a hint under a blank exercise gives the answer away"


def _divides_by_zero(*args, **kwargs):
    return 1 / 0


@pytest.mark.parametrize("exercise", sorted(set(IDS) - VALUE_ANSWERS))
def test_an_error_in_the_answer_is_reported_not_raised(exercise):
    verdict = exercises.grade(exercise, _divides_by_zero)
    # opcheck catches the fake's error itself and reports it as a failed test
    expected = ("opcheck's test_faketensor failed: division by zero" if exercise == "11.1"
                else "your code raised ZeroDivisionError: division by zero")
    assert verdict.problem == expected, str(verdict)


def test_torchs_own_not_implemented_error_is_an_error_not_a_blank():
    def answer(a, b):
        raise NotImplementedError("Could not run 'aten::foo' with arguments from the 'Meta' backend")
    verdict = exercises.grade("01.1", answer)
    assert verdict.problem == ("your code raised NotImplementedError: Could not run 'aten::foo' with "
                               "arguments from the 'Meta' backend")


def test_a_dict_answer_with_a_blank_is_unanswered():
    answer = dict(CASES["06.1"][0], **{"x @ w.T": ...})
    assert set(answer) == set(CASES["06.1"][0])
    assert exercises.grade("06.1", answer).problem.startswith("not answered yet")


def test_check_prints_exactly_the_verdict_line(capsys):
    exercises.check("04.2", CASES["04.2"][1])
    assert capsys.readouterr().out == f"{exercises.grade('04.2', CASES['04.2'][1])}\n"


def test_unknown_exercise_names_the_known_ones():
    with pytest.raises(ValueError, match=r"`exercise` must be an exercise id such as \"03\.1\"; got '3\.1'; "
                                         r"the exercises are 00\.1, 00\.2, 01\.1"):
        exercises.grade("3.1", None)


def test_grading_leaves_the_learners_rng_and_grad_mode_alone():
    torch.manual_seed(1234)
    state = torch.get_rng_state()
    with torch.no_grad():
        for exercise in ("02.2", "03.3", "06.2", "00.2"):
            assert exercises.grade(exercise, CASES[exercise][1]).passed is False
            assert not torch.is_grad_enabled()
    assert torch.equal(torch.get_rng_state(), state)


def test_grading_does_not_depend_on_the_learners_rng():
    verdicts = []
    for seed in (0, 99):
        torch.manual_seed(seed)
        verdicts.append(str(exercises.grade("03.3", CASES["03.3"][1])))
    assert verdicts[0] == verdicts[1]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_ends_with_two_or_three_unanswered_exercises(path):
    nb = nbformat.read(path, as_version=4)
    headings = [line for c in nb.cells if c.cell_type == "markdown" for line in c.source.splitlines()
                if line.startswith("## ")]
    assert headings[-2:] == ["## Summary", "## Exercises"]
    checks = [(c, m) for c in nb.cells if c.cell_type == "code" for m in CHECK_CALL.finditer(c.source)]
    assert 2 <= len(checks) <= 3
    for cell, match in checks:
        assert match.group(1) == path.name[:2], f"{match.group(0)} belongs to another notebook"
        exercise = f"{match.group(1)}.{match.group(2)}"
        shown = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        assert shown.startswith(f"FAIL {exercise} · ") and "not answered yet" in shown, \
            f"{path.name} ships {exercise} answered or unexecuted: {shown!r}"


def test_every_exercise_is_in_a_notebook():
    sources = [c.source for path in NOTEBOOKS for c in nbformat.read(path, as_version=4).cells]
    found = {f"{m.group(1)}.{m.group(2)}" for source in sources for m in CHECK_CALL.finditer(source)}
    assert found == set(IDS)


def _answered_copy(path):
    """The notebook's setup cell and its exercise cells, each answered with the reference solution: the
    cell runs as shipped, with the answer's name rebound to the reference just before its check."""
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    cells = [code[0]]
    for cell in code:
        match = re.search(r'^exercises\.check\("(\d\d\.\d)", (\w+)\)', cell.source, re.M)
        if match:
            exercise, name = match.groups()
            cell = nbformat.v4.new_code_cell(cell.source.replace(
                match.group(0), f"from tests.exercise_solutions import CASES as _CASES\n{name} = _CASES[{exercise!r}][0]\n"
                                f"{match.group(0)}"))
            cells.append(cell)
    nb.cells = cells
    return nb


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_notebooks_own_exercise_cells_pass_with_the_reference_answers(path, monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("PYTHONPATH", str(path.parent.parent))         # the kernel imports tests.exercise_solutions
    nb = _answered_copy(path)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    printed = ["".join(o.get("text", "") for o in c.outputs if o.output_type == "stream") for c in nb.cells[1:]]
    expected = [f"PASS {m.group(1)}.{m.group(2)}" for c in nb.cells[1:] for m in CHECK_CALL.finditer(c.source)]
    assert len(printed) == len(expected) >= 2
    for shown, verdict in zip(printed, expected):
        assert shown.startswith(verdict), shown


def test_progress_counts_this_kernels_verdicts(capsys, monkeypatch):
    monkeypatch.setattr(exercises, "_LATEST", {})
    assert exercises.progress() == {}
    assert "no exercise checked yet" in capsys.readouterr().out
    exercises.check("05.1", CASES["05.1"][0])                      # passes
    exercises.check("04.1", CASES["04.1"][1])                      # fails
    exercises.check("04.2", _stub)                                 # blank
    capsys.readouterr()
    assert exercises.progress() == {"04": {"passed": 0, "failed": 1, "unanswered": 1},
                                    "05": {"passed": 1, "failed": 0, "unanswered": 2}}
    assert capsys.readouterr().out == ("notebook 04: 0 passed, 1 failed, 1 unanswered\n"
                                       "notebook 05: 1 passed, 0 failed, 2 unanswered\n")



@pytest.mark.parametrize("exercise", sorted(RULE_BREAKERS))
def test_a_stated_rule_is_checked_not_trusted(exercise):
    """These answers compute the right values but break the rule their task states (no copy, no tensor
    op, .grad untouched, in place, no DataLoader, no graph break, no GradScaler, one backward per
    micro-batch, nothing of the graph kept, half the saved bytes, your own atomic write)."""
    breaker, rule = RULE_BREAKERS[exercise]
    verdict = exercises.grade(exercise, breaker)
    assert not verdict.passed and rule in verdict.problem, str(verdict)


JUDGE_MODULES = sorted(name for name in {e.judge.__module__ for e in registry.EXERCISES.values()})


@pytest.mark.parametrize("module", JUDGE_MODULES)
def test_each_judge_module_names_the_exercises_it_judges(module):
    """The exercises are grouped by idea, not by notebook: a module's docstring is where a maintainer
    finds which ids it holds, so it must list exactly those."""
    import importlib

    doc = importlib.import_module(module).__doc__
    mine = {id for id, e in registry.EXERCISES.items() if e.judge.__module__ == module}
    assert set(re.findall(r"\b\d\d\.\d\b", doc)) == mine, module


def test_the_judges_live_in_the_subpackage_beside_the_registry():
    """Every module of the subpackage but the registry holds judges, and importing the package registers
    them all (a judge module the package forgot to import would register nothing)."""
    import pkgutil

    files = {f"nbhelpers.exercises.{m.name}" for m in pkgutil.iter_modules(exercises.__path__)}
    assert files - {"nbhelpers.exercises.registry"} == set(JUDGE_MODULES)


def test_reloading_a_judge_module_registers_its_judges_again():
    import importlib

    before = dict(registry.EXERCISES)
    try:
        importlib.reload(importlib.import_module("nbhelpers.exercises.modules"))
        assert registry.EXERCISES["03.1"].judge is not before["03.1"].judge
        assert set(registry.EXERCISES) == set(before)
    finally:
        registry.EXERCISES.clear()
        registry.EXERCISES.update(before)


def test_an_exercise_id_cannot_be_registered_twice():
    with pytest.raises(ValueError, match=r"exercise 03\.1 is registered twice .*: give the new one the next free id"):
        registry.exercise("03.1", "a copy", hint="")(lambda answer: None)
    assert registry.EXERCISES["03.1"].title == "count the parameters an optimizer will train"
