"""The notebook harness itself: its rules catch what they claim to, and the series follows them."""
import ast
import copy
import importlib
import re

import nbformat
import pytest

from tests import notebook_rules, suite_copy
from tests import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
ENV_NB = REPO / "notebooks" / "00_environment.ipynb"


def _read(path=ENV_NB):
    return nbformat.read(path, as_version=4)


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def _run_suite_on(nb, tmp_name: str):
    return suite_copy.run_suite_on(nb, tmp_name, ENV_NB.name)


def test_the_series_has_notebooks():
    assert ENV_NB in NOTEBOOKS


def test_notebook_numbers_are_unique():
    numbers = [p.name[:2] for p in NOTEBOOKS]
    assert len(numbers) == len(set(numbers)), numbers


def test_an_unexecuted_code_cell_makes_the_suite_fail():
    nb = _read()
    cell = _code_cells(nb)[2]
    cell.execution_count, cell.outputs = None, []
    run = _run_suite_on(nb, "unexecuted")
    assert run.returncode == 1, run.stdout[-3000:]
    assert "code cell 2 was never executed" in run.stdout
    assert "1 failed" in run.stdout                      # only the rule item; nbval let the cell pass


def test_a_changed_stored_output_makes_the_suite_fail():
    nb = _read()
    cell = next(c for c in _code_cells(nb) if "skipped: needs CUDA" in str(c.outputs))
    cell.outputs[0]["text"] = "skipped: needs a GPU\n"
    run = _run_suite_on(nb, "changed-output")
    assert run.returncode == 1 and "Cell outputs differ" in run.stdout, run.stdout[-3000:]


def test_out_of_order_execution_is_caught():
    nb = _read()
    cells = _code_cells(nb)
    cells[1].execution_count, cells[2].execution_count = cells[2].execution_count, cells[1].execution_count
    assert any("ran out of order" in p for p in notebook_rules.execution_problems(nb))


def test_a_raises_exception_cell_must_name_its_exception():
    nb = _read()
    cell = next(c for c in _code_cells(nb) if "raises-exception" in c.metadata.get("tags", []))
    assert notebook_rules.structure_problems(nb) == []
    wrong = copy.deepcopy(nb)
    target = next(c for c in _code_cells(wrong) if "raises-exception" in c.metadata.get("tags", []))
    target.source = target.source.replace("# Expected: DataIntegrityError", "# Expected: ValueError")
    assert any("expects ValueError" in p for p in notebook_rules.structure_problems(wrong))
    target.source = "\n".join(cell.source.splitlines()[1:])
    assert any("start it with '# Expected" in p for p in notebook_rules.structure_problems(wrong))


def test_nbval_skip_needs_skip_execution_and_a_reason():
    nb = _read()
    cell = _code_cells(nb)[3]
    cell.metadata["tags"] = ["nbval-skip"]
    assert any("nbval-skip" in p for p in notebook_rules.structure_problems(nb))


def test_a_missing_opening_is_caught():
    nb = _read()
    nb.cells[1].source = "import torch"
    nb.cells[0].source = nb.cells[0].source.replace("**Runs on:**", "Runs on")
    problems = notebook_rules.opening_problems(nb, ENV_NB)
    assert any("house opening" in p for p in problems) and any("**Runs on:**" in p for p in problems)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebook_is_stored_as_jupyterlab_saves_it(path):
    """nbformat.write's text and its one final newline, as Jupyter's server writes it on every save: a notebook
    a learner opens and saves stays byte for byte what git has (tests/test_lab.py saves one in JupyterLab)."""
    import nbformat

    from jupyter_client.kernelspec import KernelSpecManager

    text = path.read_text()
    assert text == nbformat.writes(nbformat.reads(text, as_version=nbformat.NO_CONVERT)) + "\n"
    # a save writes the running kernel's spec into the metadata: another display name is a change git sees
    spec = KernelSpecManager().get_kernel_spec("python3")
    assert nbformat.reads(text, as_version=4).metadata.kernelspec == {
        "name": "python3", "display_name": spec.display_name, "language": spec.language}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_use_only_public_nbhelpers_names(path):
    for module, name in notebook_rules.nbhelpers_imports(_read(path)):
        assert name in importlib.import_module(f"nbhelpers.{module}").__all__, f"{module}.{name}"


