"""Mechanical checks of the series' notebook conventions (HOUSE_STYLE.md). Each returns problems as text.

nbval compares only cells that were executed (a cell with execution_count None passes whatever it
prints), so `execution_problems` is what makes strict nbval mean something.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from tests import source_imports

NAME = re.compile(r"^(\d\d)_[a-z0-9_]+\.ipynb$")
EXPECTED = re.compile(r"^# Expected: (\w+)\b")       # first line of a raises-exception cell
SKIPPED = re.compile(r"^# Skipped: \S")               # first line of an nbval-skip cell
SHOWS_STDERR = re.compile(r"^# Shows stderr: \S", re.M)  # a leading comment line of a cell meant to warn
ANSI = "\x1b["
ANSI_CODES = re.compile(r"\x1b\[[0-9;]*m")                   # colours, as IPython writes tracebacks
MACHINE_PATH = re.compile(r"/tmp/|/var/folders/|ipykernel_\d|(?:/[\w.+-]+)+/site-packages/"
                          r"|(?:/[\w.+-]+)+/nbhelpers/\w+\.py")
STUCK_PROGRESS = re.compile(r"(?<!\d)0%\|")                # tqdm's text at the moment it was displayed
# The series runs on Python 3.10-3.13: an output naming the interpreter that made it fails on the others
# (a range such as "Python 3.10-3.13" names no interpreter)
INTERPRETER = re.compile(r"\b[Pp]ython ?3\.\d+(?:\.\d+)?(?!\.?\d|-3\.)|\bpython3\.\d+t?/")
# IPython writes the home directory as ~ in tracebacks; other tools print it whole
HOME = re.compile(r"(?<![\w.])~/|/home/[^/\s]+/|/root/|/Users/[^/\s]+/")
OPENING_LINES = ("import torch", "torch.manual_seed(0)", "device = devices.pick_device()",
                 "print(devices.banner(device))")


def _code(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def _tags(cell) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def execution_problems(nb) -> list[str]:
    """Every code cell executed, in order, from a fresh kernel (counts 1, 2, 3, ...)."""
    problems, expected = [], 1
    for i, cell in enumerate(_code(nb)):
        if "skip-execution" in _tags(cell):
            continue
        if cell.execution_count is None:
            problems.append(f"code cell {i} was never executed, so nbval would not compare it; "
                            "run `make execute`")
        elif cell.execution_count != expected:
            problems.append(f"code cell {i} has execution count {cell.execution_count}, expected "
                            f"{expected}: cells ran out of order; run `make execute`")
        expected += 1
    return problems


def opening_problems(nb, path: Path) -> list[str]:
    """File name, title cell and the house opening code cell."""
    problems = []
    m = NAME.match(path.name)
    if not m:
        problems.append(f"{path.name}: name it NN_topic.ipynb (two digits, lower-case topic)")
    first = nb.cells[0] if nb.cells else None
    if first is None or first.cell_type != "markdown":
        return problems + ["the first cell must be markdown: '# NN · Title' and the learning card"]
    if m and not first.source.startswith(f"# {m.group(1)} · "):
        problems.append(f"the first cell must start with '# {m.group(1)} · Title'")
    for part in ("**What you will learn**", "**Prerequisites:**", "**Runs on:**"):
        if part not in first.source:
            problems.append(f"the first cell lacks {part}")
    second = nb.cells[1] if len(nb.cells) > 1 else None
    lines = [text.split("#")[0].strip() for text in (second.source.splitlines() if second else [])]
    if second is None or second.cell_type != "code" or not all(text in lines for text in OPENING_LINES):
        problems.append(f"the second cell must be the house opening: {'; '.join(OPENING_LINES)}")
    return problems


def structure_problems(nb) -> list[str]:
    """Sections, the Summary, a kernel spec that exists everywhere, and tags that carry reasons."""
    problems = []
    headings = [text for c in nb.cells if c.cell_type == "markdown" for text in c.source.splitlines()
                if text.startswith("## ")]
    if not headings or "## Summary" not in headings:
        problems.append("the notebook needs '## ' sections and a '## Summary'")
    if nb.metadata.get("kernelspec", {}).get("name") != "python3":
        problems.append("kernelspec name must be 'python3'")
    for i, cell in enumerate(_code(nb)):
        problems += _tag_problems(i, cell)
    return problems


def _tag_problems(i: int, cell) -> list[str]:
    tags, first = _tags(cell), (cell.source.splitlines() or [""])[0]
    problems = []
    if "raises-exception" in tags:
        m = EXPECTED.match(first)
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        if not m:
            problems.append(f"code cell {i} is tagged raises-exception; start it with "
                            "'# Expected: ExceptionName, because ...'")
        elif [o.ename for o in errors] != [m.group(1)]:
            problems.append(f"code cell {i} expects {m.group(1)} but its stored output raised "
                            f"{[o.ename for o in errors] or 'nothing'}")
    if "nbval-skip" in tags and not (SKIPPED.match(first) and "skip-execution" in tags):
        problems.append(f"code cell {i} is tagged nbval-skip: add skip-execution too and start it "
                        "with '# Skipped: reason'")
    return problems


# A reference to another notebook, by number: "notebook 08", "notebooks 02 and 05", "taught in 05"; on a
# "**Prerequisites:**" line every two-digit number is one. Each must be a markdown link to the notebook
# ("[notebook 08](08_memory_diagnosis.ipynb)"), which JupyterLab follows and the site rewrites to its page.
MD_LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]*)\)")
NOTEBOOK_REF = re.compile(r"\b(?:notebooks?|taught in)\s+(\d\d(?:(?:,\s*|\s+and\s+|\s*[–-]\s*)\d\d)*)\b")
TWO_DIGITS = re.compile(r"(?<![\d.])\d\d(?![\d.])")


def unlinked_references(markdown: str, notebook_names: set[str]) -> list[str]:
    """Each reference to a notebook in `markdown` that is not a link, and each link to a notebook file that is
    not among `notebook_names` or whose text names another notebook's number."""
    problems = []
    for text, href in MD_LINK.findall(markdown):
        target = href.split("#")[0]                              # a heading's anchor: markdown_rules checks it
        if NAME.match(target) and (target not in notebook_names or
                                   any(n != target[:2] for n in TWO_DIGITS.findall(text))):
            problems.append(f"[{text}]({href}) links to no notebook of that number")
    for line in MD_LINK.sub("", markdown).splitlines():
        refs = [m.group(1) for m in NOTEBOOK_REF.finditer(line)]
        if line.startswith("**Prerequisites:**"):
            refs += TWO_DIGITS.findall(line)
        problems += [f"{ref!r} is not a link ({line.strip()[:80]})" for ref in dict.fromkeys(refs)]
    return problems


