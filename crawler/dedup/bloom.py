"""Sizing and hashing of a scalable Bloom filter (Almeida et al., 2007): pure logic, no I/O.

A filter is a list of slices. Slice ``i`` holds ``capacity * growth**i`` items at a
false-positive rate of ``p_i = error_rate * (1 - r) * r**i`` with the tightening ratio
``r`` (:data:`TIGHTENING_RATIO`). A fingerprint is a false positive if any slice takes it
for one, so the compound rate of a filter whose slices are all full is
``1 - prod(1 - p_i) <= sum(p_i) = error_rate * (1 - r) * (1 + r + r**2 + ...) <= error_rate``
for any ``0 < r < 1``. The ratio only shares that budget between the slices. A small ``r``
gives most of it, ``(1 - r) * error_rate``, to the first slice, which holds the
``BLOOM_CAPACITY`` fingerprints a crawl is sized for, so that slice needs fewer bits an
item (``-ln(p_0) / ln(2)**2``: 14.8 at ``r = 0.2`` and ``error_rate = 0.001``, against the
single-filter bound of 14.4 and 15.8 at ``r = 0.5``); in exchange each later slice costs
``ln(1 / r) / ln(2)**2`` (3.3) bits an item more than the one before. Almeida et al.
suggest ``r`` of 0.8-0.9 for filters expected to grow much; a crawl's filter is sized up
front and seldom grows, hence ``r = 0.2``. A filter keeps the slice sizes stored in Redis
when it was created, so changing ``r`` affects new filters only.

A slice is stored in Redis strings of at most :data:`PIECE_BITS` bits (see
:func:`piece_sizes`), because Redis allocates a string in the allocator's size classes
(jemalloc: four per doubling): one string of 185 MB takes 192 MiB (201 MB), while pieces
that fill a size class exactly waste at most the rounding of the last, short piece. All
the bits of one fingerprint lie in one piece (:func:`locate`), so an add touches one
string per fingerprint. ``h1 mod bits`` picks the piece, so each piece holds its share of
the items in proportion to its size, has the slice's bits an item and so its
false-positive rate; the spread of the pieces' loads (0.05 % for 4.5 million items a
piece) changes that rate by less than 1 %.

So a slice is not limited by the size of a Redis string (:data:`MAX_SLICE_BITS`): a filter
keeps adding slices until the plan's limits (:func:`plan`), far beyond any crawl. Pieces
are created when first written (see :mod:`crawler.dedup.redis_filter`), so a slice costs memory as
it fills, never all at once.

Bit positions use double hashing inside the piece, ``(h1 + j*h2) mod bits`` for
``j < hashes`` in a slice of one piece, with ``h1`` and ``h2`` taken from a digest of the
request fingerprint. Every value stays below 2**53, so the Redis Lua scripts
(:mod:`crawler.dedup.redis_filter`, whose numbers are doubles) compute exactly the positions
:func:`positions` computes here.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from crawler.config.readers import SettingError

TIGHTENING_RATIO = 0.2  # slice i gets error_rate * (1 - r) * r**i of the error budget
# Bits of one Redis string (512 MiB): the most a piece may have, and a whole slice of a
# filter made before pieces. A slice of pieces may be much larger (SLICE_BITS_LIMIT).
MAX_SLICE_BITS = 2**32
# Bits of one slice: h1 (below 2**48) picks the piece, so a slice of more bits would leave
# its end unused; every position stays exact in the Lua scripts' doubles (below 2**53).
SLICE_BITS_LIMIT = 2**48
# Bits of one Redis string of a slice: 8 MiB less 16 bytes, so that the string with its
# sds header (9 bytes) and terminator fills jemalloc's 8 MiB size class exactly.
PIECE_BITS = 2**26 - 128
MAX_SLICES = 64  # a filter never plans more slices than this
DIGEST_SIZE = 12  # bytes of a fingerprint digest: two 48-bit halves
_HALF = DIGEST_SIZE // 2


@dataclass(frozen=True)
class SliceSpec:
    """One slice of a scalable Bloom filter."""

    capacity: int  # items the slice holds at its error rate
    error_rate: float  # false-positive rate of the slice when it holds *capacity* items
    bits: int
    hashes: int

    @property
    def nbytes(self) -> int:
        """Bytes of the slice's bit array."""
        return (self.bits + 7) // 8


def piece_sizes(bits: int, piece_bits: int = PIECE_BITS) -> list[int]:
    """The sizes in bits of the Redis strings that hold a slice of *bits* bits: full
    pieces of *piece_bits* bits and a shorter last one."""
    if bits < 1 or piece_bits < 1:
        raise ValueError(f"bits and piece_bits must be >= 1, got {bits} and {piece_bits}")
    full, rest = divmod(bits, piece_bits)
    return [piece_bits] * full + ([rest] if rest else [])


def piece_key(slice_key: str, piece: int) -> str:
    """The Redis key of *piece* of the slice whose first piece is *slice_key*
    (``<key>:s<i>``; later pieces are ``<key>:s<i>:<piece>``)."""
    return slice_key if piece == 0 else f"{slice_key}:{piece}"


