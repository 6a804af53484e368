"""The Colab notebooks run top to bottom (executed here with nbclient on a CPU kernel)."""

import os
import warnings

import nbformat
import pytest
from nbclient import NotebookClient

# The full tier (make test, CI); `pytest -m "not slow"` leaves it out of the edit loop.
pytestmark = pytest.mark.slow

COLAB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "colab")


@pytest.mark.parametrize("name", ["quickstart.ipynb", "multihost.ipynb"])
def test_notebook_runs_top_to_bottom(name, tmp_path):
    notebook = nbformat.read(os.path.join(COLAB, name), as_version=4)
    root = os.path.dirname(COLAB)
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = root + (os.pathsep + env_path if env_path else "")
    try:
        NotebookClient(notebook, timeout=240, kernel_name="python3",
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        if env_path:
            os.environ["PYTHONPATH"] = env_path
        else:
            del os.environ["PYTHONPATH"]
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    assert ("resumed exactly" in text) if name == "quickstart.ipynb" else ("loss after" in text)
    if name == "quickstart.ipynb":  # the statistics show as HTML tables, the plot draws
        shown = [o.get("data", {}) for o in outputs]
        assert any("<table>" in d.get("text/html", "") for d in shown)
        assert any("image/png" in d for d in shown)


@pytest.mark.parametrize("name", ["quickstart.ipynb", "multihost.ipynb"])
def test_notebook_installs_jdata_under_colab_and_nowhere_else(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a cell without an id: nbformat's future hard error
        notebook = nbformat.read(os.path.join(COLAB, name), as_version=4)
        nbformat.validate(notebook)
    first_code = next(c for c in notebook.cells if c.cell_type == "code").source
    # The distribution's name (``jdata`` on the index is another project), only in Colab.
    assert "install --quiet 'jdata-jax[io,plot]'" in first_code
    assert "if 'google.colab' in sys.modules:" in first_code
