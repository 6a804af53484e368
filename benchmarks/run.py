"""``make bench``: jdata against tf.data, grain and PyTorch on the same work, in one run.

``overhead``, ``nlp`` and ``cv`` are measured as a training run sees them
(``benchmarks/steady.py``): one infinite stream per system in a fresh process, time to
first batch, then the steady state after a warm-up; interleaved rounds, medians, ratios
to a plain single-threaded loop and to the best peer.

Each workload (``overhead``, ``nlp``, ``cv``, ``feed``, ``optimizer``, ``storage``,
``shuffle_buffer``, ``parse_example``; one module each) defines the same pipeline for every
system with that system's best configuration we know of (each module says which). For the
pipeline workloads (``storage``: jdata and grain only) we print items/sec and jdata's ratio
to each peer and to the best peer; for ``feed`` (a JAX model's training step fed
by each pipeline) steps/sec, the fraction of it spent waiting for input, and
the ratio to an ideal pipeline; for ``optimizer`` jdata's rewrites against jdata
without them; for ``service`` (``jdata.service`` on a local Ray) its scale-out,
transfer rate, overhead and recovery against issue 13's targets, and for
``service_sharing`` the CPU and throughput of jobs sharing one stream (issue 14);
``service_cachew`` Cachew's autoscaler (convergence to the demand) and autocache (the
fig. 8 regimes) (issue 15). ``simclr`` and ``ssd`` (issue 26) are SimCLR's two-view and
SSD's train pipelines, measured as ``cv``; ``image_kernels`` each ``jdata.ops.image``
kernel against its tf.image op on one core. ``cedar.nlp`` and ``cedar.asr`` (issue 27) are
the Cedar paper's NLP (BPE tokens embedded) and ASR (audio features) pipelines
(``benchmarks/cedar/``), measured as ``cv``. ``epochs`` (issue 29) runs ``nlp``, ``cv``
and ``overhead`` in short epochs, a fresh iterator each (``benchmarks/epochs.py``): each
epoch's time, the slowest against the median, and throughput against the plain loop;
``udf_cost`` jdata against the plain loop for pure-Python UDFs of 1 µs to 1 ms.
Absolute times on a shared machine are noise; compare ratios within one run.
"""

from __future__ import annotations

import argparse
import time

from benchmarks import (
    cv,
    epochs,
    feed,
    image_kernels,
    nlp,
    optimizer,
    overhead,
    parse_example,
    service,
    service_cachew,
    service_sharing,
    shuffle_buffer,
    simclr,
    ssd,
    steady,
    storage,
    udf_cost,
)
from benchmarks.cedar import asr as cedar_asr
from benchmarks.cedar import nlp as cedar_nlp

WORKLOADS = {"overhead": overhead, "nlp": nlp, "cv": cv, "feed": feed, "optimizer": optimizer,
             "storage": storage, "shuffle_buffer": shuffle_buffer,
             "parse_example": parse_example, "service": service,
             "service_sharing": service_sharing, "service_cachew": service_cachew,
             "simclr": simclr, "ssd": ssd, "image_kernels": image_kernels,
             "cedar.nlp": cedar_nlp, "cedar.asr": cedar_asr, "epochs": epochs,
             "udf_cost": udf_cost}
# Measured by benchmarks/steady.py.
_STEADY = ("overhead", "nlp", "cv", "simclr", "ssd", "cedar.nlp", "cedar.asr")
_FEED_TARGET_WAIT = 0.05  # the target, where the pipeline alone outruns the model


def items_per_sec(make_pipeline, data, n_items: int, repeats: int) -> float:
    """Best of ``repeats`` full passes (pipeline construction and start-up included)."""
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in make_pipeline(data):
            pass
        best = max(best, n_items / (time.perf_counter() - start))
    return best


def run_workload(name: str, module, scale: float, repeats: int, systems,
                 tuning: bool = True) -> dict[str, float]:
    data = module.prepare(scale)
    n_items = module.items(data)
    print(f"== {name}: {n_items:,} items, best of {repeats}")
    rates = {}
    for system, make_pipeline in module.SYSTEMS.items():
        if systems and system not in systems:
            continue
        try:
            rates[system] = items_per_sec(make_pipeline, data, n_items, repeats)
        except ImportError as e:
            print(f"  {system:8s} not installed ({e.name}); `make bench` installs the peers")
            continue
        print(f"  {system:8s} {rates[system]:12,.0f} items/s")
    ours = rates.get("jdata")
    peers = {k: v for k, v in rates.items() if k != "jdata"}
    if ours and peers:
        for system, rate in peers.items():
            print(f"  jdata / {system:8s} {ours / rate:8.2f}x")
        best = max(peers, key=peers.get)
        print(f"  jdata / best peer ({best}) {ours / peers[best]:.2f}x")
    if ours and tuning:
        compare_hand_picked(module, data, n_items, repeats, ours)
    return rates


def compare_hand_picked(module, data, n_items: int, repeats: int, default_rate: float) -> None:
    """jdata's default (autotuned) configuration against the configurations picked by hand."""
    picked = {}
    for config in getattr(module, "HAND_PICKED", []):
        label = ", ".join(f"{k}={v}" for k, v in config.items())
        picked[label] = items_per_sec(
            lambda d, c=config: module.jdata_pipeline(d, **c), data, n_items, repeats)
        print(f"  jdata hand-picked {label:34s} {picked[label]:12,.0f} items/s")
    if picked:
        best = max(picked, key=picked.get)
        print(f"  jdata default / best hand-picked ({best}) "
              f"{default_rate / picked[best]:.2f}x")