def slice_spec(index: int, *, capacity: int, error_rate: float, growth: int) -> SliceSpec:
    """The size of slice *index* (0 = first) of a filter with these parameters.

    The slice holds ``n = capacity * growth**index`` items at ``p = error_rate * (1 - r)
    * r**index``. ``hashes`` is whichever of the two whole numbers next to the optimum
    ``log2(1 / p)`` needs fewer bits, and ``bits`` the fewest with which the slice's
    false-positive rate when full, ``(1 - exp(-hashes * n / bits))**hashes``, is at most
    ``p``. That is about the textbook ``-n ln p / (ln 2)**2`` (0.03 % more at
    ``p = 0.08 %``) but never above ``p``: rounding the hashes up, as the textbook does,
    exceeds it by 1 % at ``p = 0.08 %``, and takes a hash more (11 instead of 10).
    """
    if index < 0:
        raise ValueError(f"slice index must be >= 0, got {index}")
    items = capacity * growth**index
    rate = error_rate * (1 - TIGHTENING_RATIO) * TIGHTENING_RATIO**index
    optimum = math.log2(1 / rate)
    bits, hashes = min(
        (math.ceil(-k * items / math.log1p(-(rate ** (1 / k)))), k)
        for k in {max(1, math.floor(optimum)), max(1, math.ceil(optimum))}
    )
    return SliceSpec(capacity=items, error_rate=rate, bits=bits, hashes=hashes)


def plan(*, capacity: int, error_rate: float, growth: int) -> list[SliceSpec]:
    """Every slice the filter may ever add: at most :data:`MAX_SLICES`, each of at most
    :data:`SLICE_BITS_LIMIT` bits (a slice is split into pieces of at most
    :data:`MAX_SLICE_BITS`). With the defaults that is 19 slices and 5 * 10**12
    fingerprints (``BLOOM_GROWTH = 1``: 64 slices of ``BLOOM_CAPACITY``); a filter that
    fills its last slice stops filtering (see :mod:`crawler.dedup.redis_filter`)."""
    specs: list[SliceSpec] = []
    for index in range(MAX_SLICES):
        spec = slice_spec(index, capacity=capacity, error_rate=error_rate, growth=growth)
        if spec.bits > SLICE_BITS_LIMIT:
            break
        specs.append(spec)
    return specs


def compound_error_rate(specs: list[SliceSpec]) -> float:
    """Upper bound of the false-positive rate of a filter whose slices are all full."""
    return 1 - math.prod(1 - spec.error_rate for spec in specs)


def validate(
    *,
    capacity: int,
    error_rate: float,
    growth: int = 2,
    prefix: str = "BLOOM",
    max_bits: int | None = SLICE_BITS_LIMIT,
) -> None:
    """Raise :class:`SettingError` naming ``<prefix>_CAPACITY``, ``<prefix>_ERROR_RATE``
    or ``<prefix>_GROWTH`` if a filter cannot be built from these values, or if its
    first slice would need more than *max_bits* bits (``None``: no limit)."""
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise SettingError(f"{prefix}_CAPACITY", f"expected an integer >= 1, got {capacity!r}")
    if not isinstance(error_rate, (int, float)) or not 0 < error_rate < 1:
        raise SettingError(
            f"{prefix}_ERROR_RATE", f"expected a number > 0 and < 1, got {error_rate!r}"
        )
    if isinstance(growth, bool) or not isinstance(growth, int) or growth < 1:
        raise SettingError(f"{prefix}_GROWTH", f"expected an integer >= 1, got {growth!r}")
    if max_bits is None:
        return
    first = slice_spec(0, capacity=capacity, error_rate=error_rate, growth=growth)
    if first.bits > max_bits:
        raise SettingError(
            f"{prefix}_CAPACITY",
            f"{capacity} items at {prefix}_ERROR_RATE {error_rate} need {first.bits} bits "
            f"in the first slice, more than a slice may have ({max_bits}); "
            f"lower {prefix}_CAPACITY and let the filter grow instead",
        )


def digest(fingerprint: bytes) -> bytes:
    """The :data:`DIGEST_SIZE`-byte digest of *fingerprint* that the Redis script reads.

    Re-hashing makes any fingerprinter's output uniform, not only Scrapy's SHA1."""
    return hashlib.blake2b(fingerprint, digest_size=DIGEST_SIZE).digest()


def hash_pair(fingerprint: bytes) -> tuple[int, int]:
    """The double-hashing pair ``(h1, h2)`` of *fingerprint*: two integers below 2**48,
    ``h2`` odd (so never zero)."""
    value = digest(fingerprint)
    return (
        int.from_bytes(value[:_HALF], "big"),
        int.from_bytes(value[_HALF:], "big") | 1,
    )


def locate(
    h1: int, h2: int, *, bits: int, piece_bits: int | None = None
) -> tuple[int, int, int, int]:
    """Where a fingerprint's bits lie in a slice of *bits* bits stored in pieces of
    *piece_bits* bits (``None``: one piece): ``(low, size, first, step)``, the first bit and
    the size of the piece that holds all of them, and the first position and the step of
    the double hashing inside that piece. ``h1 mod bits`` picks the piece, so each piece
    gets a share of the fingerprints in proportion to its size."""
    per = bits if piece_bits is None else min(piece_bits, bits)
    first = h1 % bits
    low = first // per * per
    size = min(per, bits - low)
    return low, size, first - low, h2 % size or 1


def positions(
    h1: int, h2: int, *, bits: int, hashes: int, piece_bits: int | None = None
) -> list[int]:
    """The bit positions ``low + (first + j*step) mod size``, ``j < hashes`` (see
    :func:`locate`), computed the way the Lua scripts compute them (no value above
    ``2 * size``). In a slice of one piece that is ``(h1 + j*h2) mod bits``."""
    low, size, pos, step = locate(h1, h2, bits=bits, piece_bits=piece_bits)
    result = []
    for _ in range(hashes):
        result.append(low + pos)
        pos += step
        if pos >= size:
            pos -= size
    return result