def test_every_public_function_and_class_is_really_used_by_some_notebook():
    assert notebook_rules.unused_public_names([_read(p) for p in NOTEBOOKS]) == []


def test_an_annotation_does_not_count_as_a_use():
    notebooks = [_read(p) for p in NOTEBOOKS]
    profiling_nb = next(nb for nb, p in zip(notebooks, NOTEBOOKS) if p.name.startswith("09_"))
    for cell in profiling_nb.cells:               # trace_summary's calls, replaced by decoration
        cell.source = re.sub(r"profiling\.trace_summary\([^)]*\)\)?", "()", cell.source)
    profiling_nb.cells[-1].source += "\nsummary: profiling.OpTime\nprofiling.trace_summary\n"
    assert ("profiling", "trace_summary") in notebook_rules.unused_public_names(notebooks)


def _with_output(nb, cell_index: int, output: dict):
    copy_ = copy.deepcopy(nb)
    _code_cells(copy_)[cell_index].outputs.append(nbformat.from_dict(output))
    return copy_


def test_raw_ansi_in_a_stored_output_is_caught():
    nb = _with_output(_read(), 2, {"output_type": "stream", "name": "stdout", "text": "\x1b[31mred\x1b[0m\n"})
    assert any("raw ANSI escape codes in its text" in p for p in notebook_rules.output_problems(nb))


def test_a_stray_stderr_line_is_caught_and_a_marked_one_is_not():
    warning = {"output_type": "stream", "name": "stderr", "text": "UserWarning: something\n"}
    nb = _with_output(_read(), 2, warning)
    assert any("wrote to stderr ('UserWarning: something')" in p for p in notebook_rules.output_problems(nb))
    _code_cells(nb)[2].source = "# Shows stderr: the warning is the lesson\n" + _code_cells(nb)[2].source
    assert notebook_rules.output_problems(nb) == notebook_rules.output_problems(_read())


@pytest.mark.parametrize("path", ["/tmp/tmpab12cd/run/damaged.pt", "/tmp/ipykernel_3321/4183935979.py",
                                  "/opt/venv/lib/python3.11/site-packages/torch/_tensor.py",
                                  "/home/me/digits.pt", "/root/.cache/torch/x.pt", "/Users/me/digits.pt"])
def test_a_machine_path_in_a_stored_output_is_caught(path):
    error = {"output_type": "error", "ename": "OSError", "evalue": f"cannot open {path}", "traceback": []}
    nb = _with_output(_read(), 2, error)
    assert any("a path of this machine" in p for p in notebook_rules.output_problems(nb))


def _error_through(line: str) -> dict:
    return {"output_type": "error", "ename": "RuntimeError", "evalue": "worker exited",
            "traceback": ["\x1b[31mRuntimeError\x1b[39m  Traceback (most recent call last)", line]}


def test_a_home_directory_in_a_traceback_is_caught_even_where_nbval_does_not_compare():
    nb = _with_output(_read(), 2, _error_through("File \x1b[32m~/proj/workers.py:12\x1b[39m, in run"))
    assert any("a path of this machine ('~/')" in p and "traceback output" in p
               for p in notebook_rules.output_problems(nb))


@pytest.mark.parametrize("text", ["TorchDynamo yes Python 3.11.7 is supported\n", "torch 2.14.1 | Python 3.12 | cpu\n",
                                  "<stdlib>/x.py but also /usr/lib/python3.10/selectors.py\n"])
def test_an_interpreter_version_in_a_stored_output_is_caught(text):
    nb = _with_output(_read(), 2, {"output_type": "stream", "name": "stdout", "text": text})
    assert any("the interpreter's version" in p for p in notebook_rules.output_problems(nb))
    range_only = _with_output(_read(), 2, {"output_type": "stream", "name": "stdout", "text": "Python 3.10-3.13\n"})
    assert notebook_rules.output_problems(range_only) == notebook_rules.output_problems(_read())


