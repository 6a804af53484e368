"""``jdata inspect`` (directories of save, cache(filename) and snapshot) and ``jdata
inspect-state`` (iterator states, as JSON files and in Orbax checkpoints)."""

from __future__ import annotations

import json

import jax
import pytest

import jdata
from jdata import cli


def _inspect(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_saved_dataset_shows_its_spec_count_shards_and_fingerprint(tmp_path, capsys):
    ds = jdata.range(10).map(lambda x: {"a": x, "b": x * 2.0})
    ds.save(str(tmp_path / "saved"))
    code, out, _ = _inspect(capsys, "inspect", str(tmp_path / "saved"))
    assert code == 0
    assert "complete" in out and "elements: 10 " in out
    assert "'a': TensorSpec(shape=(), dtype=int64)" in out
    assert f"fingerprint: {ds.fingerprint()}" in out
    assert "shards: 1" in out and "data-00000.array_record: 10 records" in out
    code, out, _ = _inspect(capsys, "inspect", "--json", str(tmp_path / "saved"))
    info = json.loads(out)
    assert (info["kind"], info["complete"], info["elements"]) == ("directory", True, 10)
    assert info["fingerprint"] == ds.fingerprint()
    assert [s["records"] for s in info["shards"]] == [10]


def test_a_cache_is_partial_until_a_pass_completes_it(tmp_path, capsys):
    path = str(tmp_path / "cache")
    ds = jdata.range(5).map(lambda x: x + 1).cache(path)
    it = ds.iterator()
    assert [int(next(it)) for _ in range(2)] == [1, 2]  # writing, not done
    code, out, _ = _inspect(capsys, "inspect", path)
    assert code == 0 and "cache not complete" in out and f"{path}.tmp-" in out
    info = json.loads(_inspect(capsys, "inspect", "--json", path)[1])
    assert (info["kind"], info["complete"], len(info["partial"])) == ("cache", False, 1)
    assert list(it) == [3, 4, 5]  # the pass completes: the cache is written
    info = json.loads(_inspect(capsys, "inspect", "--json", path)[1])
    assert (info["kind"], info["complete"], info["elements"]) == ("directory", True, 5)
    assert info["element_spec"] == str(ds.element_spec)


def test_a_snapshot_lists_its_entries_by_fingerprint(tmp_path, capsys):
    root = tmp_path / "snap"
    assert len(list(jdata.range(6).snapshot(str(root)))) == 6
    assert len(list(jdata.range(3).snapshot(str(root)))) == 3
    code, out, _ = _inspect(capsys, "inspect", str(root))
    assert code == 0 and "snapshot root, 2 complete entries" in out
    info = json.loads(_inspect(capsys, "inspect", "--json", str(root))[1])
    assert info["kind"] == "snapshot" and info["partial"] == []
    assert sorted(e["elements"] for e in info["entries"]) == [3, 6]
    for entry in info["entries"]:
        assert entry["directory"].endswith(entry["fingerprint"])


def test_a_snapshot_being_written_is_partial_under_its_fingerprint(tmp_path, capsys):
    root = str(tmp_path / "snap")
    it = jdata.range(6).snapshot(root).iterator()
    assert int(next(it)) == 0
    code, out, _ = _inspect(capsys, "inspect", root)
    assert code == 0 and "snapshot root, 0 complete entries" in out and "1 partial" in out
    info = json.loads(_inspect(capsys, "inspect", "--json", root)[1])
    assert (info["complete"], info["entries"], len(info["partial"])) == (False, [], 1)
    fingerprint = info["partial"][0]["fingerprint"]
    assert [int(x) for x in it] == [1, 2, 3, 4, 5]
    info = json.loads(_inspect(capsys, "inspect", "--json", root)[1])
    assert info["complete"] and [e["fingerprint"] for e in info["entries"]] == [fingerprint]


@pytest.mark.parametrize("make", ["nothing", "empty directory", "file"])
def test_a_path_of_none_of_these_names_what_was_looked_for(make, tmp_path, capsys):
    path = tmp_path / "x"
    if make == "empty directory":
        path.mkdir()
    elif make == "file":
        path.write_text("hello")
    code, out, err = _inspect(capsys, "inspect", str(path))
    assert code == 1 and out == ""
    assert err.startswith(f"jdata inspect: {path} is not a jdata dataset directory")
    assert all(s in err for s in ("jdata_metadata.json", "<fingerprint>", f"{path}.tmp-*"))


def _dataset():
    return jdata.range(20).shuffle(jax.random.key(0), buffer_size=4).map(lambda x: x + 1) \
        .batch(2).repeat(2)


def test_a_state_file_shows_version_epoch_plan_and_positions(tmp_path, capsys):
    it = _dataset().iterator()
    for _ in range(13):  # into the second repetition
        next(it)
    state = it.get_state()
    it.close()
    (tmp_path / "state.json").write_text(json.dumps(state))
    code, out, _ = _inspect(capsys, "inspect-state", str(tmp_path / "state.json"))
    assert code == 0
    assert f"iterator state version {state['version']}, epoch 0" in out
    assert f"plan: {state['plan']}" in out
    assert "shuffle (20 elements)" in out and "repeat (20 elements)" in out
    assert "repetition=1" in out and "index=" in out
    info = json.loads(_inspect(capsys, "inspect-state", "--json",
                               str(tmp_path / "state.json"))[1])
    (only,) = info["states"]
    assert [o["op"] for o in only["ops"]] == [f[0] for f in state["facts"]]
    assert only["positions"][0] == {"at": "state", "fields": {
        k: v for k, v in state["state"].items() if not isinstance(v, dict)}}


def test_an_orbax_checkpoint_directory_shows_the_state_it_holds(tmp_path, capsys):
    import orbax.checkpoint as ocp

    import jdata.checkpoint

    it = _dataset().iterator()
    next(it)
    options = ocp.CheckpointManagerOptions(enable_async_checkpointing=False)
    with ocp.CheckpointManager(tmp_path / "ckpt", options=options) as manager:
        manager.save(3, args=ocp.args.Composite(data=jdata.checkpoint.CheckpointSave(it)))
    expected = it.get_state()
    it.close()
    info = json.loads(_inspect(capsys, "inspect-state", "--json", str(tmp_path / "ckpt"))[1])
    (only,) = info["states"]
    assert info["kind"] == "checkpoint" and only["file"].endswith("process_0-of-1.json")
    assert (only["plan"], only["epoch"]) == (expected["plan"], expected["epoch"])


@pytest.mark.parametrize("content, message", [
    (None, "no such file"), ("{not json", "is not JSON"),
    ('{"a": 1}', "is JSON but not an iterator state")])
def test_a_bad_state_file_says_what_it_is_not(content, message, tmp_path, capsys):
    path = tmp_path / "state.json"
    if content is not None:
        path.write_text(content)
    code, out, err = _inspect(capsys, "inspect-state", str(path))
    assert code == 1 and message in err and err.startswith("jdata inspect-state: ")


def test_a_directory_without_a_state_names_the_files_looked_for(tmp_path, capsys):
    code, _, err = _inspect(capsys, "inspect-state", str(tmp_path))
    assert code == 1 and "process_*-of-*.json" in err
