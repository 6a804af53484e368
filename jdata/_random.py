"""Explicit-key randomness computed in NumPy.

Every random choice in jdata is a pure function of the user's key, the op
(a fixed salt per kind of op), the epoch and the element's position. Keys are
derived with a NumPy implementation of Threefry-2x32, bit-compatible with
``jax.random.fold_in`` on JAX's default PRNG, so no eager JAX call runs per
element:

    element_key == key_data(fold_in(fold_in(fold_in(key, salt), epoch), position))

for positions below 2**32 (larger positions fold their high word first).
"""

from __future__ import annotations

import zlib

import numpy as np

_KEY_HINT = "pass a JAX PRNG key, e.g. jax.random.key(0), or its uint32[2] key data"
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)
_U32 = np.uint32
_MASK64 = (1 << 64) - 1


def as_key_data(key, arg: str = "key") -> np.ndarray:
    """Validates a user key and returns its ``uint32[2]`` data as NumPy."""
    if isinstance(key, (bool, int, np.integer)):
        raise TypeError(
            f"{arg}={key!r}: jdata takes explicit JAX PRNG keys, not integer seeds; "
            f"pass {arg}=jax.random.key({key!r}) instead")
    if key is None:
        raise TypeError(f"{arg}=None: {_KEY_HINT}")
    data = _typed_key_data(key)
    try:
        data = np.asarray(data)
    except Exception as e:  # an arbitrary object
        raise TypeError(f"{arg}={key!r} is not a PRNG key; {_KEY_HINT}") from e
    if data.shape != (2,) or data.dtype.kind not in "iu":
        raise TypeError(
            f"{arg} has shape {data.shape} and dtype {data.dtype}; {_KEY_HINT} "
            "(the default threefry2x32 implementation; a batch of keys is not accepted)")
    return data.astype(np.uint32)


def refuse_seed(seed, key, op: str, fix: str) -> None:
    """tf.data's ``seed=``: a ``TypeError`` showing jdata's spelling (``fix`` may
    hold ``{seed}``), never an "unexpected keyword" or a silent choice."""
    if seed is None:
        return
    also = f"; key={key!r} is given too, so drop seed=" if key is not None else ""
    raise TypeError(
        f"{op}: seed={seed!r} is tf.data's argument; jdata takes an explicit JAX PRNG key "
        f"instead: {fix.format(seed=seed)}{also}")


def _typed_key_data(key):
    dtype = getattr(key, "dtype", None)
    if dtype is None or isinstance(dtype, np.dtype):
        return key
    import jax  # only typed JAX keys get here, so jax is already imported

    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key)
    return key


def salt(op_name: str) -> int:
    """The fixed 32-bit salt of a kind of op, e.g. ``salt("random_map")``."""
    return zlib.crc32(f"jdata.{op_name}".encode())


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << _U32(r)) | (x >> _U32(32 - r))


def threefry2x32(k0, k1, x0, x1) -> tuple[np.ndarray, np.ndarray]:
    """Threefry-2x32 with 20 rounds over uint32 arrays (JAX's default PRNG)."""
    k0, k1 = _U32(k0), _U32(k1)
    ks = (k0, k1, k0 ^ k1 ^ _PARITY)
    with np.errstate(over="ignore"):
        x0 = np.asarray(x0, dtype=np.uint32) + ks[0]
        x1 = np.asarray(x1, dtype=np.uint32) + ks[1]
        for block in range(5):
            for r in _ROTATIONS[block % 2]:
                x0 = x0 + x1
                x1 = _rotl(x1, r) ^ x0
            x0 = x0 + ks[(block + 1) % 3]
            x1 = x1 + ks[(block + 2) % 3] + _U32(block + 1)
    return x0, x1


def fold_in(key: np.ndarray, data: int) -> np.ndarray:
    """``jax.random.fold_in`` for one key and a uint32 ``data``."""
    y0, y1 = threefry2x32(key[0], key[1], np.zeros(1, np.uint32),
                          np.array([data & 0xFFFFFFFF], np.uint32))
    return np.array([y0[0], y1[0]], np.uint32)


def op_epoch_key(key: np.ndarray, op_salt: int, epoch: int) -> np.ndarray:
    """The key of one op in one epoch, from which element keys are folded."""
    return fold_in(fold_in(key, op_salt), epoch)


def element_keys(epoch_key: np.ndarray, start: int, count: int) -> np.ndarray:
    """Keys of positions ``start .. start+count-1`` as a ``(count, 2)`` uint32 array."""
    positions = np.arange(start, start + count, dtype=np.uint64)
    high = positions >> np.uint64(32)
    out = np.empty((count, 2), np.uint32)
    for hi in np.unique(high):
        sel = high == hi
        k = fold_in(epoch_key, int(hi)) if hi else epoch_key
        y0, y1 = threefry2x32(k[0], k[1], np.zeros(int(sel.sum()), np.uint32),
                              positions[sel].astype(np.uint32))
        out[sel, 0], out[sel, 1] = y0, y1
    return out


