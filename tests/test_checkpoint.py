"""jdata.checkpoint: iterator state in real Orbax checkpoints, beside model state."""

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
import pytest

import jdata
import jdata.checkpoint
from tests.helpers import assert_same_sequence, take_list


def _dataset():
    return (jdata.range(200).shuffle(jax.random.key(0))
            .map(lambda x: x * 3, num_parallel_calls=2).batch(8).prefetch(2))


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_run_restored_from_its_checkpoint_goes_on_exactly(tmp_path, asynchronous):
    expected = take_list(_dataset())
    options = ocp.CheckpointManagerOptions(enable_async_checkpointing=asynchronous)
    params = {"w": np.arange(4.0)}
    with ocp.CheckpointManager(tmp_path / "ckpt", options=options) as manager:
        it = _dataset().iterator()
        consumed = [next(it) for _ in range(7)]
        manager.save(7, args=ocp.args.Composite(
            model=ocp.args.StandardSave(params), data=jdata.checkpoint.CheckpointSave(it)))
        consumed += [next(it) for _ in range(3)]  # the run goes on past the checkpoint
        manager.wait_until_finished()
        it.close()
    assert (tmp_path / "ckpt" / "7" / "data" / "process_0-of-1.json").exists()
    with ocp.CheckpointManager(tmp_path / "ckpt", options=options) as manager:
        assert manager.latest_step() == 7
        restored = manager.restore(7, args=ocp.args.Composite(
            model=ocp.args.StandardRestore(params),
            data=jdata.checkpoint.CheckpointRestore(_dataset().iterator())))
    np.testing.assert_array_equal(restored.model["w"], params["w"])
    assert_same_sequence(consumed[:7] + list(restored.data), expected)


def test_wrong_items_fail_clearly(tmp_path):
    with pytest.raises(TypeError, match="needs a jdata iterator"):
        jdata.checkpoint.CheckpointSave([1, 2])
    handler = jdata.checkpoint.CheckpointHandler()
    with pytest.raises(FileNotFoundError, match="no iterator state"):
        handler.restore(epath.Path(tmp_path),
                        jdata.checkpoint.CheckpointRestore(_dataset().iterator()))
