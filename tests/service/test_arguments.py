"""The service's arguments, checked before anything starts (no Ray here): NumPy integers
are integers, tf.data service's mode names say which of jdata's to use."""

from __future__ import annotations

import numpy as np
import pytest

import jdata
from jdata import service
from jdata.errors import ServiceConnectionError
from jdata.service import Service
from jdata.service.client import ServiceRef

_SVC = Service(None, ServiceRef(None, "jdata", 10), owned=False)  # never started


def test_numpy_integers_are_consumer_indices_and_counts():
    endless = jdata.range(8).repeat()
    ds = endless.distribute(_SVC, job_name="j", num_consumers=np.int64(2),
                            consumer_index=np.int32(1))
    node = ds._node
    assert (node.num_consumers, node.consumer_index) == (2, 1)
    assert type(node.num_consumers) is int and type(node.consumer_index) is int
    with pytest.raises(ValueError,
                       match=r"consumer_index=np.int64\(2\) must be an int in \[0, 2\)"):
        endless.distribute(_SVC, job_name="j", num_consumers=np.int64(2),
                           consumer_index=np.int64(2))
    for bad in (1.0, np.float64(1.0), True, np.bool_(True), "1"):
        with pytest.raises(ValueError, match="consumer_index="):
            endless.distribute(_SVC, job_name="j", num_consumers=2, consumer_index=bad)


def test_numpy_numbers_are_service_arguments():
    # Each is checked before Ray starts; the last, bad on purpose, shows that the NumPy
    # ones before it passed.
    with pytest.raises(ValueError, match="client_timeout=0 must be"):
        service.start(num_workers=np.int64(2), max_workers=np.int64(4),
                      window_bytes=np.int64(1 << 20), split_elements=np.int64(10),
                      worker_cpus=np.float32(0.5), job_timeout=np.int64(60), client_timeout=0)
    with pytest.raises(ValueError, match="num_workers=1.5 must be an int"):
        service.start(num_workers=1.5)
    with pytest.raises(ServiceConnectionError, match="no Ray in this process"):
        service.connect(split_elements=np.int64(10))


@pytest.mark.parametrize("mode, jdatas", [
    ("parallel_epochs", "off"), ("distributed_epoch", "dynamic"), ("DYNAMIC", "dynamic"),
    ("file_or_data", "static")])
def test_tf_data_service_modes_name_jdatas_instead(mode, jdatas):
    with pytest.raises(ValueError) as info:
        jdata.range(8).distribute(_SVC, processing_mode=mode)
    message = str(info.value)
    assert f"processing_mode={mode!r} is tf.data service's name" in message
    assert f"jdata's is processing_mode={jdatas!r}" in message
    jdata.range(8).distribute(_SVC, processing_mode=jdatas)  # the name it gives is taken


def test_an_unknown_mode_lists_jdatas():
    with pytest.raises(ValueError, match="processing_mode='bogus' must be one of 'off', "
                                         "'dynamic', 'static'"):
        jdata.range(8).distribute(_SVC, processing_mode="bogus")
