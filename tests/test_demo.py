"""`make demo` trains, is preempted, resumes exactly and reports (small, on this process's
devices; `make demo` itself forces 8)."""
import pytest

from jdata.demos import train as demo

# The full tier (make test, CI); `pytest -m "not slow"` leaves it out of the edit loop.
pytestmark = pytest.mark.slow


def test_demo_trains_resumes_exactly_and_reports(capsys):
    result = demo.main(images=640, global_batch=32, epochs=2)
    out = capsys.readouterr().out
    assert result["exact"] and result["steps"] == 40
    assert "resumed run matches the uninterrupted one: True" in out
    assert "examples/s" in out and "waiting for input" in out and "ToGlobal(" in out
    assert "steps/s" in out and "input wait" in out  # the progress line
    assert result["loss"] < 2.3  # it learns: below chance's log(10) after 40 steps
    assert 0 <= result["wait_fraction"] < 1
