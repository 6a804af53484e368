"""The documentation site (``mkdocs.yml``) builds with no warning, API reference included."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Every public module the API reference documents, by its page.
API_PAGES = {"jdata": "jdata.Dataset", "io": "jdata.io", "hosts": "jdata.hosts",
             "image": "jdata.ops.image", "service": "jdata.service",
             "checkpoint": "jdata.checkpoint", "errors": "jdata.errors", "keras": "jdata.keras"}


def _nav_files(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    items = nav.values() if isinstance(nav, dict) else nav
    return [f for item in items for f in _nav_files(item)]


def test_the_site_lists_every_guide_and_api_page():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages = _nav_files(config["nav"])
    guides = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert sorted(p for p in pages if "/" not in p) == guides
    assert sorted(p for p in pages if p.startswith("api/")) == sorted(
        f"api/{name}.md" for name in API_PAGES)
    for name, target in API_PAGES.items():
        assert f"::: {target}\n" in (ROOT / f"docs/api/{name}.md").read_text()


@pytest.mark.slow
def test_the_site_builds_strictly_with_the_api_reference(tmp_path):
    site = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert build.returncode == 0, build.stdout + build.stderr
    dataset_page = (site / "api/jdata/index.html").read_text()
    for name in ("Dataset.shuffle", "Dataset.batch", "Dataset.distribute", "Dataset.autocache",
                 "DatasetIterator.get_state", "Options", "from_tensor_slices"):
        assert f'id="jdata.{name}"' in dataset_page, name
    assert "Shuffles elements with randomness from" in dataset_page  # the docstring itself
    # Doctests render as code, not as nested quotes whose outputs read as links.
    assert "&gt;&gt;&gt; import jdata" in dataset_page and "<blockquote>" not in dataset_page
    assert 'id="jdata.service.start"' in (site / "api/service/index.html").read_text()
    # Tagged blocks are code on the site, not paragraphs whose comments read as headings.
    for guide in ("migration", "recipes"):
        page = (site / guide / "index.html").read_text()
        fences = (ROOT / f"docs/{guide}.md").read_text().count("\n```python")
        assert "<p>```" not in page and page.count('class="language-python"') == fences, guide
    assert '<h2 id="random-access-datasets-of-other-libraries"' in (
        site / "recipes/index.html").read_text()


def _doctest_fences():
    spec = importlib.util.spec_from_file_location("doctest_fences",
                                                  ROOT / "docs/_ext/doctest_fences.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.fence_doctests


def test_doctests_are_fenced_for_the_site_and_code_blocks_are_left_alone():
    docstring = ("Text.\n\n>>> [1, 2]\n[1, 2]\n\nMore:\n  >>> x = 1\n\n"
                 "```python\n>>> shown as is\n```\n>>> last\n'end'")
    assert _doctest_fences()(docstring) == (
        "Text.\n\n```pycon\n>>> [1, 2]\n[1, 2]\n```\n\nMore:\n  ```pycon\n  >>> x = 1\n  ```\n\n"
        "```python\n>>> shown as is\n```\n```pycon\n>>> last\n'end'\n```")


def test_tagged_blocks_reach_the_site_as_python_code():
    spec = importlib.util.spec_from_file_location("tagged_fences",
                                                  ROOT / "docs/_ext/tagged_fences.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = "a\n```python tf.data\nx = 1\n```\n```python needs torch\ny = 2\n```\n```python\nz\n```"
    assert module.untag(text) == ("a\n```python\nx = 1\n```\n*Needs `torch` (not run by the "
                                  "tests).*\n\n```python\ny = 2\n```\n```python\nz\n```")
