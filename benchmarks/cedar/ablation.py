"""Cedar's ablation table: what each part of jdata's automatic plan adds, per workload.

Each level is jdata's pipeline for the workload (its ``jdata_pipeline``) with one more
of the optimizations Cedar's ablation figure adds, measured as ``benchmarks/steady.py``
measures a system (one infinite stream in a fresh process: warm-up, then items/s;
rounds interleaved, medians), with each level's ratio to the one before and to the
first:

1. ``sequential``: every op in the consumer's thread (``num_parallel_calls=None``), no
   optimizer, no autotuning (the pipeline's own final ``prefetch`` stays);
2. ``+ parallelism``: each map over ``num_parallel_calls=AUTOTUNE`` threads;
3. ``+ reordering``: the optimizer's reordering of declared-commutable ops alone
   (size-reducing early: Cedar's reordering);
4. ``+ offloading``: the engine measured per stage (``engine="auto"``: GIL-bound UDFs
   move to worker processes; jdata's local offloading; the service is the demand
   table's, ``benchmarks/cedar/demand.py``);
5. ``+ fusion``: every optimizer rule (fusion of maps, random maps and image chains,
   pushdown, the injected prefetch): jdata as it runs by default.

Levels 3 and 4 keep to the optimizer's rules they name by setting
``jdata.optimize.RULES`` in the measuring process (each is a fresh process).

    python -m benchmarks.cedar.ablation --rounds 2
    python -m benchmarks.cedar.ablation cedar.asr --quick   # a smoke run
"""

from __future__ import annotations

import argparse

from benchmarks import steady

WORKLOADS = ("simclr", "ssd", "cedar.nlp", "cedar.asr")
PREFIX = "jdata level "
# name -> (jdata_pipeline's kwargs, Options' kwargs, the optimizer's rules: None = all)
LEVELS = {
    "1 sequential": ({"parallel": None, "engine": "threads"},
                     {"optimize": False, "autotune": False}, ()),
    "2 + parallelism": ({"engine": "threads"}, {"optimize": False}, ()),
    "3 + reordering": ({"engine": "threads"}, {}, ("reorder",)),
    "4 + offloading": ({"engine": "auto"}, {}, ("reorder",)),
    "5 + fusion": ({"engine": "auto"}, {}, None),
}


def systems() -> list[str]:
    return [PREFIX + name for name in LEVELS]


def maker(module, system: str):
    """The pipeline maker of level ``system`` (``PREFIX`` + a ``LEVELS`` name) for
    ``module``'s workload; in this process, the optimizer keeps the level's rules."""
    import jdata
    from jdata import optimize

    kwargs, options, rules = LEVELS[system[len(PREFIX):]]
    if rules is not None:
        optimize.RULES = tuple(r for r in optimize.RULES if r.name in rules)

    def make(data, repeat=False):
        ds = module.jdata_pipeline(data, repeat=repeat, **kwargs)
        return ds.with_options(jdata.Options(**options)) if options else ds
    return make


def table(result: steady.Result) -> str:
    """Each level's items/s, its ratio to the level before and to the first."""
    lines = [f"== {result.workload}: ablation (items/s, median)",
             f"  {'level':24s} {'steady':>12s} {'x before':>9s} {'x first':>8s}"]
    first = before = None
    for system in systems():
        rate = result.steady(system)
        name = system[len(PREFIX):]
        if rate is None:
            lines.append(f"  {name:24s} {result.errors.get(system, 'no sample')}")
            continue
        step = f"{rate / before:8.2f}x" if before else "        -"
        total = f"{rate / first:7.2f}x" if first else "       -"
        lines.append(f"  {name:24s} {rate:12,.1f} {step} {total}")
        first, before = first or rate, rate
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", default=list(WORKLOADS))
    steady.add_stream_arguments(parser, rounds=2)
    args = steady.quick(parser.parse_args(argv))
    for workload in args.workloads:
        if workload not in WORKLOADS:
            parser.error(f"unknown workload {workload!r}; one of {', '.join(WORKLOADS)}")
        result = steady.run(workload, systems(), args.rounds, args.warmup, args.seconds,
                            args.scale)
        print(table(result), flush=True)


if __name__ == "__main__":
    main()
