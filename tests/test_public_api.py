"""The public surface: each public module's ``__all__``, what ``from jdata import *`` binds,
and one module (``jdata.errors``) for every public exception class."""

import ast
import importlib
import pathlib
import types

import pytest

import jdata

_PUBLIC_MODULES = ["jdata", "jdata.errors", "jdata.io", "jdata.io.example", "jdata.hosts",
                   "jdata.service", "jdata.ops", "jdata.ops.image", "jdata.checkpoint",
                   "jdata.runtime"]
# Public as jdata.range, jdata.zip, jdata.random, but not star-imported: they would shadow
# the builtins range and zip, and the standard module random.
_NOT_STARRED = {"range", "zip", "random"}
# Submodules that are public names of jdata (the others are reached by their full name).
_PUBLIC_SUBMODULES = {"errors", "hosts"}
# Exception classes that never reach a user: caught inside jdata, or only a cause's stand-in
# chained under a jdata error (RemoteError and RemoteTraceback carry a worker's exception).
_INTERNAL_ERRORS = {"Corrupt", "RemoteError", "RemoteTraceback", "ServerGone"}


@pytest.mark.parametrize("name", _PUBLIC_MODULES)
def test_every_public_module_lists_names_it_has(name):
    module = importlib.import_module(name)
    assert isinstance(module.__all__, list)
    assert len(set(module.__all__)) == len(module.__all__), "a name is listed twice"
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not have: {missing}"


def test_star_import_binds_the_public_names_and_leaves_the_builtins():
    namespace: dict = {}
    code = "from jdata import *\nrows = list(range(3))\npairs = list(zip('ab', 'cd'))"
    exec(code, namespace)  # noqa: S102 - what a user's star import does
    assert namespace["rows"] == [0, 1, 2] and namespace["pairs"] == [("a", "c"), ("b", "d")]
    assert not _NOT_STARRED & set(namespace)
    assert namespace["Dataset"] is jdata.Dataset and namespace["WorkerError"] is jdata.WorkerError
    for name in _NOT_STARRED:  # still public, by their full name
        assert getattr(jdata, name) is getattr(jdata._sources, name)


def test_jdata_all_lists_every_public_name():
    public = {name for name, value in vars(jdata).items()
              if not name.startswith("_") and (not isinstance(value, types.ModuleType)
                                               or name in _PUBLIC_SUBMODULES)}
    assert public - _NOT_STARRED == set(jdata.__all__)


def test_every_public_error_is_defined_in_one_module_and_exported():
    import jdata.errors

    for name in jdata.errors.__all__:
        error = getattr(jdata.errors, name)
        assert issubclass(error, Exception) and error.__module__ == "jdata._errors", name
        assert getattr(jdata, name) is error, name
    for name in ("WorkerError", "SharedMemoryError", "UnpicklableJobError", "JournalError"):
        assert name in jdata.errors.__all__ and name in jdata.__all__


def _exception_classes(path: pathlib.Path) -> list[str]:
    """Module-level classes of ``path`` whose bases are named as exceptions are."""
    tree = ast.parse(path.read_text())
    return [node.name for node in tree.body if isinstance(node, ast.ClassDef) and any(
        (ast.unparse(base).split(".")[-1]).endswith(("Error", "Exception"))
        for base in node.bases)]


def test_no_public_exception_class_is_defined_outside_jdata_errors():
    import jdata.errors

    package = pathlib.Path(jdata.__file__).parent
    found = {}
    for path in package.rglob("*.py"):
        for name in _exception_classes(path):
            if not name.startswith("_") and path.name != "_errors.py":
                found[name] = path.relative_to(package).as_posix()
    assert set(found) == _INTERNAL_ERRORS, found  # a new one belongs in jdata/_errors.py
    assert set(_exception_classes(package / "_errors.py")) == set(jdata.errors.__all__)
