"""The worker's object cache (sans-IO): what pinning a task's objects says is missing, and what pins keep."""

from __future__ import annotations

from scaler.io.shared_bytes import SharedBytes
from scaler.worker.objects import COMPACT_BYTES, ObjectCache


def cache_with(*object_ids: bytes) -> ObjectCache:
    cache = ObjectCache(retention_seconds=60.0)
    for object_id in object_ids:
        cache.add_chunk(object_id, b"payload of " + object_id, 0, 1, now=0.0)
    return cache


def test_pin_returns_the_ids_not_cached_and_counts_a_pin_per_use() -> None:
    cache = cache_with(b"f", b"a")
    assert cache.pin([b"f", b"a", b"a"]) == set()
    assert cache.pin([b"f", b"x", b"y", b"x"]) == {b"x", b"y"}
    assert cache.pins() == {b"f": 2, b"a": 2, b"x": 2, b"y": 1}


def test_an_object_with_only_some_chunks_is_still_missing() -> None:
    cache = cache_with(b"f")
    assert not cache.add_chunk(b"big", b"first half", 0, 2, now=0.0)
    assert cache.pin([b"f", b"big"]) == {b"big"}
    assert cache.add_chunk(b"big", b"second half", 1, 2, now=0.0)
    assert cache.pin([b"f", b"big"]) == set()


def test_each_pin_that_misses_something_returns_a_set_of_its_own() -> None:
    # The queue empties a task's missing set as its objects arrive: two tasks must never share one.
    cache = cache_with(b"f")
    first = cache.pin([b"f", b"x"])
    second = cache.pin([b"f", b"x", b"y"])
    first.discard(b"x")
    assert first == set() and second == {b"x", b"y"}
    assert cache.pin([b"f"]) == set()


def test_pinned_objects_survive_eviction_and_deletion_until_unpinned() -> None:
    cache = cache_with(b"f", b"a")
    assert cache.pin([b"f", b"a"]) == set()
    assert cache.evict_unused(now=1000.0) == [] and cache.delete([b"a"]) == []
    cache.unpin([b"f", b"a"], now=1000.0)
    assert cache.pins() == {}
    assert cache.delete([b"a"]) == [b"a"] and cache.evict_unused(now=2000.0) == [b"f"]


def test_past_its_quota_of_descriptors_the_cache_keeps_small_payloads_as_bytes() -> None:
    """A worker holding tens of thousands of results would otherwise run out of descriptors (one per shared memory
    file) long before it runs out of memory; large payloads stay shared, whatever their number."""
    cache = ObjectCache(retention_seconds=60.0)
    cache.shared_quota = 2
    small = [SharedBytes.create(bytes([index]) * 100_000) for index in range(4)]
    cache.hold(b"a", small[0], 0.0)
    cache.add_chunk(b"fetched", small[1], 0, 1, 0.0)
    cache.hold(b"b", small[2], 0.0)
    cache.hold(b"large", SharedBytes.create(b"L" * (COMPACT_BYTES + 1)), 0.0)
    kinds = [type(cache.get(object_id)) for object_id in (b"a", b"fetched", b"b", b"large")]
    assert kinds == [SharedBytes, SharedBytes, bytes, SharedBytes]
    assert cache.get(b"b") == bytes([2]) * 100_000 and cache.shared_count == 3
    cache.check()
    cache.delete([b"a", b"fetched"])
    assert cache.shared_count == 1
    cache.hold(b"c", small[3], 0.0)
    assert type(cache.get(b"c")) is SharedBytes, "under its quota again"
    cache.hold(b"c", b"made again", 0.0)
    assert cache.shared_count == 1
    cache.check()
