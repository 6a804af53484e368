"""Every claim of the guides that names a constant or a list holds for the code.

A claim is a phrase of a guide with ``{}`` where its number stands. The test finds the phrase
(so a guide reworded must be updated here: a claim cannot drift away unchecked) and compares
its number with the code's value, in the phrase's unit. Lists (the API, the rules, the
options, the modes, the extras, the paths and the errors a guide names) are compared whole.
Importing the service's modules needs no Ray.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import pathlib
import re
import tomllib

import pytest

import jdata
import jdata.service
from jdata import _iterator, _options, _plan, _probe, _random, _sources, optimize
from jdata.ops import image
from jdata.runtime import pool
from jdata.service import (
    _coordination,
    _dispatcher_stats,
    _membership,
    _ray,
    _rounds,
    _rounds_reader,
    _scaling,
    _session,
    _worker_buffers,
    _worker_reads,
    autocache,
    autoscaler,
    client,
    dispatcher,
    splits,
    transport,
    worker,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
DESIGN, SERVICE, MIGRATION = "docs/design.md", "docs/service.md", "docs/migration.md"
IMAGE = "docs/image.md"
_WORDS = {"an": 1, "once": 1, "one": 1, "two": 2, "twice": 2}


def _text(doc: str) -> str:
    # One space for any run of whitespace: a phrase matches across the guide's line breaks.
    return " ".join((ROOT / doc).read_text().split())


def _max_step() -> int:
    return inspect.signature(autoscaler.Policy).parameters["max_step"].default


def _window_percent() -> float:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert memory // 20 > 64 << 20, "this machine's memory is below the window's floor"
    return _worker_buffers.default_window_bytes() / memory * 100


# (guide, phrase with {} for the number, the code's value in the phrase's unit)
NUMBERS = [
    (DESIGN, "`AUTOTUNE = {}`", lambda: jdata.AUTOTUNE),
    (DESIGN, "`INFINITE = {}`", lambda: jdata.INFINITE),
    (DESIGN, "`UNKNOWN = {}`", lambda: jdata.UNKNOWN),
    (DESIGN, '`{{"version": {}, "plan", "facts", "epoch", "state"}}`',
     lambda: _iterator._STATE_VERSION),
    (MIGRATION, '# small: {{"version": {}, "plan": ..., ...}}', lambda: _iterator._STATE_VERSION),
    (DESIGN, "running the pipeline on its first {} elements", lambda: _probe._PROBE_ELEMENTS),
    (DESIGN, "Keys are derived {} positions at a time", lambda: _random.KeyBlocks._BLOCK),
    (DESIGN, "Keys are derived {} positions at a time", lambda: _random.UniformBlocks._BLOCK),
    (DESIGN, "about {} ms of work per chunk on threads", lambda: pool._TARGET_CHUNK_SEC * 1e3),
    (DESIGN, "Split size aims at {} s of work", lambda: splits._SPLIT_SEC),
    (SERVICE, "aims at about {} s of work per split", lambda: splits._SPLIT_SEC),
    (DESIGN, "with backpressure ({} blocks ahead)", lambda: worker.READ_AHEAD),
    (DESIGN, "up to {} elements or 4 MB", lambda: _worker_reads.BLOCK_ELEMENTS),
    (DESIGN, "elements or {} MB)", lambda: _worker_reads.BLOCK_BYTES / 2**20),
    (DESIGN, "pinged {} a second", lambda: 1 / dispatcher._PING_SEC),
    (DESIGN, "the dispatcher's monitor ticks {} a second", lambda: 1 / dispatcher._PING_SEC),
    (SERVICE, "Each monitor tick ({} s)", lambda: dispatcher._PING_SEC),
    (DESIGN, "maps runs of {} rounds", lambda: _coordination.ROUNDS_PER_READ),
    (DESIGN, "from a round {} past the furthest consumer", lambda: _coordination.ROUND_LEAD),
    (SERVICE, "to the workers in runs of {},", lambda: _coordination.ROUNDS_PER_READ),
    (SERVICE, "round {} past the furthest replica", lambda: _coordination.ROUND_LEAD),
    (MIGRATION, "rounds in runs of {} per worker", lambda: _coordination.ROUNDS_PER_READ),
    (MIGRATION, "together when not ready within {} s", lambda: _rounds_reader.ROUND_BOUND_SEC),
    (SERVICE, "A round whose group is not ready within {} s",
     lambda: _rounds_reader.ROUND_BOUND_SEC),
    (SERVICE, "holds the others once, for {} s", lambda: _rounds.CONSUMER_TIMEOUT_SEC),
    (SERVICE, "waits for a peer that died, once, up to {} s", lambda: _rounds.CONSUMER_TIMEOUT_SEC),
    (SERVICE, "the others wait for it once ({} s)", lambda: _rounds.CONSUMER_TIMEOUT_SEC),
    (DESIGN, "improves by more than {}%", lambda: autoscaler.UP_GAIN * 100),
    (DESIGN, "down while it loses less than {}%", lambda: autoscaler.DOWN_LOSS * 100),
    (DESIGN, "re-trigger at {}x", lambda: autoscaler.RETRIGGER),
    (DESIGN, "it samples {} s of a steady worker count", lambda: autoscaler.SAMPLE_SEC),
    (DESIGN, "(after {} s of settling)", lambda: autoscaler.SETTLE_SEC),
    (DESIGN, "they go once they hold none, or after {} s", lambda: _scaling.DRAIN_TIMEOUT_SEC),
    (SERVICE, "Every {} s each client reports", lambda: _session.HEARTBEAT_SEC),
    (SERVICE, "from the clients' heartbeats (every {} s)", lambda: _session.HEARTBEAT_SEC),
    (SERVICE, "Every {} s of a steady worker count", lambda: autoscaler.SAMPLE_SEC),
    (SERVICE, "in steps of at most {} and", _max_step),
    (SERVICE, "shortens the batch time by more than {}%", lambda: autoscaler.UP_GAIN * 100),
    (SERVICE, "one fewer while that costs less than {}%", lambda: autoscaler.DOWN_LOSS * 100),
    (SERVICE, "grows {}x over the converged state", lambda: autoscaler.RETRIGGER),
    (SERVICE, "after {} s it goes anyway", lambda: _scaling.DRAIN_TIMEOUT_SEC),
    (SERVICE, "by default {}% of the worker's node memory", _window_percent),
    (SERVICE, "storing nothing when that is within {}%", lambda: autocache.TIE * 100),
    (SERVICE, "over the last {} s its `elements_per_sec`",
     lambda: _dispatcher_stats.RATE_WINDOW_SEC),
    (SERVICE, "as a killed worker, noticed within {} s", lambda: _membership.PING_TIMEOUT_SEC),
    (SERVICE, "waits for its next lease (up to {} minutes",
     lambda: transport.UNAVAILABLE_WAIT_SEC / 60),
    (SERVICE, "seconds ({} hour by default", lambda: dispatcher.JOB_TIMEOUT_SEC / 3600),
    (SERVICE, "outweigh it (and {} kB)", lambda: dispatcher.COMPACT_MIN_BYTES / 1024),
    (SERVICE, "any plan no read used for {} minutes", lambda: worker.PLAN_IDLE_SEC / 60),
    (SERVICE, "found within {} s instead of", lambda: _ray._CONNECT_TIMEOUT_SEC),
    (SERVICE, "waits up to {} s for its trainers", lambda: jdata.service._CLIENTS_GRACE_SEC),
    (IMAGE, "the default is `image.MAX_PIXELS`, {} pixels", lambda: image.MAX_PIXELS),
]


def _number_pattern(phrase: str) -> re.Pattern:
    literal = re.escape(" ".join(phrase.replace("{{", "\0").replace("}}", "\1").split()))
    number = r"(-?[\d][\d,]*(?:\.\d+)?|" + "|".join(_WORDS) + ")"
    return re.compile(literal.replace(r"\{\}", number).replace("\0", r"\{")
                      .replace("\1", r"\}"))


def _as_number(text: str) -> float:
    return _WORDS[text] if text in _WORDS else float(text.replace(",", ""))


@pytest.mark.parametrize("doc, phrase, value", NUMBERS,
                         ids=[f"{pathlib.Path(d).stem}:{p}" for d, p, _ in NUMBERS])
def test_a_number_a_guide_names_is_the_codes(doc, phrase, value):
    found = _number_pattern(phrase).findall(_text(doc))
    assert found, f"{doc} no longer says {phrase!r}: update the claim in this test"
    for text in found:
        assert _as_number(text) == pytest.approx(value(), rel=1e-6), (
            f"{doc} says {phrase.replace('{}', text)!r}; the code's value is {value()}")


def _listed(doc: str, start: str, end: str) -> list[str]:
    """The backticked names of a guide after ``start``, up to ``end``."""
    text = _text(doc)
    section = text[text.index(start) + len(start):]
    return re.findall(r"`([^`]+)`", section[:section.index(end)])


def _bare(names: list[str]) -> set[str]:
    return {re.sub(r"\(.*", "", n).removeprefix("jdata.io.") for n in names}


def test_the_design_lists_every_dataset_method():
    listed = _listed(DESIGN, "- `Dataset` methods:", "- `Options`")
    public = {n for n in vars(jdata.Dataset) if not n.startswith("_")}
    dunders = {n for n in listed if n.startswith("__")}
    assert set(listed) - dunders == public
    assert dunders and all(callable(getattr(jdata.Dataset, n)) for n in dunders)
    properties = {n for n, v in vars(jdata.Dataset).items() if isinstance(v, property)}
    assert "two properties, `element_spec` and `options`" in _text(DESIGN)
    assert properties == {"element_spec", "options"}


def test_the_design_lists_every_source():
    listed = _bare(_listed(DESIGN, "- Sources, in `jdata/_sources.py`", "- File sources"))
    exported = {n for n in dir(jdata) if getattr(getattr(jdata, n), "__module__", None)
                == _sources.__name__ and inspect.isfunction(getattr(jdata, n))}
    assert listed - {"jdata", "__len__", "__getitem__", "args="} == exported


def test_the_design_lists_every_file_source_and_parser():
    listed = _bare(_listed(DESIGN, "- File sources, in `jdata/io/`", "- `Dataset` methods"))
    public = {n for n, v in vars(jdata.io).items() if inspect.isfunction(v)
              and not n.startswith("_") and v.__module__.startswith("jdata.io")}
    assert listed - {"jdata"} == public


def test_the_design_lists_every_option_and_engine():
    listed = _listed(DESIGN, "- `Options` (`jdata/_options.py`)", "(`Options.merge`)")
    fields = [f.name for f in dataclasses.fields(jdata.Options)]
    engines = [n.strip('"') for n in listed if n.startswith('"')]
    assert [n for n in listed if n in fields] == fields
    assert tuple(engines) == _options.ENGINES


def test_the_design_lists_every_capability_flag_of_the_plan_nodes():
    listed = _listed(DESIGN, "declare their capabilities as class variables", "; printable")
    flags = {name for cls in (_plan.Node, _plan.Unchanged)
             for name, value in vars(cls).items() if type(value) is bool}
    assert set(listed) - {"Unchanged"} == flags


def test_the_design_lists_the_rules_in_the_order_they_run():
    rows = re.findall(r"^\| (`[^|]+) \|", (ROOT / DESIGN).read_text().split(
        "The rules, in the order")[1].split("\n\n")[1], re.M)
    listed = [name for row in rows for name in re.findall(r"`(\w+)`", row)]
    assert listed == [rule.name for rule in optimize.RULES]


def test_the_guides_name_the_processing_modes_the_code_has():
    for doc in (DESIGN, SERVICE):
        text = _text(doc)
        for mode in client.MODES:
            assert f'`"{mode}"`' in text or f'`processing_mode="{mode}"`' in text, (doc, mode)


def test_every_path_a_guide_names_exists():
    checked = 0
    for doc in sorted((ROOT / "docs").glob("*.md")):
        for path in re.findall(r"`((?:jdata|tests|benchmarks|deploy|runtime|service|ops|io|"
                               r"optimize|hosts)/[\w/.<>-]*)`", doc.read_text()):
            if "<" in path:  # a pattern such as tests/ops/test_<op>.py
                continue
            where = ROOT / path if path.split("/")[0] in (
                "jdata", "tests", "benchmarks", "deploy") else ROOT / "jdata" / path
            if not where.exists():  # a module's attribute: runtime/iterator.read_block
                module, _, attribute = where.name.partition(".")
                source = where.with_name(module + ".py")
                assert attribute and source.exists() and (
                    re.search(rf"^(def|class) {attribute}\b", source.read_text(), re.M)), (
                    f"{doc.name} names {path}, which does not exist")
            checked += 1
    assert checked >= 30


def test_every_error_a_guide_names_exists():
    import builtins

    checked = 0
    for doc in sorted((ROOT / "docs").glob("*.md")):
        for name in set(re.findall(r"`(?:jdata\.(?:errors\.)?)?(\w+Error)\b", doc.read_text())):
            if name in {"OutOfRangeError", "InvalidArgumentError", "DataLossError"}:
                continue  # tf.errors, in migration.md's comparisons
            assert hasattr(jdata.errors, name) or hasattr(builtins, name), (doc.name, name)
            checked += 1
    assert checked >= 10


def test_every_extra_a_guide_names_is_in_pyproject():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    named = [(doc.name, extra) for doc in sorted((ROOT / "docs").glob("*.md"))
             for extra in re.findall(r"jdata(?:-jax)?\[(\w+)\]|the `(\w+)` extra",
                                     doc.read_text())]
    named = [(doc, a or b) for doc, (a, b) in named]
    assert len(named) >= 3
    for doc, extra in named:
        assert extra in extras, f"{doc} names the extra {extra!r}; pyproject has {sorted(extras)}"


def _module_lines() -> dict[str, int]:
    return {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
            for p in (ROOT / "jdata").rglob("*.py")}


def test_the_design_says_how_long_modules_run():
    claim = re.search(r"at least (\d+) in (\d+) run at most (\d+) lines \(most of those "
                      r"(\d+)-\3\); the hub `_dataset.py`, mostly documentation, runs over "
                      r"([\d,]+) lines, and no other module passes (\d+)\.", _text(DESIGN))
    assert claim, "the design's sentence on module sizes changed: update this test"
    part, whole, most, low, hub, longest = (int(g.replace(",", "")) for g in claim.groups())
    lines = _module_lines()
    small = [n for n in lines.values() if n <= most]
    assert len(small) * whole >= part * len(lines)
    assert sum(low <= n for n in small) * 2 > len(small)
    assert lines.pop("jdata/_dataset.py") > hub
    assert max(lines.values()) <= longest
