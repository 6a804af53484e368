"""File paths for the file sources: lists, globs and fsspec URLs, checked at construction.

Local paths are used as they are. Other URLs (``gs://``, ``s3://``,
``memory://``...) go through fsspec (``pip install 'jdata-jax[io]'`` and the
filesystem's own package), so any filesystem fsspec knows works.
"""

from __future__ import annotations

import glob
import os
from typing import Iterable

from jdata._extras import require

_MAGIC = frozenset("*?[")


def is_url(path: str) -> bool:
    """True for a URL fsspec opens (``gs://``...); local paths and ``file://`` are not."""
    return "://" in path and not path.startswith("file://")


def strip_file_scheme(path: str) -> str:
    """A local path without its ``file://`` prefix, if it has one."""
    return path[len("file://"):] if path.startswith("file://") else path


def _fsspec():
    return require("fsspec", "jdata: paths with a URL scheme")


def as_path(path, op: str) -> str:
    """A path given as ``str``, ``bytes`` or ``os.PathLike`` (e.g. a ``list_files`` element)."""
    if isinstance(path, bytes):
        return path.decode()
    if isinstance(path, (str, os.PathLike)):
        return os.fspath(path)
    if hasattr(path, "item") and getattr(path, "shape", None) == ():  # a NumPy string scalar
        return as_path(path.item(), op)
    raise TypeError(f"{op}: a path must be a str, bytes or os.PathLike, not {path!r}")


def expand(paths, op: str) -> tuple[str, ...]:
    """Each path, and each file a glob pattern matches (sorted); fails on a missing one."""
    if isinstance(paths, (str, bytes, os.PathLike)) or getattr(paths, "shape", None) == ():
        paths = [paths]
    if not isinstance(paths, Iterable):
        raise TypeError(f"{op}: paths={paths!r} must be a path or a list of paths")
    out: list[str] = []
    for path in map(lambda p: as_path(p, op), paths):
        if _MAGIC & set(path):
            matches = glob_files(path)
            if not matches:
                raise FileNotFoundError(f"{op}: no file matches {path!r}")
            out.extend(matches)
        elif not exists(path):
            raise FileNotFoundError(f"{op}: no file at {path!r}")
        else:
            out.append(path)
    if not out:
        raise ValueError(f"{op}: paths is empty; pass at least one file")
    return tuple(out)


def glob_files(pattern: str) -> list[str]:
    """The files matching ``pattern``, sorted (directories left out)."""
    if not is_url(pattern):
        return sorted(p for p in glob.glob(strip_file_scheme(pattern)) if os.path.isfile(p))
    fs, _, _ = _fsspec().get_fs_token_paths(pattern)
    protocol = pattern.split("://", 1)[0]
    return sorted(f"{protocol}://{p.removeprefix(protocol + '://')}"
                  for p in fs.glob(pattern) if fs.isfile(p))


def exists(path: str) -> bool:
    if not is_url(path):
        return os.path.isfile(strip_file_scheme(path))
    fs, _, (inner,) = _fsspec().get_fs_token_paths(path)
    return fs.isfile(inner)


def open_binary(path: str):
    """A binary file object for reading (seekable)."""
    if not is_url(path):
        return open(strip_file_scheme(path), "rb")
    return _fsspec().open(path, "rb").open()


def local_path(path: str) -> str:
    """A local file with ``path``'s contents: the path itself, or a cached copy of a URL's file
    (for readers that need a real file, such as ArrayRecord's)."""
    if not is_url(path):
        return strip_file_scheme(path)
    return _fsspec().open_local(f"simplecache::{path}")


def raise_if_unreadable(path: str, error: BaseException) -> None:
    """Raises the ``OSError`` that opening ``path`` gives (missing, no permission, too many
    open files), chained to ``error``, when there is one: the environment failed, not the
    data. Returns if the file opens and reads, so ``error`` is the data's."""
    try:
        with open_binary(path) as f:
            f.read(1)
    except OSError as e:
        raise e from error
