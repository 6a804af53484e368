"""Every optional import fails the same way: the feature, the missing module, the extra."""

import importlib
import pickle
import sys
import types

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import jdata
from jdata import _extras
from jdata.io import records
from jdata.ops import image
from jdata.runtime import stats
from jdata.service import _blocks, _ray


def _block(monkeypatch, top: str) -> None:
    """Makes ``top`` and its loaded submodules unimportable (``import`` raises ImportError)."""
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, top, None)


def _check(info, feature: str, module: str, extra: str) -> None:
    error = info.value
    assert isinstance(error, ImportError) and isinstance(error, _extras.MissingExtraError)
    assert str(error).startswith(f"{feature} needs ")
    assert f"module {module!r}" in str(error)
    assert str(error).endswith(f"pip install 'jdata-jax[{extra}]'")
    assert error.name == module and error.extra == extra


def test_require_returns_the_module_and_reraises_modules_of_no_extra(monkeypatch):
    assert _extras.require("numpy", "x") is np
    monkeypatch.setitem(sys.modules, "not_an_extra_module", None)
    with pytest.raises(ImportError) as info:
        _extras.require("not_an_extra_module", "x")
    assert not isinstance(info.value, _extras.MissingExtraError)


def test_require_takes_a_loaded_module_from_sys_modules_without_the_import_machinery(
        monkeypatch):
    # Kernels ask on every call: the import system's locks and lookups held the GIL for
    # a tenth of a color_jitter call.
    def refuse(name, package=None):
        raise AssertionError(f"import_module({name!r}) for a module already loaded")

    monkeypatch.setattr(_extras.importlib, "import_module", refuse)
    assert _extras.require("numpy", "x") is np


def test_require_leaves_a_module_still_initializing_to_the_import_system(monkeypatch):
    # Another thread's import in progress: import_module waits for it to finish.
    half = types.ModuleType("half_imported")
    half.__spec__ = importlib.machinery.ModuleSpec("half_imported", None)
    half.__spec__._initializing = True
    monkeypatch.setitem(sys.modules, "half_imported", half)
    asked = []
    monkeypatch.setattr(_extras.importlib, "import_module",
                        lambda name, package=None: asked.append(name) or half)
    assert _extras.require("half_imported", "x") is half
    assert asked == ["half_imported"]


def test_the_error_pickles_with_its_fields():
    error = _extras.MissingExtraError("from_parquet", "pyarrow", "io", "pyarrow")
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.name, copy.extra, copy.feature) == (
        str(error), "pyarrow", "io", "from_parquet")


def test_from_parquet_without_pyarrow(monkeypatch, tmp_path):
    path = str(tmp_path / "a.parquet")
    pq.write_table(pa.table({"x": [1, 2]}), path)
    _block(monkeypatch, "pyarrow")
    with pytest.raises(ImportError) as info:
        jdata.io.from_parquet(path)
    _check(info, "from_parquet", "pyarrow.types", "io")


@pytest.mark.parametrize("op", ["cache", "snapshot", "save"])
def test_writers_without_array_record_name_themselves(monkeypatch, tmp_path, op):
    _block(monkeypatch, "array_record")
    ds = jdata.range(3)
    with pytest.raises(ImportError) as info:  # cache and snapshot: where they are built
        getattr(ds, op)(str(tmp_path / "out"))
    _check(info, op, "array_record.python.array_record_module", "io")


def test_from_array_record_without_array_record(monkeypatch, tmp_path):
    path = tmp_path / "a.array_record"
    path.write_bytes(b"")
    _block(monkeypatch, "array_record")
    with pytest.raises(ImportError) as info:
        jdata.io.from_array_record(str(path))
    _check(info, "from_array_record", "array_record.python.array_record_module", "io")


def test_tfrecord_without_crc32c_fails_when_built(monkeypatch, tmp_path):
    path = str(tmp_path / "a.tfrecord")
    records.write_tfrecord(path, [b"x"])
    _block(monkeypatch, "google_crc32c")
    for build in (lambda: jdata.io.from_tfrecord(path),
                  lambda: records.write_tfrecord(path + "2", [b"x"])):
        with pytest.raises(ImportError) as info:
            build()
        _check(info, "TFRecord files (their checksums)", "google_crc32c", "io")


def test_url_paths_without_fsspec(monkeypatch):
    _block(monkeypatch, "fsspec")
    with pytest.raises(ImportError) as info:
        jdata.io.from_tfrecord("memory://bucket/a.tfrecord")
    _check(info, "jdata: paths with a URL scheme", "fsspec", "io")


def test_parse_example_without_protobuf(monkeypatch):
    _block(monkeypatch, "google")
    monkeypatch.delitem(sys.modules, "jdata.io._example_parse", raising=False)
    monkeypatch.delitem(sys.modules, "jdata.io._example_proto", raising=False)
    with pytest.raises(ImportError) as info:
        jdata.io.parse_example([b""], {"x": jdata.io.VarLenFeature(np.int64)})
    _check(info, "parse_example", "google.protobuf.message", "io")


@pytest.mark.parametrize("build, blocked, feature, module", [
    (image.decode_jpeg, "PIL", "jdata.ops.image.decode_jpeg", "PIL.Image"),
    (lambda: image.resize(size=(2, 2), antialias=True), "PIL",
     "jdata.ops.image.resize(antialias=True)", "PIL.Image"),
    (lambda: image.resize(size=(2, 2)), "cv2", "jdata.ops.image.resize(antialias=False)",
     "cv2"),
])
def test_image_ops_fail_when_built(monkeypatch, build, blocked, feature, module):
    _block(monkeypatch, blocked)
    with pytest.raises(ImportError) as info:
        build()
    _check(info, feature, module, "image")


def test_service_without_ray_or_codecs(monkeypatch):
    for name, module in (("lz4", "lz4.frame"), ("zstd", "zstandard")):
        _block(monkeypatch, module.partition(".")[0])
        with pytest.raises(ImportError) as info:
            _blocks._codec(name)
        _check(info, f"jdata.service compression={name!r}", module, "service")
    _block(monkeypatch, "ray")
    with pytest.raises(ImportError) as info:
        _ray.ray_module()
    _check(info, "jdata.service", "ray", "service")


def test_checkpoint_without_orbax(monkeypatch):
    _block(monkeypatch, "orbax")
    monkeypatch.delitem(sys.modules, "jdata.checkpoint", raising=False)
    with pytest.raises(ImportError) as info:
        importlib.import_module("jdata.checkpoint")
    _check(info, "jdata.checkpoint", "orbax.checkpoint", "orbax")


def test_plot_without_matplotlib(monkeypatch):
    _block(monkeypatch, "matplotlib")
    with pytest.raises(ImportError) as info:
        stats.PipelineStats([], [], [], autotune=False).plot()
    _check(info, "PipelineStats.plot", "matplotlib", "plot")


def test_every_extra_named_in_an_error_installs_the_module_it_names():
    import pathlib
    import re
    import tomllib

    pyproject = pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml"
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    for module, (distribution, extra) in _extras._EXTRAS.items():
        names = {re.split(r"[<>=!\[; ]", dep, maxsplit=1)[0] for dep in extras[extra]}
        assert distribution in names, (module, extra)
