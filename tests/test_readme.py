"""The README's Python examples run as written and show what they claim."""

import pathlib
import re
import textwrap

import numpy as np

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks() -> list[str]:
    # Blocks inside list items are indented: dedented, they run as written.
    return [textwrap.dedent(block) for block in
            re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)]


def test_readme_quickstart_runs_and_resumes_exactly():
    blocks = _python_blocks()
    assert len(blocks) >= 2
    namespace: dict = {}
    exec(blocks[0], namespace)  # noqa: S102 - our own README
    batch, it, it2 = namespace["batch"], namespace["it"], namespace["it2"]
    assert batch.shape == (32,) and batch.dtype == np.float64
    for _ in range(3):
        assert np.array_equal(next(it), next(it2))
    exec(blocks[1], namespace)  # noqa: S102
    assert [int(x) for x in namespace["ds"]] == [3, 8]


def test_readme_example_parsing_gives_what_it_says():
    block = next(b for b in _python_blocks() if "parse_example" in b)
    namespace: dict = {}
    exec(block, namespace)  # noqa: S102
    parsed = namespace["parsed"]
    assert parsed["label"].tolist() == [7, 7]
    assert parsed["tokens"].dense_shape.tolist() == [2, 6]
    assert parsed["tokens"].values.tolist() == [3, 1, 4, 1, 5, 14] * 2
    assert parsed["tokens"].indices[-1].tolist() == [1, 5]


def test_readme_shows_the_state_version_the_code_writes():
    from jdata import _iterator

    shown = re.findall(r'"version": (\d+)', README.read_text())
    assert shown, "the README no longer shows a state's version: update this test"
    assert [int(v) for v in shown] == [_iterator._STATE_VERSION] * len(shown)
