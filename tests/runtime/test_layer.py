"""The runtime is a layer of its own: it imports no module of the plan, the optimizer, the
ops or the API (issue 29), so it can be read and tested alone. What it needs of a plan
comes in as arguments (a node's ``fn`` and ``op_name``, an engine's name, a decision key)."""

from __future__ import annotations

import ast
import pathlib

import jdata

PACKAGE = pathlib.Path(jdata.__file__).parent
# The foundation under every layer: trees of arrays, errors, options, optional imports.
FOUNDATION = {"jdata._constants", "jdata._errors", "jdata._extras", "jdata._options",
              "jdata._tree"}


def _imports(path: pathlib.Path) -> set[str]:
    """The jdata modules ``path`` imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("jdata"):
            found |= ({f"jdata.{a.name}" for a in node.names} if node.module == "jdata"
                      else {node.module})
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("jdata")}
    return found


def test_the_runtime_imports_only_itself_and_the_foundation():
    outside = {f"runtime/{path.name}": sorted(m for m in _imports(path)
                                              if not m.startswith("jdata.runtime")
                                              and m not in FOUNDATION)
               for path in sorted((PACKAGE / "runtime").glob("*.py"))}
    assert {name: mods for name, mods in outside.items() if mods} == {}


def test_the_foundation_imports_no_layer_at_import_time():
    for module in sorted(FOUNDATION):
        path = PACKAGE / f"{module.removeprefix('jdata.')}.py"
        top_level = {n.module for n in ast.parse(path.read_text()).body
                     if isinstance(n, ast.ImportFrom) and n.module}
        assert {m for m in top_level if m.startswith("jdata")} <= FOUNDATION, module
