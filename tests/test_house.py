"""The house's shape: no import cycles among fedad's modules, no source file over 600 lines,
no function over 80 lines, no statements packed past the formatter, no word of how the
product was made. Static reads of the repository (nothing is imported)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
# Functions allowed past MAX_FUNCTION_LINES, each with the reason (the Flower
# process-management code may exceed when the reason is stated).
LONG_FUNCTIONS: dict[str, str] = {}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The fedad modules ``name`` imports anywhere (functions too), TYPE_CHECKING blocks aside."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for stmt in node.orelse:
                visit(stmt)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    resolved = set()
    for mod in found:
        while mod and mod not in modules:
            mod = mod.rpartition(".")[0]
        if mod and mod != name:
            resolved.add(mod)
    return resolved


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            strong(v)
    return out


def test_no_import_cycles() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    # a package's __init__ importing its own submodules is how a package hands names on;
    # a submodule importing its package's __init__ back is the cycle to avoid.
    assert _cycles(graph) == []


def _squashed(graph: dict[str, set[str]], depth: int) -> dict[str, set[str]]:
    """``graph`` with every module replaced by its package ``depth`` names deep
    (``fedad.fl.flower.app`` -> ``fedad.fl`` at depth 2); a package and what it contains
    are one node (an ``__init__`` importing its own modules is no edge between packages)."""

    def squash(m: str) -> str:
        return ".".join(m.split(".")[:depth])

    out: dict[str, set[str]] = {}
    for a, targets in graph.items():
        sa = squash(a)
        out.setdefault(sa, set())
        for b in targets:
            sb = squash(b)
            if sa != sb and not sb.startswith(sa + ".") and not sa.startswith(sb + "."):
                out[sa].add(sb)
                out.setdefault(sb, set())
    return out


def test_no_import_cycle_between_packages() -> None:
    """At every depth, packages import each other without a cycle (``fedad.fl`` and
    ``fedad.methods`` never both ways, nor ``fedad.fl.flower`` and ``fedad.fl.engine``); the
    layers themselves are import-linter's contract in pyproject.toml."""
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    deepest = max(name.count(".") for name in modules) + 1
    for depth in range(2, deepest + 1):
        assert _cycles(_squashed(graph, depth)) == [], f"packages {depth} names deep"


def test_squashing_finds_a_cycle_between_packages() -> None:
    graph = {"fedad.a.x": {"fedad.b.y"}, "fedad.b.y": set(), "fedad.b.z": {"fedad.a.w"}}
    graph["fedad.a.w"] = set()
    assert _cycles(graph) == []  # no cycle between the modules
    assert _cycles(_squashed(graph, 2)) == [["fedad.a", "fedad.b"]]


def test_no_source_file_over_600_lines() -> None:
    long = {
        str(p.relative_to(SRC)): n
        for p in SRC.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES
    }
    assert long == {}


def test_no_function_over_80_lines() -> None:
    long = {}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                key = f"{path.relative_to(SRC)}:{node.name}"
                if n > MAX_FUNCTION_LINES and key not in LONG_FUNCTIONS:
                    long[key] = n
    assert long == {}


def test_no_statement_is_packed_past_the_formatter() -> None:
    """``# fmt: skip`` packs statements onto lines to stay under the size limits: split the
    module instead."""
    packed = [
        f"{p.relative_to(SRC)}:{i}"
        for p in sorted(SRC.rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if "fmt: skip" in line
    ]
    assert packed == []


PROCESS_WORDS = re.compile(
    r"\bissues? ?#?\d+\b"
    r"|\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|earlier|"
    r"previous|last|this|next) (?:work )?session'?s?\b"
    r"|\b(?:previous|last) stop\b",
    re.IGNORECASE,
)


def test_the_product_speaks_of_itself_not_of_how_it_was_made() -> None:
    """No issue numbers or work-order wording (\"the third session's defaults\") in what a
    user reads: name the thing instead."""
    root = SRC.parent
    files = [
        *SRC.rglob("*.py"),
        *(root / "docs").rglob("*.md"),
        root / "README.md",
        root / "BENCHMARKS.md",
        *(root / "configs").rglob("*.toml"),
        *(root / "examples").rglob("*.*"),
        *(root / "benchmarks").glob("*.py"),
        *(root / "benchmarks" / "suites").glob("*.toml"),
    ]
    found = [
        f"{p.relative_to(root)}:{i}: {m.group(0)}"
        for p in sorted(files)
        if p.is_file() and p.suffix in {".py", ".md", ".toml", ".csv", ".txt"}
        for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        for m in [PROCESS_WORDS.search(line)]
        if m
    ]
    assert found == []
