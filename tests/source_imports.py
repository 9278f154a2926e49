"""What a Python file imports, read from its syntax tree (nothing is executed): the one import scanner the
tests share."""
from __future__ import annotations

import ast
from pathlib import Path


def imported_modules(path: Path) -> set[str]:
    """Every module the file imports, dotted: `import torch.nn` -> "torch.nn", `from nbhelpers import memory` ->
    "nbhelpers.memory" (a name imported from a package counts as its submodule), `from . import x` -> ".x"."""
    return imported_in(Path(path).read_text())


def imported_in(source: str) -> set[str]:
    """`imported_modules` of Python source text (IPython's %magics and !commands left out)."""
    source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            found.add(base)
            found |= {f"{base}.{a.name}" if base and not base.endswith(".") else base + a.name for a in node.names}
    return found


def private_names_used(path: Path, package: str) -> set[str]:
    """`module._name` pairs the file takes from another module of `package`: imported as
    `from package.module import _name`, or read as `module._name` after `from package import module`."""
    tree = ast.parse(Path(path).read_text())
    own = Path(path).stem
    aliases, found = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == package:
            aliases |= {a.asname or a.name: a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package + "."):
            source = node.module.rsplit(".", 1)[1]
            found |= {f"{source}.{a.name}" for a in node.names if _private(a.name) and source != own}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and _private(node.attr)):
            found.add(f"{aliases[node.value.id]}.{node.attr}")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")
