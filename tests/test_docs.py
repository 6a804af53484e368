"""The code blocks of ``docs/*.md`` run as written, and the guides keep their conventions.

A fenced block's info string says what it is:

- ``python``: jdata code, executed on its own (a fresh namespace, in a temporary directory);
  its ``assert``s are the claims the text makes;
- ``python tf.data``: TensorFlow code shown for comparison: parsed, never run (the test
  extras do not install TensorFlow);
- ``python needs <library>``: code that needs a library the test extras do not install
  (``docs/recipes.md``: Flax, Hugging Face datasets, PyTorch, TFDS): parsed, never run.

Any other ``python ...`` info string fails, so a typo cannot quietly skip a block. Blocks
that start a data service (a local Ray cluster, several seconds each) run in the slow tier.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re

import pytest


ROOT = pathlib.Path(__file__).resolve().parents[1]
# Every guide of the site (mkdocs.yml), so a new one's blocks run too.
DOCS = tuple(sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
# The guides the README links to.
GUIDES = ("docs/migration.md", "docs/design.md", "docs/service.md", "docs/recipes.md",
          "docs/slow.md")
_FENCE = re.compile(r"^```(\S*)[ \t]*([^\n]*)\n(.*?)^```[ \t]*$", re.S | re.M)
_TAGS = ("", "tf.data")
# The libraries a ``needs`` block may name (a typo must not pass as a library).
_NEEDS = ("flax", "datasets", "torch", "tensorflow_datasets")
_STARTS_RAY = re.compile(r"\bservice\.(start|connect)\(|\bray\.init\(")


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
STARTS_RAY = [b for b in RUNNABLE if _STARTS_RAY.search(b.code)]


def _id(block: Block) -> str:
    return f"{pathlib.Path(block.doc).name}:{block.line}"


def _param(block: Block):
    return pytest.param(block, id=_id(block),
                        marks=[pytest.mark.slow] if block in STARTS_RAY else [])


@pytest.mark.parametrize("block", [_param(b) for b in RUNNABLE])
def test_jdata_block_runs_as_written(block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # Padded so that a traceback's line numbers are the document's.
    code = compile("\n" * block.line + block.code, str(ROOT / block.doc), "exec")
    exec(code, {"__name__": "__docs__"})  # noqa: S102 - our own documentation


def test_blocks_were_found():
    tags = [b.tag for b in BLOCKS if b.doc == "docs/migration.md"]
    assert tags.count("") >= 30 and tags.count("tf.data") >= 30
    assert any(b.doc == "docs/design.md" for b in RUNNABLE)
    assert any(b.doc == "docs/recipes.md" for b in RUNNABLE)
    assert {b.tag.split(" ", 1)[1] for b in BLOCKS if b.tag.startswith("needs ")} == set(_NEEDS)
    # The service guide's examples start a local Ray each: all of them, and only they, are slow.
    service_blocks = [b for b in RUNNABLE if b.doc == "docs/service.md"]
    assert len(service_blocks) >= 6 and all(b in STARTS_RAY for b in service_blocks)
    assert all("service" in b.code for b in STARTS_RAY)


@pytest.mark.parametrize("block", BLOCKS, ids=_id)
def test_block_has_a_known_tag_and_parses(block):
    known = block.tag in _TAGS or (
        block.tag.startswith("needs ") and block.tag.split(" ", 1)[1] in _NEEDS)
    assert known, f"{_id(block)}: unknown info string 'python {block.tag}'"
    ast.parse(block.code)


def test_each_tf_data_block_is_followed_by_its_jdata_port():
    text = (ROOT / "docs/migration.md").read_text()
    blocks = [b for b in BLOCKS if b.doc == "docs/migration.md"]
    ported = 0
    for block, after in zip(blocks, blocks[1:] + [None]):
        if block.tag != "tf.data":
            continue
        assert after is not None and after.tag == "", _id(block)
        between = text[block.end:after.start]
        assert re.fullmatch(r"\s*\*\*jdata\*\*\s*", between), (
            f"{_id(block)}: the jdata block must follow at once, headed **jdata**, not "
            f"{between.strip()[:80]!r}")
        ported += 1
    assert ported >= 30


def test_no_guide_shows_an_api_as_planned():
    # Every jdata block runs: a guide shows what is built, and says in words what is not.
    texts = {doc: (ROOT / doc).read_text() for doc in DOCS}
    assert len(texts) >= 3
    for doc, text in texts.items():
        assert "(planned)" not in text and "```python planned" not in text, doc


def test_readme_points_into_the_repository_for_design_and_migration():
    readme = (ROOT / "README.md").read_text()
    assert "../shared" not in readme
    for doc in GUIDES:
        assert f"]({doc})" in readme and (ROOT / doc).is_file()
    differences = readme.split("## Where jdata differs from tf.data, on purpose")[1]
    assert "](docs/migration.md)" in differences.split("\n## ")[0]


@pytest.mark.slow  # a fresh process starts a local Ray
def test_the_service_guides_first_example_prints_no_jax_fork_warning(tmp_path):
    # Ray started its servers with a preexec_fn after the example had initialized JAX:
    # JAX's at-fork hook printed "os.fork() was called ... deadlock" (a RuntimeWarning).
    import os
    import subprocess
    import sys

    first = next(b for b in RUNNABLE if b.doc == "docs/service.md")
    assert "service.start(" in first.code
    (tmp_path / "example.py").write_text(first.code + '\nprint("example done")\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]))
    done = subprocess.run(
        [sys.executable, "-W", "error:os.fork() was called:RuntimeWarning", "example.py"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 0 and done.stdout.endswith("example done\n"), done.stderr[-3000:]
    assert "os.fork()" not in done.stderr, done.stderr[-3000:]
