"""The parse_example benchmark's records and jdata's side of it (no TensorFlow needed)."""

import numpy as np

import jdata
from benchmarks import parse_example


def test_the_benchmark_records_parse_into_the_shapes_of_their_spec():
    for workload in parse_example.WORKLOADS:
        records = parse_example.prepare(workload, scale=0.01)
        assert len(records) == parse_example.BATCH
        parsed = parse_example.jdata_parse(records, workload)()
        assert len(parsed) == 1
        batch = parsed[0]
        if workload == "image":
            assert batch["image/encoded"].shape == (256,)
            assert all(1536 <= len(image) < 2560 for image in batch["image/encoded"])
            assert batch["image/label"].tolist() == [i % 1000 for i in range(256)]
            assert batch["image/bbox"].shape == (256, 4)
            assert batch["image/bbox"].dtype == np.float32
            tokens = batch["tokens"]
            assert isinstance(tokens, jdata.io.SparseTensor)
            assert tokens.dense_shape[0] == 256 and 10 <= tokens.dense_shape[1] <= 30
        else:
            assert batch["input_ids"].shape == batch["segment_ids"].shape == (256, 128)
            assert batch["segment_ids"][:, 64:].all() and not batch["segment_ids"][:, :64].any()
            assert batch["label"].tolist() == [i % 2 for i in range(256)]
        pipeline = parse_example.jdata_pipeline(records, workload)()
        assert len(pipeline) == 1
        for key, value in batch.items():
            for ours, expected in zip(*((v,) if isinstance(v, np.ndarray) else v
                                        for v in (pipeline[0][key], value))):
                np.testing.assert_array_equal(ours, expected)


def test_the_report_gives_jdatas_rates_without_peers(capsys):
    result = parse_example.report(scale=0.05, rounds=1, measure_sec=0.05,
                                  systems=["jdata", "jdata pipeline"])
    assert set(result) == set(parse_example.WORKLOADS)
    for rates in result.values():
        assert set(rates) == {"jdata", "jdata pipeline"} and min(rates.values()) > 0
    printed = capsys.readouterr().out
    assert "image jdata " in printed and "records/s" in printed
