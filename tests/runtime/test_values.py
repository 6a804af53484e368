"""values.frozen: new containers, read-only arrays, no data copied."""

import collections

import numpy as np
import pytest

from jdata.runtime.values import frozen, read_only

Pair = collections.namedtuple("Pair", ["a", "b"])


def test_read_only_views_share_the_data_and_leave_the_owner_writable():
    owner = np.arange(3)
    view = read_only(owner)
    assert view is not owner and np.shares_memory(view, owner)
    assert owner.flags.writeable and not view.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        view += 1
    assert read_only(view) is view  # read-only already: nothing to make
    rows = view[1:]  # views of a read-only array are read-only
    assert frozen(view) is view and frozen(rows) is rows


def test_containers_are_rebuilt_at_every_depth():
    array = np.zeros(2)
    element = {"d": {"t": (array, [array, b"b"])}, "p": Pair(array, "s"),
               "o": collections.OrderedDict(x=array), "n": np.float32(1.5)}
    out = frozen(element)
    assert out is not element and out["d"] is not element["d"]
    assert type(out["d"]["t"]) is tuple and type(out["d"]["t"][1]) is list
    assert out["d"]["t"][1] is not element["d"]["t"][1]
    assert type(out["p"]) is Pair and type(out["o"]) is collections.OrderedDict
    arrays = [out["d"]["t"][0], out["d"]["t"][1][0], out["p"].a, out["o"]["x"]]
    assert all(not a.flags.writeable and np.shares_memory(a, array) for a in arrays)
    assert out["d"]["t"][1][1] == b"b" and out["p"].b == "s" and out["n"] == np.float32(1.5)
    out["d"]["t"][1].append(1)
    out["o"].clear()
    assert len(element["d"]["t"][1]) == 2 and list(element["o"]) == ["x"]


def test_defaultdicts_keep_their_factory():
    element = collections.defaultdict(list, x=np.zeros(1))
    out = frozen(element)
    assert out is not element and out.default_factory is list
    assert not out["x"].flags.writeable and out["missing"] == []
    assert "missing" not in element


def test_leaves_that_cannot_change_are_handed_out_as_they_are():
    for leaf in (b"raw", "text", np.int64(3), np.float16(1.0), 7, np.str_("s")):
        assert frozen(leaf) is leaf
    opaque = object()  # not an element leaf: nothing to freeze without a copy
    assert frozen(opaque) is opaque
