"""What a Python file imports, read from its syntax tree (nothing is executed): the one import scanner the
tests share."""
from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path


def imported_modules(path: Path) -> set[str]:
    """Every module the file imports, dotted: `import torch.nn` -> "torch.nn", `from nbhelpers import memory` ->
    "nbhelpers.memory" (a name imported from a package counts as its submodule), `from . import x` -> ".x"."""
    return imported_in(Path(path).read_text())


def python_of(source: str) -> str:
    """A cell's source without IPython's %magics and !commands, so that it parses as Python."""
    return "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))


def imported_in(source: str) -> set[str]:
    """`imported_modules` of Python source text (IPython's %magics and !commands left out)."""
    found = set()
    for node in ast.walk(ast.parse(python_of(source))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            found.add(base)
            found |= {f"{base}.{a.name}" if base and not base.endswith(".") else base + a.name for a in node.names}
    return found


def module_aliases(tree: ast.AST, package: str) -> dict[str, str]:
    """name -> the module of `package` it stands for, below the package: `from package import m` -> "m",
    `from package.sub import m` where m is a module of the subpackage -> "sub.m" (`from nbhelpers.diagnosis import
    diagnose`), `import package.m as x` -> "m"."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == package:
            aliases |= {a.asname or a.name: a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package + "."):
            below = node.module.split(".", 1)[1]
            aliases |= {a.asname or a.name: f"{below}.{a.name}" for a in node.names
                        if _is_module(package, below, a.name)}
        elif isinstance(node, ast.Import):
            aliases |= {a.asname: a.name.split(".", 1)[1] for a in node.names
                        if a.asname and a.name.startswith(package + ".")}
    return aliases


@functools.lru_cache(maxsize=None)
def _is_module(package: str, below: str, name: str) -> bool:
    """Whether `name` in `package.below` is a module (its file is there), not a name defined in one; found from the
    files, nothing imported."""
    spec = importlib.util.find_spec(package)
    folder = Path(spec.origin).parent.joinpath(*below.split("."))
    return (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file()


def names_used_from(tree: ast.AST, package: str) -> set[tuple[str, str]]:
    """(module, name) for each name the code takes from a module of `package`, however it is imported:
    `from package.m import name`; `m.name` after `from package import m`, `from package.sub import m` or
    `import package.m as m`; and `package.m.name` after `import package.m`. `module` is the path below the package
    (`_tools.notebook_tools`, `diagnosis.diagnose`)."""
    aliases, found = module_aliases(tree, package), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package + "."):
            below = node.module.split(".", 1)[1]
            found |= {(below, a.name) for a in node.names if not _is_module(package, below, a.name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            found.add((aliases[node.value.id], node.attr))
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
              and isinstance(node.value.value, ast.Name) and node.value.value.id == package):
            found.add((node.value.attr, node.attr))
    return found


def private_names_used(path: Path, package: str) -> set[str]:
    """`module._name` pairs the file takes from another module of `package` (`names_used_from`)."""
    own = Path(path).stem
    return {f"{module}.{name}" for module, name in names_used_from(ast.parse(Path(path).read_text()), package)
            if _private(name) and module.rsplit(".", 1)[-1] != own}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")
