"""``to_global``'s sharding argument: shardings and ``None`` (host leaves) matched to the
elements, and the batch sizes a sharding can split.

The argument is one ``jax.sharding.Sharding`` for every leaf, or a pytree
prefix of the element whose leaves are shardings or ``None``; ``None`` keeps
the leaves below it on the host as NumPy (ids, text). ``jax.tree`` reads
``None`` as an empty subtree, so every walk here passes ``is_leaf``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax

_OP = "to_global"
_EXAMPLE = ("e.g. NamedSharding(Mesh(jax.devices(), ('data',)), PartitionSpec('data')), or "
            "{'image': sharding, 'id': None} to keep 'id' on the host")


def is_leaf(x) -> bool:
    """A leaf of the sharding argument: a sharding, or ``None`` for a host leaf."""
    return x is None or isinstance(x, jax.sharding.Sharding)


def check_argument(sharding) -> None:
    """``TypeError`` unless ``sharding`` is a sharding or a pytree of shardings and ``None``."""
    if sharding is None:
        raise TypeError(
            f"{_OP}: sharding=None; pass a jax.sharding.Sharding ({_EXAMPLE}). None keeps "
            "a leaf on the host only inside a pytree of shardings; a dataset with no leaf "
            "for the devices needs no to_global")
    leaves = jax.tree.leaves(sharding, is_leaf=is_leaf)
    if not leaves or not all(is_leaf(s) for s in leaves):
        raise TypeError(
            f"{_OP}: sharding={sharding!r} must be a jax.sharding.Sharding, or a pytree "
            f"matching the elements whose leaves are shardings or None ({_EXAMPLE})")


def per_leaf(sharding, element) -> list:
    """The sharding (or ``None``) of each leaf of ``element``, in ``jax.tree.leaves`` order.

    ``element`` is a batch or an element spec. A structure that ``sharding``
    is not a prefix of is a ``ValueError`` that shows both.
    """
    if isinstance(sharding, jax.sharding.Sharding):
        return [sharding] * len(jax.tree.leaves(element))
    try:
        full = jax.tree.broadcast(sharding, element, is_leaf=is_leaf)
    except ValueError:
        raise ValueError(
            f"{_OP}: the sharding pytree does not match the elements: it must have their "
            "structure, or a prefix of it (one sharding or None for a whole subtree).\n"
            f"  sharding: {jax.tree.structure(sharding, is_leaf=is_leaf)}, leaves at "
            f"{_paths(sharding)}\n"
            f"  element:  {jax.tree.structure(element)}, leaves at {_paths(element)}\n"
            f"  {_difference(sharding, element)}") from None
    return jax.tree.leaves(full, is_leaf=is_leaf)


def _difference(prefix, element, path=()) -> str:
    """Where ``prefix`` first stops being a prefix of ``element``, in words.

    (jax's own account reads ``None`` as an empty subtree, so it points at the
    first ``None`` instead.)
    """
    if is_leaf(prefix):
        return ""
    prefix_node, prefix_children = _children(prefix)
    element_node, element_children = _children(element)
    if prefix_node != element_node:
        return (f"at {jax.tree_util.keystr(path) or 'the top'} the sharding has "
                f"{_node(prefix, prefix_children)}, the element "
                f"{_node(element, element_children)}")
    for (key, p), (_, e) in zip(prefix_children, element_children):
        found = _difference(p, e, path + key)
        if found:
            return found
    return ""


def _children(node) -> tuple:
    """``node``'s one-level structure and its (key path, child) pairs."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)
    return treedef, flat


def _node(node, children) -> str:
    if len(children) == 1 and not children[0][0]:
        return "a leaf"
    keys = ", ".join(jax.tree_util.keystr(key) for key, _ in children)
    return f"a {type(node).__name__} with {keys or 'no children'}"


def where(path) -> str:
    """Names the leaf at ``path`` in errors."""
    return f"the leaf at {jax.tree_util.keystr(path)}" if path else "the element"


def _paths(tree) -> str:
    flat, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_leaf)
    return ", ".join(jax.tree_util.keystr(path) or "(the root)" for path, _ in flat)


class Split(NamedTuple):
    """How a sharding splits an array's dimension 0 (its batch)."""

    shards: int  # distinct row blocks over all processes' devices
    local: int  # of them on this process's devices: what a per-host batch must be a multiple of

    @property
    def hosts(self) -> int:
        """How many processes' batches make one global batch."""
        return self.shards // self.local


def batch_split(sharding, rank: int | None) -> Split | None:
    """How ``sharding`` splits dimension 0 of a rank-``rank`` array (None: unknown).

    Counted on a probe shape whose sizes every shard count divides (each is
    at most the number of devices and divides it), as
    ``make_array_from_process_local_data`` will place the per-host batch.
    """
    if rank is None:  # build time without an element spec: the rank the sharding names
        rank = max(1, len(getattr(sharding, "spec", ())))
    n = len(sharding.device_set)
    try:
        every = sharding.devices_indices_map((n,) * rank)
        local = sharding.addressable_devices_indices_map((n,) * rank)
    except Exception:  # a sharding of another rank: jax says so when the batch is placed
        return None
    starts = [{index[0].start or 0 for index in m.values() if index} for m in (every, local)]
    if not starts[1]:
        return None  # no device of this process: jax's own error names it
    return Split(len(starts[0]), len(starts[1]))


def check_rows(rows: int, split: Split, where: str, sharding, *, full: int | None = None
               ) -> None:
    """``ValueError`` unless a per-host batch of ``rows`` splits evenly over ``split``.

    ``where`` names the leaf ("the leaf at ['x']"); ``full`` is the rows of
    the other batches where this one is a short remainder (``batch`` without
    ``drop_remainder``).
    """
    need = split.local
    if rows % need == 0:
        return
    if split.hosts == 1:
        rule = (f"its sharding {describe(sharding)} splits dimension 0 into {split.shards} "
                f"blocks, so a batch needs a multiple of {need} rows")
    else:
        rule = (f"its sharding {describe(sharding)} splits dimension 0 into {split.shards} "
                f"blocks, {need} of them on this process's devices, so each host's batch "
                f"needs a multiple of {need} rows (the global batch is {split.hosts} hosts' "
                f"batches: a multiple of {split.shards})")
    if full is not None and full % need == 0:
        kind = f"a short batch of {rows} rows (the others have {full})"
        fix = ("drop it with batch(..., drop_remainder=True), or give the dataset a multiple "
               f"of {full} elements")
    else:
        kind = f"a batch of {rows} rows"
        lower = rows - rows % need
        sizes = f"{lower} or {lower + need}" if lower else f"{need}"
        fix = (f"use a per-host batch size that is a multiple of {need} (e.g. {sizes}), with "
               "batch(..., drop_remainder=True) so that a short last batch is dropped")
    raise ValueError(f"{_OP}: {where} has {kind}, but {rule}; {fix}")


def describe(sharding) -> str:
    """A short, readable form of a sharding (or ``None``) for plans and errors."""
    if sharding is None:
        return "None"
    if isinstance(sharding, jax.sharding.NamedSharding):
        return f"NamedSharding({dict(sharding.mesh.shape)}, {sharding.spec})"
    text = repr(sharding)
    return text if len(text) <= 60 else text[:57] + "..."


def describe_tree(sharding) -> str:
    """``describe`` for the sharding argument: one sharding, or a pytree of them."""
    if is_leaf(sharding):
        return describe(sharding)
    return repr(jax.tree.map(lambda s: _Text(describe(s)), sharding, is_leaf=is_leaf))


class _Text(str):
    def __repr__(self) -> str:
        return str(self)
