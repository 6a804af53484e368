"""The code blocks of ``docs/*.md`` run as written, and the guides keep their conventions.

A fenced block's info string says what it is:

- ``python``: jdata code, executed on its own (a fresh namespace, in a temporary directory);
  its ``assert``s are the claims the text makes;
- ``python tf.data``: TensorFlow code shown for comparison: parsed, never run (the test
  extras do not install TensorFlow);
- ``python planned``: jdata code for an API that is not built yet: parsed, never run, and
  checked to be still missing, so the guide must change when the API lands.

Any other ``python ...`` info string fails, so a typo cannot quietly skip a block.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re

import pytest


ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ("docs/migration.md", "docs/design.md", "docs/service.md", "docs/slow.md")
# The guides README.md links to (docs/slow.md is linked from docs/design.md until then).
LINKED_FROM_README = ("docs/migration.md", "docs/design.md", "docs/service.md")
_FENCE = re.compile(r"^```(\S*)[ \t]*([^\n]*)\n(.*?)^```[ \t]*$", re.S | re.M)
_TAGS = ("", "tf.data", "planned")
# What "planned" blocks may use, and how to tell that it is still missing.
_PLANNED = {
    "sharing=True": lambda: "sharing" not in _built_distribute_arguments(),
}


def _built_distribute_arguments() -> set:
    """The arguments of ``distribute`` that do something (the rest raise NotImplementedError)."""
    import jdata.service  # noqa: F401 - importing needs no Ray

    try:
        jdata.range(1).distribute(jdata.service.Service(None, None, False), sharing=True)
    except NotImplementedError:
        return set()
    except Exception:  # a later check (the fake service) failed: the argument is built
        return {"sharing"}
    return {"sharing"}


@dataclasses.dataclass(frozen=True)
class Block:
    doc: str
    line: int  # of the opening fence
    tag: str
    code: str
    start: int  # offsets of the fence in the document
    end: int


def _blocks(doc: str) -> list[Block]:
    text = (ROOT / doc).read_text()
    return [Block(doc, text.count("\n", 0, m.start()) + 1, m.group(2).strip(), m.group(3),
                  m.start(), m.end())
            for m in _FENCE.finditer(text) if m.group(1) == "python"]


BLOCKS = [block for doc in DOCS for block in _blocks(doc)]
RUNNABLE = [b for b in BLOCKS if b.tag == ""]


def _id(block: Block) -> str:
    return f"{pathlib.Path(block.doc).name}:{block.line}"


@pytest.mark.parametrize("block", RUNNABLE, ids=_id)
def test_jdata_block_runs_as_written(block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # Padded so that a traceback's line numbers are the document's.
    code = compile("\n" * block.line + block.code, str(ROOT / block.doc), "exec")
    exec(code, {"__name__": "__docs__"})  # noqa: S102 - our own documentation


def test_blocks_were_found():
    tags = [b.tag for b in BLOCKS if b.doc == "docs/migration.md"]
    assert tags.count("") >= 30 and tags.count("tf.data") >= 30
    assert any(b.doc == "docs/design.md" for b in RUNNABLE)


@pytest.mark.parametrize("block", BLOCKS, ids=_id)
def test_block_has_a_known_tag_and_parses(block):
    assert block.tag in _TAGS, f"{_id(block)}: unknown info string 'python {block.tag}'"
    ast.parse(block.code)


def test_each_tf_data_block_is_followed_by_its_jdata_port():
    text = (ROOT / "docs/migration.md").read_text()
    blocks = [b for b in BLOCKS if b.doc == "docs/migration.md"]
    for block, after in zip(blocks, blocks[1:] + [None]):
        if block.tag != "tf.data":
            continue
        assert after is not None and after.tag in ("", "planned"), _id(block)
        between = text[block.end:after.start]
        assert re.fullmatch(r"\s*\*\*jdata( \(planned\))?\*\*\s*", between), (
            f"{_id(block)}: the jdata block must follow at once, headed **jdata**, not "
            f"{between.strip()[:80]!r}")


def test_planned_blocks_show_only_what_is_still_missing():
    planned = [b for b in BLOCKS if b.tag == "planned"]
    for block in planned:
        used = [name for name in _PLANNED if name in block.code]
        assert used, f"{_id(block)} is marked planned but uses none of {sorted(_PLANNED)}"
        for name in used:
            assert _PLANNED[name](), (
                f"{name} exists now: make {_id(block)} a runnable ``python`` block")


def test_readme_points_into_the_repository_for_design_and_migration():
    readme = (ROOT / "README.md").read_text()
    assert "../shared" not in readme
    for doc in LINKED_FROM_README:
        assert f"]({doc})" in readme and (ROOT / doc).is_file()
    design = (ROOT / "docs/design.md").read_text()
    assert all(f"]({doc.removeprefix('docs/')})" in design or f"]({doc})" in readme
               for doc in DOCS if doc not in LINKED_FROM_README)
    differences = readme.split("## Where jdata differs from tf.data, on purpose")[1]
    assert "](docs/migration.md)" in differences.split("\n## ")[0]
