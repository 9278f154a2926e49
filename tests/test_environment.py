"""The pinned environment: pyproject.toml and environment.yml agree, and the venv matches them.

A package may carry two exact pins, each for its own Pythons (`numpy==2.2.6; python_version < '3.11'`):
for every interpreter the series supports, exactly one of them applies."""
import os
import re
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version

from packaging.requirements import Requirement
from tests import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:                                      # pytest itself depends on tomli before Python 3.11
    import tomli as tomllib

SUPPORTED = ("3.10", "3.11", "3.12", "3.13")


def _requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return [Requirement(spec) for spec in project["dependencies"] + extras["test"] + extras["models"]]


def _optional() -> set[str]:
    """The models extra: `make setup` installs it; a venv without it (`pip install -e .`) skips its tests."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return {Requirement(spec).name for spec in extras["models"]}


def _installed(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _pins_for(python: str) -> dict[str, str]:
    """name -> pinned version for one Python version ("3.11")."""
    pins = {}
    for req in _requirements():
        if req.marker is None or req.marker.evaluate({"python_version": python}):
            assert req.name not in pins, f"{req.name} has two pins for Python {python}"
            pins[req.name] = str(req.specifier).removeprefix("==")
    return pins


def _environment_yml_pins() -> dict[str, str]:
    text = (REPO / "environment.yml").read_text()
    return dict(re.findall(r"^\s+- ([A-Za-z0-9_.\-]+)==(\S+)\s*$", text, re.M))


def _environment_yml_python() -> str:
    return re.search(r"^\s+- python=(\d+\.\d+)\s*$", (REPO / "environment.yml").read_text(), re.M)[1]


def test_every_dependency_is_pinned_exactly_and_only_python_version_selects_a_pin():
    for req in _requirements():
        assert re.fullmatch(r"==[\w.]+", str(req.specifier)), str(req)
        assert req.marker is None or re.fullmatch(r'python_version [<>]=? "3\.\d+"', str(req.marker)), str(req)


def test_each_supported_python_gets_one_pin_per_package():
    names = {req.name for req in _requirements()}
    for python in SUPPORTED:
        assert set(_pins_for(python)) == names, python


def test_requires_python_is_the_supported_range():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == f">={SUPPORTED[0]}, <3.{int(SUPPORTED[-1].split('.')[1]) + 1}"


def test_pyproject_and_environment_yml_agree():
    assert _environment_yml_python() in SUPPORTED
    assert _pins_for(_environment_yml_python()) == _environment_yml_pins()


def test_torch_pins_are_the_series_pins_on_every_python():
    for python in SUPPORTED:
        pins = _pins_for(python)
        assert (pins["torch"], pins["torchvision"]) == ("2.14.1", "0.29.1")


def test_installed_versions_are_the_pinned_ones():
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    installed = {name: _installed(name) for name in _pins_for(running)}
    mismatched = {name: (pin, installed[name]) for name, pin in _pins_for(running).items()
                  if not (installed[name] is None and name in _optional())
                  and (installed[name] or "").split("+")[0] != pin}
    assert not mismatched, f"installed differs from the pins (pin, installed): {mismatched}; run `make setup`"


FAKE_PYTHON = """#!/bin/bash
# A stand-in interpreter: "-m venv DIR" makes DIR/bin/python (this script); pip says what it was asked.
if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; exit 0; fi
if [ "$1" = "--version" ]; then echo "Python 3.99.0"; exit 0; fi
echo "pip was asked: $*"
[ -z "$FAIL_PIP" ]
"""


def _fake_setup(tmp_path, **env):
    python = tmp_path / "fakepython"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    venv = tmp_path / "venv"
    done = subprocess.run(["make", "-s", "setup", f"PYTHON={python}", f"VENV={venv}", *env.pop("args", [])],
                          cwd=REPO, capture_output=True, text=True, timeout=60, env=dict(os.environ, **env))
    return done, venv


def test_make_setup_says_each_phase_with_its_time_and_lets_pip_show_the_download(tmp_path):
    done, venv = _fake_setup(tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    phases = [line for line in lines if re.match(r"\[setup +\d+s\] ", line)]
    assert [p.split("] ")[1][:4] for p in phases] == ["1/3 ", "2/3 ", "3/3 ", f"{venv} "[:4]]
    assert "creating" in phases[0] and "Python 3.99.0" in phases[0]
    assert "torch==2.14.1" in phases[1] and "about 3 GB" in phases[1]       # what the big download is
    assert lines[lines.index(phases[1]) + 1] == "pip was asked: -m pip install torch==2.14.1 torchvision==0.29.1"
    assert "-q" not in done.stdout.split()                                   # pip's progress is shown
    assert (venv / ".installed-stamp").exists()


def test_make_setup_names_the_cpu_index_and_stops_when_pip_fails(tmp_path):
    index = "https://download.pytorch.org/whl/cpu"
    done, venv = _fake_setup(tmp_path, FAIL_PIP="1", args=[f"TORCH_INDEX_URL={index}"])
    assert done.returncode != 0 and f"from {index}" in done.stdout
    assert "3/3" not in done.stdout and not (venv / ".installed-stamp").exists()


def test_the_inductor_cache_is_one_per_torch_pin_and_the_others_are_removed(tmp_path):
    """make test/check/execute point TORCHINDUCTOR_CACHE_DIR at build/inductor-cache/torch-<pin>."""
    old = tmp_path / "torch-2.1.2" / "fxgraph"
    old.mkdir(parents=True)
    done = subprocess.run(["make", "-s", "inductor-cache", f"INDUCTOR_CACHE={tmp_path}"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in tmp_path.iterdir()] == [f"torch-{_pins_for('3.11')['torch']}"]
    venv = tmp_path.parent / f"{tmp_path.name}-venv"    # make test with a pytest that says where the cache is
    (venv / "bin").mkdir(parents=True)
    for tool, body in (("ruff", "true"), ("python", 'echo "$TORCHINDUCTOR_CACHE_DIR" > "$(dirname "$0")/said"')):
        (venv / "bin" / tool).write_text(f"#!/bin/bash\n{body}\n")
        (venv / "bin" / tool).chmod(0o755)
    (venv / ".installed-stamp").touch()
    done = subprocess.run(["make", "-s", "test", f"VENV={venv}", f"INDUCTOR_CACHE={tmp_path}"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (venv / "bin" / "said").read_text().strip() == str(tmp_path / f"torch-{_pins_for('3.11')['torch']}")
