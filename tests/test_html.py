"""Notebook displays: a dataset's plan and an iterator's status, escaped."""

import html

import jdata
from jdata import _html


def test_block_escapes_the_title_the_rows_and_the_text():
    out = _html.block("<t>", [("a&b", "<v>")], "x < y & 'z'")
    assert out.startswith("<div><strong>&lt;t&gt;</strong><table>")
    assert "<th style=\"text-align:left\">a&amp;b</th>" in out
    assert "<td style=\"text-align:left\">&lt;v&gt;</td>" in out
    assert "<pre>x &lt; y &amp; &#x27;z&#x27;</pre>" in out
    assert "<table>" not in _html.block("t", [], "x")


def test_a_dataset_shows_its_explained_plan_escaped():
    ds = jdata.range(6).map(lambda x: x + 1).batch(2)
    out = ds._repr_html_()
    assert "<lambda>" in ds.explain()
    assert f"<pre>{html.escape(ds.explain())}</pre>" in out
    assert "&lt;lambda&gt;" in out and "<lambda>" not in out


def test_a_dataset_whose_plan_cannot_be_explained_still_displays(monkeypatch):
    def broken(self):
        raise ValueError("no <plan>")
    monkeypatch.setattr(jdata.Dataset, "explain", broken)
    out = jdata.range(2)._repr_html_()
    assert out == ("<div><strong>jdata.Dataset</strong><pre>&lt;jdata.Dataset "
                   "Range(start=0, stop=2, step=1)&gt;\n(ValueError: no &lt;plan&gt;)</pre></div>")


def test_an_iterator_shows_open_or_closed_its_epoch_engine_and_plan():
    ds = jdata.range(4).map(lambda x: x * 2, num_parallel_calls=2)
    ds.iterator().close()  # the dataset's next iterator runs epoch 1
    it = ds.iterator()
    next(it)
    out = it._repr_html_()
    assert "<th style=\"text-align:left\">state</th><td style=\"text-align:left\">open</td>" \
        in out
    assert "<th style=\"text-align:left\">epoch</th><td style=\"text-align:left\">1</td>" in out
    assert "Options(engine=&#x27;auto&#x27;)" in out
    assert ("&lt;lambda&gt;, num_parallel_calls=2)  [4]  op: map(&lt;lambda&gt;)  engine: threads"
            in out)
    assert "Range(start=0, stop=4, step=1)  [4]" in out
    assert "&lt;lambda&gt;" in out and "<lambda>" not in out
    assert repr(it) == f"<jdata.DatasetIterator open, epoch 1, plan {it._node}>"
    it.close()
    assert ">closed</td>" in it._repr_html_()
    assert repr(it).startswith("<jdata.DatasetIterator closed, epoch 1, ")
