"""The autocache store: a prefix's elements, written in parts, read back as one random-access
source (``jdata.service.autocache``).

Layout, under ``store_dir`` (a local directory or an fsspec URL), for the
fingerprint ``fp`` of the prefix (``fingerprint(marker.input)``, or the
whole plan's for the output)::

    {store_dir}/{fp}/part-00000/     one complete save directory (``jdata.io.saved``):
    {store_dir}/{fp}/part-00001/     ArrayRecord shards and jdata_metadata.json
    {store_dir}/{fp}/manifest.json   written last: the cache is complete

Part ``i`` holds the elements of split ``i`` in order, so position ``p`` of
the prefix is record ``p`` of the parts read in order. A part is published
as ``save`` publishes a directory (a temporary directory renamed into
place); at a URL its files are uploaded with its metadata last, so a part
whose metadata is there is complete. Writers of the same part write the
same elements, so the first one wins and the others drop their copies.

Everything read back is untrusted input (anyone with access to the store
may have changed it): the manifest and each part's metadata are checked
(``saved.read_metadata``), and, by ``load_node``, each shard's record count
against them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from jdata._extras import require
from jdata.io import _paths, codec, load_op, saved

MANIFEST = "manifest.json"
FORMAT = "jdata.autocache/1"
_OP = "autocache"


def join(*names: str) -> str:
    """``names`` joined as paths under the store directory ``names[0]`` (a path or a URL)."""
    head, *rest = names
    if _paths.is_url(head):
        return "/".join([head.rstrip("/"), *rest])
    return os.path.join(_paths.strip_file_scheme(head), *rest)


def part_path(store_dir: str, fp: str, index: int) -> str:
    """The directory of part ``index`` of the cache of ``fp``."""
    _check_name(fp)
    return join(store_dir, fp, f"part-{index:05d}")


def _check_name(fp) -> None:
    if not (isinstance(fp, str) and fp not in ("", ".", "..")
            and not any(c in fp for c in "/\\\0")):
        raise ValueError(f"{_OP}: fingerprint {str(fp)[:80]!r} is not a directory name")


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def write_part(store_dir: str, fp: str, index: int, elements) -> dict:
    """Writes ``elements`` (in order) as part ``index``; returns ``{"records", "bytes",
    "published"}`` (``published`` is False where another writer's copy was there first)."""
    if not _is_count(index):
        raise ValueError(f"{_OP}: part index={index!r} must be an int >= 0")
    final = part_path(store_dir, fp, index)
    if not _paths.is_url(store_dir):
        return _write_local(final, fp, elements)
    with tempfile.TemporaryDirectory(prefix="jdata-autocache-") as tmp:
        summary = _write_local(os.path.join(tmp, "part"), fp, elements)
        summary["published"] = _upload(os.path.join(tmp, "part"), final)
    return summary


def _write_local(final: str, fp: str, elements) -> dict:
    writer = saved.DirectoryWriter(final, fp, _OP)
    try:
        for element in elements:
            writer.write(element)
    except BaseException:
        writer.abandon()
        raise
    published = writer.publish()
    return {"records": writer.count, "bytes": writer.bytes, "published": published}


def _upload(local: str, url: str) -> bool:
    """Copies a complete local part to ``url``, its metadata last; False if one is there."""
    fs, path = _filesystem(url)
    if fs.exists(f"{path}/{saved.METADATA}"):
        return False
    names = sorted(os.listdir(local))
    names.remove(saved.METADATA)
    for name in [*names, saved.METADATA]:
        fs.put_file(os.path.join(local, name), f"{path}/{name}")
    return True


def _filesystem(url: str):
    fsspec = require("fsspec", "jdata.service's cache on a URL")

    fs, _, (path,) = fsspec.get_fs_token_paths(url)
    return fs, path


def _part_metadata(store_dir: str, fp: str, index: int) -> tuple[str, dict]:
    """Part ``index``'s path and checked metadata: written last, so the part is complete."""
    path = part_path(store_dir, fp, index)
    metadata = saved.read_metadata(path)
    if metadata is None:
        raise ValueError(f"{_OP}: part {index} of cache {fp} is missing ({path} has no "
                         f"complete part): write it with write_part first")
    if metadata.get("fingerprint") != fp:
        raise ValueError(f"{_OP}: {path} holds the elements of {metadata.get('fingerprint')!r}"
                         f", not of {fp}: the store was changed; write the part again")
    return path, metadata


def write_manifest(store_dir: str, fp: str, parts: int) -> dict:
    """Marks the cache of ``fp`` complete once parts ``0..parts-1`` all are; returns it."""
    if not _is_count(parts) or parts < 1:
        raise ValueError(f"{_OP}: parts={parts!r} must be an int >= 1")
    structure, elements, nbytes = None, 0, 0
    # Metadata only: counting each shard's records would copy a URL store's shards here.
    for index in range(parts):
        _, metadata = _part_metadata(store_dir, fp, index)
        if metadata["cardinality"]:
            if elements and metadata["structure"] != structure:
                raise ValueError(f"{_OP}: part {index} of cache {fp} has elements of "
                                 f"structure {metadata['structure']}, the parts before it "
                                 f"{structure}")
            structure = metadata["structure"]
        elements += metadata["cardinality"]
        nbytes += metadata["bytes"] if _is_count(metadata.get("bytes")) else 0
    manifest = {"format": FORMAT, "fingerprint": fp, "parts": parts, "elements": elements,
                "bytes": nbytes, "structure": structure}
    _write_atomically(join(store_dir, fp, MANIFEST), json.dumps(manifest).encode())
    return manifest


def _write_atomically(path: str, data: bytes) -> None:
    if _paths.is_url(path):  # one object: stores put it whole or not at all
        fs, inner = _filesystem(path)
        fs.pipe_file(inner, data)
        return
    fd, tmp = tempfile.mkstemp(prefix=MANIFEST + ".tmp-", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.remove(tmp)
        raise


def read_manifest(store_dir: str, fp: str) -> dict | None:
    """The checked manifest of the cache of ``fp``; None if the cache is not complete."""
    _check_name(fp)
    path = join(store_dir, fp, MANIFEST)
    try:
        with _paths.open_binary(path) as f:
            manifest = json.loads(f.read())
    except FileNotFoundError:
        return None
    except ValueError as e:  # not JSON, not UTF-8
        raise ValueError(f"{path}: not an autocache manifest ({e})") from None
    _check_manifest(manifest, fp, path)
    return manifest


def _check_manifest(manifest, fp: str, where: str) -> None:
    fix = "the store was changed after it was written; delete the cache to write it again"
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{where}: not jdata's autocache format {FORMAT!r} ({fix})")
    if manifest.get("fingerprint") != fp:
        raise ValueError(f"{where}: fingerprint {str(manifest.get('fingerprint'))[:80]!r} is "
                         f"not the cache's {fp} ({fix})")
    for name in ("parts", "elements", "bytes"):
        if not _is_count(manifest.get(name)) or (name == "parts" and manifest[name] < 1):
            raise ValueError(f"{where}: {name!r} is {str(manifest.get(name))[:80]}, not a "
                             f"count ({fix})")
    try:
        codec.leaf_count(manifest.get("structure"))
    except ValueError as e:
        raise ValueError(f"{where}: 'structure': {e} ({fix})") from None


def load_node(store_dir: str, fp: str, manifest: dict) -> load_op.LoadNode:
    """One random-access ``LoadNode`` over every part's shards, in part order."""
    _check_manifest(manifest, fp, join(store_dir, fp, MANIFEST))
    paths, lengths = [], []
    for index in range(manifest["parts"]):
        path, metadata = _part_metadata(store_dir, fp, index)
        node = load_op.node(path, metadata)  # each shard's record count checked
        if metadata["cardinality"] and metadata["structure"] != manifest["structure"]:
            raise ValueError(f"{_OP}: part {index} of cache {fp} has elements of structure "
                             f"{metadata['structure']}, the manifest says "
                             f"{manifest['structure']}: the store was changed")
        paths += node.paths
        lengths += node.lengths
    if sum(lengths) != manifest["elements"]:
        raise ValueError(f"{_OP}: the manifest of cache {fp} counts {manifest['elements']} "
                         f"elements, its parts hold {sum(lengths)}: the store was changed")
    return load_op.LoadNode(tuple(paths), tuple(lengths), manifest["structure"])


def remove(store_dir: str, fp: str) -> None:
    """Deletes the cache of ``fp`` (complete or not); nothing if there is none."""
    _check_name(fp)
    path = join(store_dir, fp)
    if not _paths.is_url(store_dir):
        shutil.rmtree(path, ignore_errors=True)
        return
    fs, inner = _filesystem(path)
    if fs.exists(inner):
        fs.rm(inner, recursive=True)
