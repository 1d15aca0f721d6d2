"""Sizing, hashing and validation of the scalable Bloom filter (pure, no services)."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from crawler.config.readers import SettingError
from crawler.dedup.bloom import (
    MAX_SLICE_BITS,
    MAX_SLICES,
    PIECE_BITS,
    SLICE_BITS_LIMIT,
    compound_error_rate,
    hash_pair,
    locate,
    piece_key,
    piece_sizes,
    plan,
    positions,
    slice_spec,
    validate,
)

LN2_SQUARED = math.log(2) ** 2


@pytest.mark.parametrize(
    ("capacity", "error_rate", "growth"),
    [(1000, 0.01, 2), (10_000_000, 0.001, 2), (100_000, 0.0001, 4), (5, 0.1, 1)],
)
@pytest.mark.parametrize("index", [0, 1, 3])
def test_slice_spec_sizes_each_slice_for_its_share(
    capacity: int, error_rate: float, growth: int, index: int
) -> None:
    spec = slice_spec(index, capacity=capacity, error_rate=error_rate, growth=growth)
    n = capacity * growth**index
    p = error_rate * 0.8 * 0.2**index  # (1 - r) * r**i with r = 0.2
    assert spec.capacity == n
    assert spec.error_rate == pytest.approx(p)
    optimum = math.log2(1 / p)
    assert spec.hashes in {max(1, math.floor(optimum)), math.ceil(optimum)}
    k, m = spec.hashes, spec.bits
    # the fewest bits that keep the rate of a full slice at or below p with k hashes
    assert (1 - math.exp(-k * n / m)) ** k <= p * (1 + 1e-9)
    assert (1 - math.exp(-k * n / (m - 1))) ** k > p * (1 - 1e-9)
    textbook = math.ceil(-n * math.log(p) / LN2_SQUARED)
    assert textbook <= m <= textbook * 1.006


def test_known_sizes() -> None:
    # 1M items at 1 %: the textbook filter has 9,585,059 bits and 7 hashes; with 7 hashes
    # the rate is 1.0034 %, so the slice takes 0.09 % more bits to stay at 1 %.
    first = slice_spec(0, capacity=1_000_000, error_rate=0.0125, growth=2)
    assert first.error_rate == pytest.approx(0.01)
    assert first.hashes == 7
    assert 9_585_059 < first.bits < 9_585_059 * 1.001
    # p = 0.1 % for the whole filter: the first slice gets 0.08 %, 10 hashes (the textbook
    # rounds 10.3 up to 11) and 14.85 bits (1.856 bytes) an item, against 14.38 bits for one
    # plain filter at 0.1 %.
    spec = slice_spec(0, capacity=10_000_000, error_rate=0.001, growth=2)
    assert spec.error_rate == pytest.approx(0.0008)
    assert spec.hashes == 10
    assert spec.bits / spec.capacity == pytest.approx(14.85, abs=0.01)
    assert spec.nbytes / spec.capacity < 1.86
    assert spec.nbytes == math.ceil(spec.bits / 8)


def test_pieces() -> None:
    assert piece_sizes(10, 4) == [4, 4, 2]
    assert piece_sizes(8, 4) == [4, 4]
    assert piece_sizes(3, PIECE_BITS) == [3]
    sizes = piece_sizes(1_484_572_856)  # the first slice at capacity 1e8
    assert sum(sizes) == 1_484_572_856 and len(sizes) == 23
    # a full piece and its 9-byte sds header and terminator fill jemalloc's 8 MiB class
    assert PIECE_BITS // 8 + 9 + 1 <= 8 * 2**20
    assert piece_key("{c}:bloom:s1", 0) == "{c}:bloom:s1"
    assert piece_key("{c}:bloom:s1", 3) == "{c}:bloom:s1:3"
    with pytest.raises(ValueError):
        piece_sizes(0, 4)


@pytest.mark.parametrize(
    ("capacity", "error_rate", "growth"),
    [(1000, 0.01, 2), (10_000_000, 0.001, 2), (1000, 0.001, 1), (100, 0.2, 4)],
)
def test_compound_error_stays_under_the_target(
    capacity: int, error_rate: float, growth: int
) -> None:
    specs = plan(capacity=capacity, error_rate=error_rate, growth=growth)
    assert 1 <= len(specs) <= MAX_SLICES
    assert all(spec.bits <= SLICE_BITS_LIMIT for spec in specs)
    # The shares sum to error_rate * (1 - r**slices): error_rate itself in floating point
    # once r**slices < 1e-16 (32 slices at r = 0.2); the compound rate stays below it.
    assert sum(spec.error_rate for spec in specs) <= error_rate * (1 + 1e-12)
    assert compound_error_rate(specs) < error_rate
    for spec in specs:
        # The real rate of a full slice is at most its share.
        real = (1 - math.exp(-spec.hashes * spec.capacity / spec.bits)) ** spec.hashes
        assert real <= spec.error_rate * (1 + 1e-9)


def test_plan_stops_at_the_slice_limit() -> None:
    # A slice is split into pieces, so the limit is the hash's range, not a Redis string.
    specs = plan(capacity=10_000_000, error_rate=0.001, growth=2)
    assert len(specs) == 19
    assert specs[-1].bits <= SLICE_BITS_LIMIT
    assert specs[-1].bits > MAX_SLICE_BITS  # far past the old cap of one string
    after = slice_spec(len(specs), capacity=10_000_000, error_rate=0.001, growth=2)
    assert after.bits > SLICE_BITS_LIMIT
    assert [s.capacity for s in specs[:3]] == [10_000_000, 20_000_000, 40_000_000]


def test_hash_pair_is_deterministic_and_in_range() -> None:
    fp = bytes.fromhex("0123456789abcdef0123456789abcdef01234567")
    assert hash_pair(fp) == hash_pair(bytes(fp))
    h1, h2 = hash_pair(fp)
    assert 0 <= h1 < 2**48 and 0 < h2 < 2**48
    assert h2 % 2 == 1
    assert hash_pair(fp) != hash_pair(fp[:-1] + b"\x00")


def test_hash_pair_spreads() -> None:
    rng = random.Random(7)
    pairs = [hash_pair(rng.randbytes(20)) for _ in range(20_000)]
    assert len(set(pairs)) == len(pairs)
    # 16 buckets of h1 and of h2: each should get ~1250; chi-square with 15 degrees of
    # freedom stays under 40 unless something is badly skewed.
    for values in ([h1 for h1, _ in pairs], [h2 for _, h2 in pairs]):
        buckets = Counter(v >> 44 for v in values)
        expected = len(values) / 16
        chi2 = sum((buckets[b] - expected) ** 2 / expected for b in range(16))
        assert chi2 < 40
    # Similar fingerprints (Scrapy fingerprints differ anywhere) get unrelated pairs.
    a, b = hash_pair(b"\x00" * 20), hash_pair(b"\x00" * 19 + b"\x01")
    assert bin(a[0] ^ b[0]).count("1") > 8


def test_positions_are_the_double_hashing_sequence() -> None:
    rng = random.Random(3)
    for bits in (7, 1000, 2**31 + 11, MAX_SLICE_BITS):
        h1, h2 = hash_pair(rng.randbytes(20))
        got = positions(h1, h2, bits=bits, hashes=20)
        assert got == [(h1 + j * h2) % bits for j in range(20)]
        assert got == positions(h1, h2, bits=bits, hashes=20, piece_bits=bits * 2)
        assert all(0 <= p < bits for p in got)
    assert positions(5, 10, bits=10, hashes=3) == [5, 6, 7]  # step 0 becomes 1


def test_positions_in_pieces() -> None:
    rng = random.Random(4)
    bits, per = 1_000_003, 100_000
    pieces: Counter[int] = Counter()
    for _ in range(20_000):
        h1, h2 = hash_pair(rng.randbytes(20))
        low, size, first, step = locate(h1, h2, bits=bits, piece_bits=per)
        assert low == h1 % bits // per * per and size == min(per, bits - low)
        got = positions(h1, h2, bits=bits, hashes=10, piece_bits=per)
        assert got == [low + (first + j * step) % size for j in range(10)]
        assert all(low <= p < low + size for p in got)  # all in one piece
        pieces[low // per] += 1
    # each piece gets fingerprints in proportion to its size (the last holds 3 bits)
    assert len(pieces) == 10 or (len(pieces) == 11 and pieces[10] <= 2)
    assert all(abs(pieces[j] - 2000) < 250 for j in range(10))


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"capacity": 0}, "BLOOM_CAPACITY"),
        ({"capacity": 1.5}, "BLOOM_CAPACITY"),
        ({"error_rate": 0.0}, "BLOOM_ERROR_RATE"),
        ({"error_rate": 1.0}, "BLOOM_ERROR_RATE"),
        ({"growth": 0}, "BLOOM_GROWTH"),
        ({"capacity": 2 * 10**13}, "BLOOM_CAPACITY"),  # 2.97e14 bits > SLICE_BITS_LIMIT
        ({"capacity": 0, "prefix": "BLOOM_LOCAL"}, "BLOOM_LOCAL_CAPACITY"),
    ],
)
def test_validation_names_the_setting(kwargs: dict[str, object], setting: str) -> None:
    params: dict[str, object] = {"capacity": 1000, "error_rate": 0.001, "growth": 2, **kwargs}
    with pytest.raises(SettingError) as info:
        validate(**params)  # type: ignore[arg-type]
    assert info.value.setting == setting
    assert setting in str(info.value)


def test_validation_accepts_good_values() -> None:
    validate(capacity=10_000_000, error_rate=0.001, growth=2)
    validate(capacity=300_000_000, error_rate=0.001, growth=2)  # 4.45e9 bits: pieces
    validate(capacity=300_000_000, error_rate=0.001, prefix="BLOOM_LOCAL", max_bits=None)
    with pytest.raises(ValueError):
        slice_spec(-1, capacity=10, error_rate=0.1, growth=2)