def test_the_clean_outputs_rule_fails_the_suite_on_a_temporary_copy():
    """Three copies' worth of faults in one run: a stray stderr line, the interpreter's version in a
    compared output, a home directory in a traceback (which nbval itself never compares)."""
    nb = _with_output(_read(), 2, {"output_type": "stream", "name": "stderr", "text": "stray\n"})
    nb = _with_output(nb, 3, {"output_type": "stream", "name": "stdout", "text": "Python 3.11.7 is supported\n"})
    raising = next(i for i, c in enumerate(_code_cells(nb)) if "raises-exception" in c.metadata.get("tags", []))
    _code_cells(nb)[raising].outputs[-1]["traceback"].append("File ~/.pyenv/versions/3.11.7/lib/python3.11/q.py:1")
    run = _run_suite_on(nb, "unclean-outputs")
    assert run.returncode == 1, run.stdout[-3000:]
    assert "code cell 2 wrote to stderr ('stray')" in run.stdout
    assert "code cell 3: the interpreter's version ('Python 3.11.7')" in run.stdout
    assert f"code cell {raising}: a path of this machine ('~/') in its traceback output" in run.stdout


def test_execute_stores_sanitized_outputs():
    from nbhelpers._tools.notebook_tools import apply_rules, sanitize_outputs, sanitize_rules
    from nbval.plugin import get_sanitize_patterns

    cfg = (REPO / "tests" / "nbval_sanitize.cfg").read_text()
    assert [(p.pattern, r) for p, r in sanitize_rules()] == get_sanitize_patterns(cfg)  # what nbval reads
    nb = _with_output(_read(), 2, {"output_type": "error", "ename": "OSError", "traceback": [
        "File \x1b[0;32m/home/me/.venv/lib/python3.11/site-packages/torch/_tensor.py:623",
        "File \x1b[32m~/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/queues.py:113",
        "File \x1b[32m~/proj/.venv/lib/python3.12/site-packages/torch/utils/data/dataloader.py:1293"],
        "evalue": "torch 2.14.1+cu130 cannot open /tmp/tmpab12cd/x.pt: worker (pid 24028) exited\n"
                  "  File x.py, line 3, in f\n    y = g(x)\n        ^^^^\n"})
    sanitize_outputs(nb)
    out = _code_cells(nb)[2].outputs[-1]
    # the build suffix and Python's position markers are kept for the reader (compared without them)
    assert out.evalue == ("torch 2.14.1+cu130 cannot open <TMPDIR>/x.pt: worker (pid PID) exited\n"
                          "  File x.py, line 3, in f\n    y = g(x)\n        ^^^^\n")
    assert out.traceback == ["File \x1b[0;32m<site-packages>/torch/_tensor.py:623",
                             "File \x1b[32m<stdlib>/multiprocessing/queues.py:113",
                             "File \x1b[32m<site-packages>/torch/utils/data/dataloader.py:1293"]
    assert apply_rules(out.evalue, sanitize_rules()) == ("torch 2.14.1 cannot open <TMPDIR>/x.pt: worker (pid PID) "
                                                         "exited\n  File x.py, line 3, in f\n    y = g(x)\n")


RUNS_ON = re.compile(r"\*\*Runs on:\*\* CPU, about (\d+) s on 2 cores")
README_ROW = re.compile(r"^\| `(\d\d_[a-z0-9_]+)` \| ~(\d+) s\b", re.M)


def test_runs_on_times_agree_between_notebooks_and_readme():
    readme = dict((name, int(s)) for name, s in README_ROW.findall((REPO / "README.md").read_text()))
    headers = {}
    for path in NOTEBOOKS:
        m = RUNS_ON.search(_read(path).cells[0].source)
        assert m, f"{path.name}: its card needs '**Runs on:** CPU, about N s on 2 cores'"
        headers[path.stem] = int(m.group(1))
    assert readme == headers       # one number per notebook, the same in both places


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_instrument_a_notebook_uses_is_checked_there_against_its_official_tool(path):
    assert notebook_rules.agreement_problems(_read(path)) == []


def _without_lines(nb, *needles):
    trimmed = copy.deepcopy(nb)
    for cell in trimmed.cells:
        cell.source = "\n".join(line for line in cell.source.splitlines() if not any(n in line for n in needles))
    return trimmed


