"""jdata's public API is typed: mypy --strict passes on it (mypy.ini), a user's code sees
its types (not ``Any``), and decorated methods keep their signatures."""

import inspect
import pathlib
import re
import subprocess
import sys
import typing

import pytest

import jdata
from jdata._types import Key

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _mypy(*args: str) -> subprocess.CompletedProcess[str]:
    # From the repository root, where mypy.ini is and where mypy finds this checkout's
    # jdata; its cache (.mypy_cache) makes the second run fast.
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", "mypy.ini", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          check=False)


def test_the_package_is_marked_typed():
    assert (pathlib.Path(jdata.__file__).parent / "py.typed").is_file()


def test_shuffle_keeps_its_signature_through_its_decorator():
    signature = inspect.signature(jdata.Dataset.shuffle)
    assert list(signature.parameters) == ["self", "key", "buffer_size",
                                          "reshuffle_each_iteration", "seed"]
    assert signature.parameters["seed"].kind is inspect.Parameter.KEYWORD_ONLY
    assert signature.parameters["buffer_size"].default is None
    hints = typing.get_type_hints(jdata.Dataset.shuffle)
    assert hints["key"] == Key | None
    assert hints["buffer_size"] == int | None
    assert hints["return"] is jdata.Dataset


@pytest.mark.slow  # mypy analyses jax and numpy's stubs: tens of seconds without a cache
def test_the_public_modules_pass_mypy_strict():
    result = _mypy()
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("Success: no issues found")


_USER_CODE = '''\
import jax
import jdata
from jdata.ops import image

ds = jdata.range(10).map(lambda x: x * 2).shuffle(jax.random.key(0), buffer_size=4).batch(2)
it = ds.iterator()
reveal_type(jdata.range(10))
reveal_type(ds)
reveal_type(it)
reveal_type(it.get_state())
reveal_type(jdata.Dataset.shuffle)
reveal_type(image.resize(short_side=4))
reveal_type(jdata.from_tensor_slices([1, 2]).element_spec)
jdata.range(10).batch("2")
'''


@pytest.mark.slow  # as above (it shares the cache of the run above)
def test_user_code_sees_jdata_types_under_mypy_strict(tmp_path):
    path = tmp_path / "user_code.py"
    path.write_text(_USER_CODE)
    result = _mypy("--strict", str(path))
    out = result.stdout
    revealed = re.findall(r'Revealed type is "(.*)"', out)
    assert revealed[:3] == ["jdata._dataset.Dataset", "jdata._dataset.Dataset",
                            "jdata._iterator.DatasetIterator"], out
    assert revealed[3] == "dict[str, Any]", out
    # The decorated method is seen with its own parameters, not as (*Any, **Any).
    assert re.search(r"key: jax\..*Array \| numpy\.ndarray\[Any, Any\] \| None =, "
                     r"buffer_size: int \| None =, reshuffle_each_iteration: bool \| None =, "
                     r"\*, seed: int \| None =\) -> jdata\._dataset\.Dataset", revealed[4]), out
    assert revealed[5].startswith("jdata._declare.Declared["), out
    assert revealed[6] == "Any", out  # a pytree of specs
    # A wrong argument is caught: jdata's signatures are not Any. It is the only error.
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "user_code.py:14:" in errors[0], out
    assert '"batch" of "Dataset" has incompatible type "str"' in errors[0], out
    assert result.returncode == 1, out
