"""The static optimizer: rewrite rules applied to a plan before it runs.

Each rule is a module with one ``Rule`` whose ``apply(plan) -> plan`` builds
new nodes (``dataclasses.replace``) and never mutates any; a rule that finds
nothing to do returns the plan it was given. ``optimize`` runs the rules in
order and records which fired, with the plan before and after, for
``Dataset.explain()``. A ``Dataset`` optimizes its plan once and keeps the
result, so every iterator of a dataset runs the same optimized nodes (a
``cache`` shares its elements between the iterators of one node).

``Options(optimize=False)`` skips every rule.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from jdata._plan import Node
from jdata.optimize.rewrite import Rewritten
from jdata.optimize import (auto_vectorize, filter_fusion, image_chain_fusion, image_fusion,
                            inject_prefetch, map_batch_fusion, map_filter_fusion, map_fusion,
                            noop_elimination, pointwise_after_batch, pushdown,
                            random_map_fusion, reorder, repeat_by_index)


class Rule(Protocol):
    """A plan rewrite. ``name`` is what ``explain()`` reports when it fires.

    ``apply`` returns the new plan, or a ``Rewritten`` with notes for
    ``explain()`` (e.g. what the rule measured to decide).
    """

    name: str

    def apply(self, plan: Node, options) -> Node | Rewritten: ...


# In order: removals first, so fusions see adjacent ops; the prefetch last.
RULES: tuple[Rule, ...] = (
    noop_elimination.NoopEliminationRule(),
    pushdown.PushdownRule(),
    repeat_by_index.RepeatByIndexRule(),
    reorder.ReorderRule(),  # before fusion, which would hide the declarations
    image_fusion.DecodeResizeFusionRule(),  # after reorder, which moves crops next to it
    pointwise_after_batch.PointwiseAfterBatchRule(),  # before map_fusion hides pointwise maps
    image_chain_fusion.ImageChainFusionRule(),  # after both: they keep their own chains
    auto_vectorize.AutoVectorizeRule(),  # before fusion: vectorized maps fuse together
    map_fusion.MapFusionRule(),
    filter_fusion.FilterFusionRule(),
    map_filter_fusion.MapFilterFusionRule(),  # after both: the fused map and filter fuse
    map_batch_fusion.MapBatchFusionRule(),
    random_map_fusion.RandomMapFusionRule(),  # after both: it takes the maps they leave
    inject_prefetch.InjectPrefetchRule(),
)


@dataclasses.dataclass(frozen=True)
class Fired:
    """One rule that changed the plan."""

    rule: str
    before: Node
    after: Node
    notes: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Optimized:
    plan: Node
    fired: tuple[Fired, ...]


def optimize(plan: Node, options) -> Optimized:
    """The plan after every rule (none if ``options.optimize`` is false)."""
    if not options.optimize:
        return Optimized(plan, ())
    fired, current = [], plan
    for rule in RULES:
        rewritten, notes = rule.apply(current, options), ()
        if isinstance(rewritten, Rewritten):
            rewritten, notes = rewritten.plan, rewritten.notes
        if rewritten is not current:
            fired.append(Fired(rule.name, current, rewritten, notes))
            current = rewritten
    return Optimized(current, tuple(fired))