def test_the_agreement_rule_fails_without_the_assert_and_is_not_fooled_by_decoration():
    profiling_nb = _read(REPO / "notebooks" / "09_profiling.ipynb")
    bare = _without_lines(profiling_nb, "assert profiling.work(cnn_forward_backward).flops == step_flops")
    assert any(p.startswith("profiling.work is used") for p in notebook_rules.agreement_problems(bare))
    decorated = copy.deepcopy(bare)
    decorated.cells[-1].source += ("\n# profiling.work agrees with FlopCounterMode\n"
                                   "from torch.utils.flop_counter import FlopCounterMode\n"
                                   "assert FlopCounterMode is not None\n"                 # compares nothing it computed
                                   "assert profiling.work(lambda: None).flops == FlopCounterMode.__name__.count('x')\n")
    assert any(p.startswith("profiling.work is used") for p in notebook_rules.agreement_problems(decorated))
    unchecked = _read(REPO / "notebooks" / "08_memory_diagnosis.ipynb")       # without its MemTracker cell
    unchecked.cells = [c for c in unchecked.cells if "memory_agreement.against_memtracker(" not in c.source]
    assert any(p.startswith("memory.track is used") for p in notebook_rules.agreement_problems(unchecked))


def test_the_readme_table_lists_every_checked_instrument_and_where_it_is_used():
    readme = (REPO / "README.md").read_text()
    table = readme.split("## Instruments and the tools that check them", 1)[1].split("\n\n")[2]
    rows = {line.split("|")[1].strip().strip("`"): line.split("|")[-2].strip()
            for line in table.splitlines()[2:]}
    assert set(rows) == set(notebook_rules.AGREEMENTS)
    for instrument, where in rows.items():
        using = {p.name[:2] for p in NOTEBOOKS if notebook_rules._matches(
            {notebook_rules._dotted(n.func) for n in ast.walk(notebook_rules._code_tree(_read(p)))
             if isinstance(n, ast.Call)}, notebook_rules.AGREEMENTS[instrument])}
        assert where.split(", ") == sorted(using), instrument


def test_kernels_ignore_only_the_interpreter_notices():
    """conftest hands the kernels PYTHONWARNINGS filters for notices about the interpreter (Python 3.13.0's
    note on Dynamo's guards); any other warning still reaches a cell's stderr and fails the comparison."""
    import os
    import subprocess
    import sys

    from nbhelpers._tools import notebook_tools

    assert set(notebook_tools.INTERPRETER_NOTICES) <= set(os.environ["PYTHONWARNINGS"].split(","))
    code = ("import warnings\n"
            "warnings.warn('Guards may run slower on Python 3.13.0. Consider upgrading to Python 3.13.1+.', "
            "RuntimeWarning)\nwarnings.warn('Guards may run slower on Python 3.14', RuntimeWarning)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "3.13.0" not in done.stderr and "Guards may run slower on Python 3.14" in done.stderr


NOTEBOOK_NAMES = {p.name for p in NOTEBOOKS}


@pytest.mark.parametrize("path", [*NOTEBOOKS, REPO / "notebooks" / "README.md"], ids=lambda p: p.name)
def test_every_reference_to_another_notebook_is_a_link(path):
    if path.suffix == ".md":                                       # the myth index: its rows name notebooks
        problems = notebook_rules.unlinked_references(path.read_text(), NOTEBOOK_NAMES)
    else:
        problems = notebook_rules.reference_problems(_read(path), NOTEBOOK_NAMES)
    assert problems == []


@pytest.mark.parametrize("text", ["as notebook 08 showed", "taught in 05", "notebooks 02 and 05",
                                  "**Prerequisites:** 01 · Tensor lifecycle, [02](02_autograd_graph.ipynb).",
                                  "[notebook 08](09_profiling.ipynb)", "[notebook 08](08_no_such.ipynb)"])
def test_an_unlinked_or_wrong_reference_is_caught(text):
    nb = _read()
    nb.cells.append(nbformat.v4.new_markdown_cell(f"Some text.\n{text}, and more."))
    assert len(notebook_rules.reference_problems(nb, NOTEBOOK_NAMES)) == 1


def test_a_linked_reference_passes():
    text = ("**Prerequisites:** [01 · Tensor lifecycle](01_tensor_lifecycle.ipynb), [02](02_autograd_graph.ipynb).\n"
            "as [notebook 08](08_memory_diagnosis.ipynb) showed, with 32 images and 10.5 s")
    assert notebook_rules.unlinked_references(text, NOTEBOOK_NAMES) == []
