"""The package's layout by audience, held over the AST of every module (function-level imports included):
each module imports only its own floor or the floors below it, nothing imports tools/ but tools/ itself
and the `python -m longctx` entry, and there are no import cycles."""

import ast
from pathlib import Path

import longctx

PKG = Path(longctx.__file__).parent
# floors, lowest first; a module not named here sits in its folder's floor
FLOORS = ["ground", "core", "data", "levers", "memory", "run", "tools"]
CORE = {"models", "train", "plots"}  # what a lesson imports beside the ground floor
MINIATURES = {"pretrain", "passkey"}  # the lessons' own small models and their probe: beside the levers, not in them
RUN = {"notebook"}  # a lesson's session: it checks the lesson's parameters with run/'s harness


def _name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _floor(module: str) -> int:
    parts = module.split(".")[1:]
    if module == "longctx.__main__":
        return FLOORS.index("tools")
    if not parts or len(parts) == 1:
        leaf = parts[0] if parts else ""
        floor = {
            **dict.fromkeys(CORE, "core"),
            "data": "data",
            **dict.fromkeys(MINIATURES, "levers"),
            **dict.fromkeys(RUN, "run"),
        }
        return FLOORS.index(floor.get(leaf, "ground"))
    return FLOORS.index(parts[0])


def _imports(path: Path, modules: set[str]) -> set[str]:
    me = _name(path)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in modules else base)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {m for m in found if m in modules and m != me}


def _graph() -> dict[str, set[str]]:
    files = {_name(p): p for p in PKG.rglob("*.py")}
    return {m: _imports(p, set(files)) for m, p in files.items()}


def test_every_import_goes_to_its_own_floor_or_below():
    wrong = [
        f"{a} ({FLOORS[_floor(a)]}) imports {b} ({FLOORS[_floor(b)]})"
        for a, deps in _graph().items()
        for b in deps
        if _floor(b) > _floor(a) and b != "longctx"
    ]
    assert wrong == []


def test_nothing_below_tools_imports_tools():
    tools = FLOORS.index("tools")
    assert [a for a, deps in _graph().items() if _floor(a) < tools and any(_floor(b) == tools for b in deps)] == []


def test_there_are_no_import_cycles():
    graph = _graph()
    cycles = []

    def visit(node, path):
        for nxt in graph[node]:
            if nxt in path:
                cycles.append(" → ".join(path[path.index(nxt) :] + [nxt]))
            elif nxt not in done:
                visit(nxt, path + [nxt])
        done.add(node)

    done: set[str] = set()
    for start in graph:
        if start not in done:
            visit(start, [start])
    assert cycles == []
