"""The package map in nbhelpers/__init__.py is the truth the code follows: every module is on it with its layer
and the notebooks that import it, no module imports from a layer it may not use, and no module reaches into
another's private names."""
import re
from pathlib import Path

import nbformat
import pytest

import nbhelpers
from tests.module_map import read_map, modules_in
from tests.source_imports import imported_in, imported_modules, private_names_used

PACKAGE = Path(nbhelpers.__file__).parent
LAYERS = ("foundation", "record", "instrument", "view", "diagnosis", "lesson", "exercises", "tooling")
MAP = read_map(nbhelpers.__doc__)
MODULES = modules_in(PACKAGE)


def _check_the_map(modules: dict) -> None:
    assert set(MAP) == set(modules), {"missing from the map": sorted(set(modules) - set(MAP)),
                                      "on the map, not in the package": sorted(set(MAP) - set(modules))}
    assert {layer for layer, _ in MAP.values()} <= set(LAYERS)


def test_every_module_is_on_the_map_and_every_row_is_a_module():
    _check_the_map(MODULES)


def test_a_module_added_without_a_row_fails(tmp_path):
    """Proven on a copy of the package with one more module: the test above fails, naming it."""
    import shutil

    copy = shutil.copytree(PACKAGE, tmp_path / "nbhelpers", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "newcomer.py").write_text('"""A module nobody mapped."""\n')
    with pytest.raises(AssertionError, match="'missing from the map': \\['newcomer'\\]"):
        _check_the_map(modules_in(copy))


def layer_violations(module: str, paths) -> list[str]:
    """The imports of `module`'s files against the order of the layers: each one it may not make, said."""
    allowed, found = LAYERS[:LAYERS.index(MAP[module][0]) + 1], []          # its own layer and those before it
    for path in paths:
        for name in sorted(imported_modules(path)):
            parts = name.split(".")
            if name.startswith("."):
                found.append(f"{path.name} imports {name}: name the module (from nbhelpers...)")
            elif parts[0] == "nbhelpers" and len(parts) > 1 and parts[1] in MAP and parts[1] != module \
                    and MAP[parts[1]][0] not in allowed:
                found.append(f"{path.name} ({MAP[module][0]}) imports {parts[1]} ({MAP[parts[1]][0]})")
    return found


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_only_from_the_layers_it_may_use(module):
    assert layer_violations(module, MODULES[module]) == []


def test_an_instrument_importing_a_lesson_fails(tmp_path):
    copy = tmp_path / "memory.py"
    copy.write_text((PACKAGE / "memory.py").read_text() + "\nfrom nbhelpers import models\n")
    assert layer_violations("memory", [copy]) == ["memory.py (instrument) imports models (lesson)"]


def test_the_map_names_the_notebooks_that_import_each_module():
    used: dict[str, set[str]] = {}
    for path in sorted((PACKAGE.parent / "notebooks").glob("*.ipynb")):
        code = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
        for name in imported_in(code):
            if name.startswith("nbhelpers."):
                used.setdefault(name.split(".")[1], set()).add(path.name[:2])
    assert {m: nbs for m, (_, nbs) in MAP.items() if nbs} == used


def test_no_module_imports_another_modules_private_names():
    taken = {f"{path.relative_to(PACKAGE)}: {name}" for files in MODULES.values() for path in files
             for name in private_names_used(path, "nbhelpers")}
    assert not taken


def test_the_private_name_scanner_sees_every_way_of_importing(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text("from nbhelpers import memory\nfrom nbhelpers.graph_view import _pack\n"
                      "import nbhelpers.module_scope as scope\nimport nbhelpers.devices\n"
                      "memory._dense(1)\nscope._Span\nnbhelpers.devices._parse('cpu')\nmemory.track\n")
    assert private_names_used(source, "nbhelpers") == {"memory._dense", "graph_view._pack", "module_scope._Span",
                                                       "devices._parse"}


def test_every_view_is_one_widget_class():
    import torch

    from nbhelpers import autograd_graph, graph_view

    data = graph_view.from_autograd(autograd_graph.trace((torch.rand(2, requires_grad=True) * 3).sum()))
    first, second = graph_view.show(data), graph_view.show(data, selected=0)
    # anywidget adds its traits per instance (traitlets' add_traits makes a subclass each time): ours is its base
    assert type(first) is not type(second) and type(first).__mro__[1] is type(second).__mro__[1]


_JS_TEXT = re.compile(r"`(?:\\.|[^`\\])*`|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'|//[^\n]*|/\*.*?\*/", re.S)
_JS_HEAD = re.compile(r"^\s*(?:export\s+)?(?:async\s+)?(?:function\s+\w+|(?!(?:if|for|while|switch|catch)\b)\w+)"
                      r"\s*\([^)]*\)\s*\{\s*$")


def js_long_functions(text: str, limit: int = 40) -> list[str]:
    """Functions and class methods of a JS file (declared one per line, `name(args) {`) over `limit` lines: strings,
    template literals and comments blanked out, then braces counted from the header to its match."""
    lines = _JS_TEXT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text).splitlines()
    found = []
    for start, line in enumerate(lines):
        if not _JS_HEAD.match(line):
            continue
        depth, end = 0, start
        for end in range(start, len(lines)):
            depth += lines[end].count("{") - lines[end].count("}")
            if depth == 0:
                break
        if end - start + 1 > limit:
            found.append(f"{start + 1}: {line.strip()} ({end - start + 1} lines)")
    return found


def test_the_js_length_check_finds_a_long_function():
    body = "\n".join(f"  const a{k} = `{{${k}}}`;  // {{" for k in range(41))
    assert js_long_functions(f"function long(x) {{\n{body}\n}}\nfunction short() {{\n}}\n") == [
        "1: function long(x) { (43 lines)"]
    assert js_long_functions("class A {\n  method(a, b) {\n    return 1;\n  }\n}\n") == []


def test_no_js_function_is_longer_than_40_lines():
    long = {path.name: found for path in sorted(PACKAGE.glob("*.js")) if (found := js_long_functions(path.read_text()))}
    assert not long


def test_no_function_is_longer_than_40_lines():
    """House style: short functions, each doing one thing (a docstring counts: it is part of reading one)."""
    import ast

    long = [f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for files in MODULES.values() for path in files for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 40]
    assert not long