def mix_epoch(parent: int, op_salt: int, n: int) -> int:
    """A 32-bit epoch for a nested iteration (the n-th of an op under ``parent``)."""
    k = fold_in(fold_in(np.array([parent & 0xFFFFFFFF, op_salt], np.uint32), n >> 32), n)
    return int(k[0])


def repeat_epoch(parent: int, repetition: int) -> int:
    """The epoch of a repeat's ``repetition``-th pass.

    At top level this is just the repetition number, so ``ds.repeat(1)`` and
    ``ds`` see the same randomness and epoch ``e`` of a training loop is epoch
    ``e`` of every random op under the repeat.
    """
    if parent == 0:
        return repetition
    return mix_epoch(parent, salt("repeat"), repetition)


class KeyBlocks:
    """Per-position keys of one op in one epoch, derived in vectorized blocks.

    ``key`` is one key's data (``uint32[2]``), or the keys of several random
    ops stacked (``uint32[n, 2]``, an optimizer fusion of ``n`` random maps):
    a position's keys are then an ``(n, 2)`` array whose row ``i`` is what
    key ``i`` alone gives that position, so each fused op keeps its stream.

    Safe to share between threads: the current block is one ``(start, keys)``
    tuple, replaced whole, so a reader sees a consistent block (at worst two
    threads derive the same block twice).
    """

    _BLOCK = 1024

    def __init__(self, key: np.ndarray, op_salt: int, epoch: int):
        self._shape = np.shape(key)
        self._epoch_keys = [op_epoch_key(k, op_salt, epoch)
                            for k in np.asarray(key).reshape(-1, 2)]
        self._block: tuple[int, np.ndarray] = (0, np.empty((0, *self._shape), np.uint32))

    def __getitem__(self, position: int) -> np.ndarray:
        start, keys = self._block
        offset = position - start
        if not 0 <= offset < len(keys):
            start = position - position % self._BLOCK
            streams = [element_keys(k, start, self._BLOCK) for k in self._epoch_keys]
            keys = np.stack(streams, axis=1).reshape(self._BLOCK, *self._shape)
            self._block = (start, keys)
            offset = position - start
        # A copy: the UDF owns its key and may modify it without touching its neighbours'.
        return keys[offset].copy()


class UniformBlocks:
    """Per-position floats in [0, 1) of one op in one epoch, derived in vectorized blocks.

    They use all 53 bits of a double (from both words of the position's
    key), so ``int(u * n)`` reaches every slot of a buffer of
    any practical size without bias.
    """

    _BLOCK = 1024

    def __init__(self, key: np.ndarray, op_salt: int, epoch: int):
        self._epoch_key = op_epoch_key(key, op_salt, epoch)
        self._start = -1
        self._values: list = []

    def __getitem__(self, position: int) -> float:
        offset = position - self._start
        if not 0 <= offset < len(self._values):
            self._start = position - position % self._BLOCK
            keys = element_keys(self._epoch_key, self._start, self._BLOCK).astype(np.uint64)
            bits = ((keys[:, 0] >> np.uint64(5)) << np.uint64(26)) | (keys[:, 1] >> np.uint64(6))
            self._values = (bits.astype(np.float64) * (1.0 / (1 << 53))).tolist()
            offset = position - self._start
        return self._values[offset]


def _mix64(x: np.ndarray) -> np.ndarray:
    # splitmix64's finalizer: a fast, well-distributed 64-bit bijection.
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


class Permutation:
    """A pseudo-random bijection of ``range(n)`` computable index by index.

    A balanced Feistel network over the smallest even number of bits that
    covers ``n``, with cycle walking back into range: O(1) memory and state
    for any ``n``, so a full shuffle of a billion records needs no index array.
    """

    _ROUNDS = 6

    def __init__(self, n: int, key: np.ndarray, op_salt: int, epoch: int):
        if n < 0:
            raise ValueError(f"n={n} must be >= 0")
        self.n = n
        half = max(1, ((max(n - 1, 1)).bit_length() + 1) // 2)
        self._half_bits = np.uint64(half)
        self._half_mask = np.uint64((1 << half) - 1)
        k = op_epoch_key(key, op_salt, epoch)
        y0, y1 = threefry2x32(k[0], k[1], np.zeros(self._ROUNDS, np.uint32),
                              np.arange(self._ROUNDS, dtype=np.uint32))
        self._round_keys = (y0.astype(np.uint64) << np.uint64(32)) | y1.astype(np.uint64)

    def _feistel(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self._half_bits, x & self._half_mask
        for rk in self._round_keys:
            left, right = right, left ^ (_mix64(right ^ rk) & self._half_mask)
        return (left << self._half_bits) | right

    def __call__(self, positions) -> np.ndarray:
        """Maps positions (an int array) to their permuted indices."""
        x = self._feistel(np.asarray(positions, dtype=np.uint64))
        out_of_range = x >= np.uint64(self.n)
        while out_of_range.any():
            x[out_of_range] = self._feistel(x[out_of_range])
            out_of_range = x >= np.uint64(self.n)
        return x.astype(np.int64)