def reference_problems(nb, notebook_names: set[str]) -> list[str]:
    """unlinked_references of every markdown cell of `nb`."""
    return [f"markdown cell {i}: {p}" for i, cell in enumerate(nb.cells) if cell.cell_type == "markdown"
            for p in unlinked_references(cell.source, notebook_names)]


def nbhelpers_imports(nb) -> set[tuple[str, str]]:
    """(module, name) pairs a notebook uses from nbhelpers: `from nbhelpers import m` then m.name."""
    return source_imports.names_used_from(_code_tree(nb), "nbhelpers")


def _output_texts(out) -> dict[str, str]:
    """The texts of one stored output that a viewer shows, by field (traceback apart: it is ANSI)."""
    texts = {"text": out.get("text", ""), "evalue": out.get("evalue", "")}
    for mime, value in out.get("data", {}).items():
        if mime.startswith("text/") or mime == "image/svg+xml":
            texts[mime] = value if isinstance(value, str) else "".join(value)
    texts["traceback"] = "\n".join(out.get("traceback", []))
    return texts


def output_problems(nb) -> list[str]:
    """Stored outputs a reader can trust on any machine: no raw ANSI, no paths of this machine (home
    directory included), no interpreter version, no stray stderr.

    An error's traceback and evalue may carry ANSI codes (front-ends render the traceback, colours
    and torch's own bold in torch.load's message included) but not machine paths; a cell
    may show stderr only if a leading comment line says so: '# Shows stderr: why'.
    """
    problems = []
    for i, cell in enumerate(_code(nb)):
        problems += dict.fromkeys(_cell_output_problems(i, cell))    # once per cell and kind
    return problems


def _cell_output_problems(i: int, cell) -> list[str]:
    problems, stderr = [], []
    for out in cell.get("outputs", []):
        for field, text in _output_texts(out).items():
            if ANSI in text and field not in ("traceback", "evalue"):
                problems.append(f"code cell {i}: raw ANSI escape codes in its {field} output; "
                                "strip them (nbhelpers.stderr_capture) or print plain text")
            plain = ANSI_CODES.sub("", text)
            if m := MACHINE_PATH.search(plain) or HOME.search(plain):
                problems.append(f"code cell {i}: a path of this machine ({m.group(0)!r}) in its "
                                f"{field} output; add a rule to tests/nbval_sanitize.cfg, then `make execute`")
            if m := INTERPRETER.search(plain):
                problems.append(f"code cell {i}: the interpreter's version ({m.group(0)!r}) in its {field} "
                                "output, which differs on every other Python; print what it means instead "
                                "(\"supported\"), or add a rule with its reason to tests/nbval_sanitize.cfg")
            if STUCK_PROGRESS.search(plain):
                problems.append(f"code cell {i}: a progress bar stored at 0% ({field}); a static "
                                "viewer shows it for ever")
        if out.get("output_type") == "stream" and out.get("name") == "stderr":
            stderr += out["text"].splitlines()[:1]
    leading = "\n".join(text for text in cell.source.splitlines()[:3] if text.startswith("#"))
    if stderr and not SHOWS_STDERR.search(leading):
        problems.append(f"code cell {i} wrote to stderr ({stderr[0][:80]!r}); silence it in the cell, "
                        "or start the cell with '# Shows stderr: why' if showing it is the point")
    return problems


