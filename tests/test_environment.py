"""The pinned environment: pyproject.toml and environment.yml agree, and the venv matches them."""
import re
import tomllib
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _pyproject_pins() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] + project["optional-dependencies"]["test"]
    return dict(spec.split("==") for spec in specs)


def _environment_yml_pins() -> dict[str, str]:
    text = (REPO / "environment.yml").read_text()
    return dict(re.findall(r"^\s+- ([A-Za-z0-9_.\-]+)==(\S+)\s*$", text, re.M))


def test_every_dependency_is_pinned_exactly():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for spec in project["dependencies"] + project["optional-dependencies"]["test"]:
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+==[\w.]+", spec), spec


def test_pyproject_and_environment_yml_agree():
    assert _pyproject_pins() == _environment_yml_pins()


def test_torch_pins_are_the_series_pins():
    pins = _pyproject_pins()
    assert (pins["torch"], pins["torchvision"]) == ("2.14.1", "0.29.1")


def test_environment_yml_python_satisfies_requires_python():
    python = re.search(r"^\s+- python=(\d+)\.(\d+)", (REPO / "environment.yml").read_text(), re.M)
    assert (int(python[1]), int(python[2])) >= (3, 10)


def test_installed_versions_are_the_pinned_ones():
    mismatched = {name: (pin, version(name)) for name, pin in _pyproject_pins().items()
                  if version(name).split("+")[0] != pin}
    assert not mismatched, f"installed differs from the pins (pin, installed): {mismatched}; run `make setup`"
