"""Pipeline-wide options, set with ``Dataset.with_options``."""

from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING, Any, NoReturn

from jdata._constants import AUTOTUNE
from jdata._errors import OptionsFrozenError


class _Unset(enum.Enum):
    """An argument not passed: ``Options`` tells it from one passed with its default."""

    UNSET = enum.auto()

    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset.UNSET
ENGINES = ("auto", "threads", "processes")


@dataclasses.dataclass(frozen=True)
class PlanPins:
    """Decisions the user fixed: ``cut`` an op's name (it and the ops below it run on the
    service) or ``"local"``; ``workers`` a count >= 0; ``cache`` an op's name (a cache
    of its output) or ``"none"``. ``None``: the planner decides.

    >>> import jdata
    >>> options = jdata.Options(plan=jdata.PlanPins(workers=0))  # never the service
    >>> options.plan_pins().workers
    0
    """

    cut: str | None = None
    workers: int | None = None
    cache: str | None = None

    def __post_init__(self) -> None:
        for name in ("cut", "cache"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise TypeError(f"PlanPins({name}={value!r}) must be an op's name as explain() "
                                "gives it, or None")
        if self.workers is not None and (isinstance(self.workers, bool) or not isinstance(
                self.workers, int) or self.workers < 0):
            raise ValueError(f"PlanPins(workers={self.workers!r}) must be an int >= 0 or None")



# Not dataclass(frozen=True): that writes a __setattr__ whose error cannot say how to set an
# option in jdata. This one is immutable all the same (__init__ writes with object.__setattr__).
@dataclasses.dataclass(init=False, eq=False)
class Options:
    """Options that apply to a whole pipeline.

    Attributes:
      deterministic: produce elements in a deterministic order. With ``False``,
        parallel ops may yield elements in completion order.
      optimize: apply the static optimizer's rewrites.
      autotune: let the runtime tune parallelism and buffer sizes.
      cpu_budget: cores the pipeline may use (``None``: the usable cores).
      ram_budget: bytes the pipeline may buffer (``None``: half the available memory).
      auto_vectorize: let the optimizer run ``map`` UDFs that JAX can trace as
        ``jit(vmap(fn))`` over blocks, when tracing shows the same output
        shapes and dtypes as running them element by element.
      engine: where parallel ``map``/``random_map`` work runs: ``"auto"`` (threads,
        except that ops with ``num_parallel_calls=AUTOTUNE`` measure whether their
        UDF releases the GIL and move to worker processes if it does not),
        ``"threads"`` or ``"processes"``.
      inject_prefetch: let the optimizer add a final ``prefetch(AUTOTUNE)`` (as
        tf.data's ``experimental_optimization.inject_prefetch``). It is added
        when ``optimize`` and ``autotune`` are on, the plan batches or runs
        parallel work, and it does not already end in ``prefetch`` or
        ``to_global``; ``False`` turns off that prefetch alone.
      plan: ``jdata.AUTOTUNE`` lets Cedar's planner decide, from a profile of the
        pipeline's first iterator, where to cache, where to cut the pipeline
        between ``service`` and this process and how many remote workers to use
        (zero when this process meets the consumer's demand); later iterators run
        its plan, with the same elements (see ``docs/planner.md``).
        ``jdata.PlanPins(...)`` does the same with some decisions fixed.
        ``None``: the pipeline runs as written.
      service: the ``jdata.service`` the planner may use (kept as its
        ``ServiceRef``); ``None``: everything runs here.

    As in tf.data, options set with an outer ``with_options`` override those
    set further upstream, field by field, and only for the fields passed
    explicitly: ``Options(deterministic=True)`` downstream of
    ``Options(deterministic=False)`` makes the pipeline deterministic. So two
    options are equal (and hash alike) only when they set the same fields to
    the same values: ``Options(deterministic=True) != Options()``, since only
    the first overrides an inner ``deterministic=False``.

    Options are immutable: change one with ``dataclasses.replace(options,
    deterministic=False)`` or pass new ones to ``with_options``.

    >>> import jdata
    >>> ds = jdata.range(3).with_options(jdata.Options(autotune=False))
    >>> ds.options.autotune
    False
    """

    deterministic: bool = True
    optimize: bool = True
    autotune: bool = True
    cpu_budget: int | None = None
    ram_budget: int | None = None
    engine: str = "auto"
    auto_vectorize: bool = False
    inject_prefetch: bool = True
    plan: Any = None
    service: Any = None
    if TYPE_CHECKING:  # set in __init__; not a field (it takes no part in ==, hash, repr)
        _explicit: frozenset[str] = frozenset()

    def __init__(self, *, deterministic: bool | _Unset = _UNSET,
                 optimize: bool | _Unset = _UNSET, autotune: bool | _Unset = _UNSET,
                 cpu_budget: int | None | _Unset = _UNSET,
                 ram_budget: int | None | _Unset = _UNSET, engine: str | _Unset = _UNSET,
                 auto_vectorize: bool | _Unset = _UNSET,
                 inject_prefetch: bool | _Unset = _UNSET, plan: Any = _UNSET,
                 service: Any = _UNSET) -> None:
        given = {"deterministic": deterministic, "optimize": optimize, "autotune": autotune,
                 "cpu_budget": cpu_budget, "ram_budget": ram_budget, "engine": engine,
                 "auto_vectorize": auto_vectorize, "inject_prefetch": inject_prefetch,
                 "plan": plan, "service": service}
        given = {name: value for name, value in given.items() if value is not _UNSET}
        if given.get("service") is not None:
            given["service"] = _service_ref(given["service"])
        for field in dataclasses.fields(self):
            object.__setattr__(self, field.name, given.get(field.name, field.default))
        # Which fields the user set: what an outer with_options overrides.
        object.__setattr__(self, "_explicit", frozenset(given))
        self._validate()

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise OptionsFrozenError(name, value)

    def __delattr__(self, name: str) -> NoReturn:
        raise OptionsFrozenError(name, None)

    def _key(self) -> tuple[tuple[Any, ...], frozenset[str]]:
        """What an ``Options`` merges as: every field's value and which fields were set."""
        return (tuple(getattr(self, f.name) for f in dataclasses.fields(self)), self._explicit)

    def __eq__(self, other: object) -> bool:
        if type(other) is not Options:
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _validate(self) -> None:
        for name in ("deterministic", "optimize", "autotune", "auto_vectorize",
                     "inject_prefetch"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise TypeError(f"Options.{name}={value!r} must be True or False")
        for name in ("cpu_budget", "ram_budget"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value <= 0):
                raise ValueError(f"Options.{name}={value!r} must be a positive int or None")
        if self.engine not in ENGINES:
            raise ValueError(f"Options.engine={self.engine!r} must be one of "
                             f"{', '.join(map(repr, ENGINES))}")
        if self.plan is not None and not isinstance(self.plan, PlanPins) and (
                isinstance(self.plan, bool) or self.plan != AUTOTUNE):
            raise ValueError(f"Options.plan={self.plan!r} must be None, jdata.AUTOTUNE or "
                             "jdata.PlanPins(...)")

    def plan_pins(self) -> PlanPins:
        """The planner's pins: ``Options.plan`` as a ``PlanPins`` (``AUTOTUNE``: none)."""
        return self.plan if isinstance(self.plan, PlanPins) else PlanPins()

    def merge(self, outer: Options) -> Options:
        """These options overridden by every field that ``outer`` sets explicitly."""
        settings = {name: getattr(self, name) for name in self._explicit}
        settings.update({name: getattr(outer, name) for name in outer._explicit})
        return Options(**settings)


def _service_ref(service: Any) -> Any:
    """A ``Service``'s ``ServiceRef`` (kept reachable for the planner), or a ref as it is."""
    from jdata.service import Service
    from jdata.service.client import ServiceRef

    if isinstance(service, ServiceRef):
        return service
    if not isinstance(service, Service):
        raise TypeError(f"Options.service={service!r} must be what jdata.service.start() or "
                        "connect() returned")
    from jdata import _autoplan

    _autoplan.remember(service)
    return service.ref