# Home-made instruments and the official tools each is checked against (README, "Instruments and the tools
# that check them"). A notebook that calls an instrument must assert, somewhere, a comparison (or an
# Agreement's `.agrees`) whose inputs come, through the notebook's own assignments, from a call of the
# instrument and from a call of the official tool. Comments, imports, bare references and asserts that
# compare nothing do not count.
AGREEMENTS = {
    "memory.track": {"memory.track", "memory_agreement.against_memtracker"},
    "memory.saved_bytes_by_module": {"memory.saved_bytes_by_module"},
    "compile_lens.capture": {"compile_lens.capture", "compile_lens.capture_calls"},
    "profiling.work": {"profiling.work", "profiling.regime"},
    "diagnose.run": {"diagnose.run"},
}
OFFICIAL = {
    "memory.track": {"memory_agreement.against_memtracker", "DebugMode"},  # MemTracker runs inside the former
    "memory.saved_bytes_by_module": {"autograd_graph.trace"},              # reads each grad_fn's _saved_* attributes
    "compile_lens.capture": {"torch._dynamo.explain"},
    "profiling.work": {"FlopCounterMode"},
    "diagnose.run": {"FlopCounterMode", "memory_agreement.against_memtracker", "torch._dynamo.explain"},
}


def _dotted(node) -> str:
    while isinstance(node, ast.Call):            # explain(fn)(args): the inner call names the tool
        node = node.func
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def _calls_and_names(node) -> tuple[set[str], set[str]]:
    """The calls in an expression, and the free names it reads (not a comprehension's or lambda's own)."""
    calls = {_dotted(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
    local = {m.id for n in ast.walk(node) if isinstance(n, ast.comprehension) for m in ast.walk(n.target)
             if isinstance(m, ast.Name)}
    local |= {a.arg for n in ast.walk(node) if isinstance(n, ast.Lambda) for a in n.args.args}
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - local
    return calls - {""}, names


def _code_tree(nb) -> ast.Module:
    return ast.parse("\n".join(source_imports.python_of(c.source) for c in _code(nb)))


def _bindings(tree) -> dict[str, set[ast.AST]]:
    """name -> the expressions it was bound from (assignments, for targets, with ... as)."""
    bound: dict[str, set] = {}

    def bind(target, value):
        for n in ast.walk(target):
            if isinstance(n, ast.Name):
                bound.setdefault(n.id, set()).add(value)

    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None:
            for target in getattr(node, "targets", [getattr(node, "target", None)]):
                bind(target, node.value)
        elif isinstance(node, ast.For):           # a comprehension's names stay inside it: not bound here
            bind(node.target, node.iter)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            bind(node.optional_vars, node.context_expr)
    return bound


def _sources(expr, bound) -> set[str]:
    """Every call an expression's value comes from, following the names it uses to where they were bound."""
    seen_names, calls, todo = set(), set(), [expr]
    while todo:
        node_calls, names = _calls_and_names(todo.pop())
        calls |= node_calls
        for name in names - seen_names:
            seen_names.add(name)
            todo.extend(bound.get(name, ()))
    return calls


def _matches(calls: set[str], patterns: set[str]) -> bool:
    return any(c == p or c.endswith("." + p) for c in calls for p in patterns)


def agreement_problems(nb) -> list[str]:
    """Instruments the notebook calls without an assert comparing them with their official tool."""
    tree = _code_tree(nb)
    used = {_dotted(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    bound = _bindings(tree)
    checks = [n.test for n in ast.walk(tree) if isinstance(n, ast.Assert)
              and any(isinstance(m, ast.Compare) or (isinstance(m, ast.Attribute) and m.attr == "agrees")
                      for m in ast.walk(n.test))]
    problems = []
    for instrument, calls in AGREEMENTS.items():
        if not _matches(used, calls):
            continue
        if not any(_matches(s := _sources(test, bound), calls) and _matches(s, OFFICIAL[instrument]) for test in checks):
            problems.append(f"{instrument} is used but no assert compares it with {sorted(OFFICIAL[instrument])}; "
                            "add one in this notebook (README: 'Instruments and the tools that check them')")
    return problems


def nbhelpers_calls(nb) -> set[tuple[str, str]]:
    """(module, name) pairs a notebook calls or constructs (`m.name(...)`), or hands to an nbhelpers call
    that runs it (`distributed.launch(ddp_workers.worker, 2)`). An annotation or a bare reference is not a use."""
    tree = _code_tree(nb)
    modules = source_imports.module_aliases(tree, "nbhelpers")

    def named(node):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            return modules[node.value.id], node.attr
        return None

    used = _calls_of_names_imported_from_modules(nb)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (callee := named(node.func)):
            used.add(callee)
            used |= {ref for arg in [*node.args, *(k.value for k in node.keywords)] if (ref := named(arg))}
    return used


def _calls_of_names_imported_from_modules(nb) -> set[tuple[str, str]]:
    """(module, name) for each call of, or call handed, a name a cell imports with `from nbhelpers.m import name`
    (07's %%writefile workers do), in that cell only, unless the cell binds the name again itself."""
    used = set()
    for cell in _code(nb):
        tree = ast.parse(source_imports.python_of(cell.source))
        imported = {a.asname or a.name: (n.module.split(".", 1)[1], a.name) for n in ast.walk(tree)
                    if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("nbhelpers.") for a in n.names}
        rebound = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        rebound |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        rebound |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
        names = {k: v for k, v in imported.items() if k not in rebound}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                used |= {names[n.id] for n in (node.func, *node.args, *(k.value for k in node.keywords))
                         if isinstance(n, ast.Name) and n.id in names}
    return used


def returned_types(fn, seen=None) -> set[type]:
    """The classes a function's return annotation names, and, recursively, the dataclass fields and the
    public methods' returns of those classes."""
    import dataclasses
    import typing

    seen = set() if seen is None else seen
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - an annotation that names an optional package
        return set()
    todo, found = [hints.get("return")], set()
    while todo:
        hint = todo.pop()
        todo.extend(typing.get_args(hint))
        origin = typing.get_origin(hint) or hint
        if isinstance(origin, type) and origin.__module__.startswith("nbhelpers") and origin not in seen:
            seen.add(origin)
            found.add(origin)
            if dataclasses.is_dataclass(origin):
                todo.extend(typing.get_type_hints(origin).values())
            for attr in vars(origin).values():
                target = attr.fget if isinstance(attr, property) else attr
                if callable(target) and not getattr(target, "__name__", "_").startswith("_"):
                    found |= returned_types(target, seen)
    return found


def nbhelpers_exceptions_shown(nb) -> set[tuple[str, str]]:
    """(module, name) of exception classes a notebook catches (`except m.Name`) or shows raised (a
    `# Expected: Name` cell whose stored error is that exception)."""
    tree = _code_tree(nb)
    caught = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.type is not None:
            for t in ast.walk(node.type):
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
                    caught.add((t.value.id, t.attr))
    shown = {m.group(1) for c in _code(nb) if (m := EXPECTED.match(c.source))
             for o in c.outputs if o.get("output_type") == "error" and o.get("ename") == m.group(1)}
    return caught | {(module, name) for module, name in nbhelpers_imports(nb) if name in shown}


def modules_run(nb) -> set[str]:
    """nbhelpers modules a notebook's code runs as programs (`-m nbhelpers.<module>` in a string)."""
    tree = _code_tree(nb)
    return {m.group(1) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            for m in [re.fullmatch(r"nbhelpers\.(\w+)", n.value)] if m}


def unused_public_names(notebooks) -> list[tuple[str, str]]:
    """Public functions and classes of the nbhelpers modules the notebooks import that no notebook calls,
    constructs, hands to a call, catches or shows raised, runs as a program (`main`), or gets back from
    a call (a returned type need not be named). Annotations and bare mentions count for nothing."""
    import importlib
    import inspect

    called = set().union(*(nbhelpers_calls(nb) for nb in notebooks))
    shown = set().union(*(nbhelpers_exceptions_shown(nb) for nb in notebooks))
    run = set().union(*(modules_run(nb) for nb in notebooks))
    returned = set()
    for module, name in called:
        obj = getattr(importlib.import_module(f"nbhelpers.{module}"), name, None)
        if inspect.isfunction(obj):
            returned |= returned_types(obj)
        elif inspect.isclass(obj):
            returned |= {t for method in vars(obj).values() if inspect.isfunction(method)
                         and not method.__name__.startswith("_") for t in returned_types(method)}
    unused = []
    for module in sorted({m for m, _ in called}):
        namespace = importlib.import_module(f"nbhelpers.{module}")
        for name in namespace.__all__:
            obj = getattr(namespace, name)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)) or (module, name) in called | shown:
                continue
            if (inspect.isclass(obj) and obj in returned) or (name == "main" and module in run):
                continue
            unused.append((module, name))
    return unused