def _feed_line(result: feed.FeedResult, ideal: feed.FeedResult) -> str:
    faster = result.alone_batches_per_sec > ideal.steps_per_sec
    if not faster:
        verdict = "n/a"
    else:
        verdict = "met" if result.wait_fraction < _FEED_TARGET_WAIT else "MISSED"
    return (f"{result.steps_per_sec:6.1f} steps/s  wait {result.wait_fraction:5.1%}"
            f"  {result.steps_per_sec / ideal.steps_per_sec:4.2f}x ideal"
            f" ({ideal.steps_per_sec:5.1f})  alone {result.alone_batches_per_sec:6.0f} batches/s"
            f" ({'faster' if faster else 'slower'} than model)  <5% target {verdict}")


def run_feed(scale: float, systems) -> dict[str, feed.FeedResult]:
    data = feed.prepare(scale)
    print(f"== feed: {data.steps} training steps on nlp batches, after {data.alone_batches}"
          " batches of the pipeline alone (one pass); ideal: jdata ...take(1).cache().repeat()"
          " just before, steps/s in ()")
    results = {}
    for system, make_pipeline in feed.SYSTEMS.items():
        if systems and system not in systems:
            continue
        ideal = feed.measure_ideal(data)
        try:
            results[system] = feed.measure(make_pipeline, data)
        except ImportError as e:
            print(f"  {system:8s} not installed ({e.name}); `make bench` installs the peers")
            continue
        print(f"  {system:8s} {_feed_line(results[system], ideal)}")
    return results


def _parse_absl_flags() -> None:
    # grain's worker processes read absl flags, which only an absl app parses.
    try:
        from absl import flags
    except ImportError:
        return
    flags.FLAGS.mark_as_parsed()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", default=list(WORKLOADS),
                        help=f"which to run (default: all of {', '.join(WORKLOADS)})")
    parser.add_argument("--scale", type=float, default=1.0, help="data size multiplier")
    parser.add_argument("--repeats", type=int, default=3,
                        help="passes per system (best kept; overhead, nlp, cv, simclr, ssd, "
                        "cedar.*: interleaved rounds, at least 3, medians); feed makes one")
    parser.add_argument("--systems", nargs="*", default=None, help="only these systems")
    parser.add_argument("--no-tuning", action="store_true",
                        help="skip jdata's hand-picked configurations")
    args = parser.parse_args(argv)
    _parse_absl_flags()
    for name in args.workloads:
        if name in _STEADY:
            steady.report(name, rounds=max(3, args.repeats), scale=args.scale,
                          tuning=not args.no_tuning, systems=args.systems)
        elif name == "epochs":
            for workload in ("nlp", "cv", "overhead"):
                epochs.report(workload, rounds=max(3, args.repeats),
                              scale=args.scale * epochs.EPOCH_SCALE[workload],
                              systems=args.systems)
        elif name == "udf_cost":
            print(udf_cost.table(udf_cost.run(rounds=max(3, args.repeats))))
        elif name == "feed":
            run_feed(args.scale, args.systems)
        elif name == "image_kernels":
            try:
                image_kernels.report(rounds=max(3, args.repeats))
            except ImportError as e:
                print(f"== image_kernels: not installed ({e.name}); `make bench` installs "
                      "tensorflow")
        elif name == "optimizer":
            optimizer.report(args.scale, args.repeats)
        elif name == "shuffle_buffer":
            shuffle_buffer.report(args.scale, args.repeats, systems=args.systems)
        elif name == "parse_example":
            parse_example.report(args.scale, args.repeats, systems=args.systems)
        elif name in ("service", "service_sharing", "service_cachew"):
            try:
                if name == "service":
                    service.report(args.scale, args.repeats)
                elif name == "service_sharing":
                    service_sharing.report(args.repeats)
                else:
                    service_cachew.report_autocache(args.repeats)
                    service_cachew.report()
            except ImportError as e:
                print(f"== {name}: not installed ({e}); pip install 'jdata-jax[service]'")
        elif name == "storage":
            run_workload(name, storage, args.scale, args.repeats, args.systems, False)
            for batch in (None, 1024):
                two, every = storage.parquet_projection(args.scale, args.repeats, batch)
                how = "rows" if batch is None else f"batches of {batch}"
                print(f"  parquet as {how}: 2 of 20 columns {two:,.0f} rows/s, all "
                      f"{every:,.0f} rows/s: {two / every:.2f}x (target >= 5x)")
            shuffled = storage.shuffled_shard_rates(args.scale, args.repeats)
            print("  full shuffle over 64 shards: " + ", ".join(
                f"{k} {v:,.0f}" for k, v in shuffled.items()) + " records/s" + (
                f": {shuffled['jdata'] / shuffled['grain']:.2f}x grain" if "grain" in shuffled
                else ""))
            rates = storage.tfrecord_rates(args.scale, args.repeats)
            print("  tfrecord: " + ", ".join(f"{k} {v:,.0f}" for k, v in rates.items())
                  + " records/s")
            if "tf.data" in rates:
                print(f"  jdata / tf.data on tfrecord {rates['jdata'] / rates['tf.data']:.2f}x, "
                      "interleaved "
                      f"{rates['jdata interleave'] / rates['tf.data interleave']:.2f}x")
            first, second = storage.cache_epochs(args.scale)
            print(f"  cache(filename) over JPEG decode+resize: first epoch {first:.2f} s, "
                  f"second {second:.2f} s: {first / second:.1f}x (target >= 5x)")
        else:
            run_workload(name, WORKLOADS[name], args.scale, args.repeats, args.systems,
                         not args.no_tuning)


if __name__ == "__main__":
    main()
