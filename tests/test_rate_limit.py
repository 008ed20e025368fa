"""scaler.rate_limit: the first few per key and in all, the rest counted and summed up once per interval."""

from __future__ import annotations

import logging

import pytest

from scaler.rate_limit import LimitedLog, RateLimiter, describe


def test_the_first_few_per_key_then_counted_and_summed_up_when_the_interval_ends() -> None:
    limiter = RateLimiter(per_key=2, overall=100, interval_seconds=10.0)
    assert [limiter.allow(b"a", 100.0 + i) for i in range(5)] == [True, True, False, False, False]
    assert limiter.allow(b"b", 104.5)  # another peer has its own budget
    assert limiter.summary(109.9) is None  # the interval (100 to 110) is not over
    assert limiter.summary(110.0) == "suppressed 3 warning(s) in 10.0 s (a: 3)"
    assert limiter.summary(200.0) is None  # said once
    assert limiter.allow(b"a", 200.0), "a new interval, a new budget"


def test_the_overall_limit_holds_whatever_the_number_of_peers() -> None:
    limiter = RateLimiter(per_key=5, overall=3, interval_seconds=10.0)
    allowed = [limiter.allow(f"peer{i}".encode(), 0.0) for i in range(1000)]
    assert sum(allowed) == 3 and allowed[:3] == [True, True, True]
    text = limiter.summary(0.0, force=True)
    assert text is not None and text.startswith("suppressed 997 warning(s) in 0.0 s (") and "others: 994" in text


def test_an_interval_with_suppressed_events_stays_open_until_summed_up() -> None:
    limiter = RateLimiter(per_key=1, overall=10, interval_seconds=1.0)
    assert limiter.allow("kind", 0.0) and not limiter.allow("kind", 0.5)
    assert not limiter.allow("kind", 5.0), "counted for the summary still owed, not let through unreported"
    assert limiter.summary(5.0) == "suppressed 2 warning(s) in 1.0 s (kind: 2)"
    assert limiter.allow("kind", 5.0)


def test_keys_beyond_the_tracked_ones_are_counted_in_the_total() -> None:
    limiter = RateLimiter(per_key=1, overall=1, interval_seconds=1.0)
    for i in range(5000):
        limiter.allow(i, 0.0)
    text = limiter.summary(1.0)
    assert text is not None and text.startswith("suppressed 4999 warning(s)")
    assert len(limiter._by_key) == 0  # the next interval starts empty: memory stays bounded


def test_summaries_name_peers_safely() -> None:
    assert describe(b"W|host|1|abc") == "W|host|1|abc"
    assert describe(b"evil\n[INFO] fake line\x00") == "evil\\n[INFO] fake line\\x00"
    assert describe("line\nfeed") == "line\\nfeed"
    assert describe(b"x" * 100) == "x" * 61 + "..."
    assert describe(("scheduler address", 3)) == "('scheduler address', 3)"


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        RateLimiter(per_key=0)
    with pytest.raises(ValueError):
        RateLimiter(interval_seconds=0)


def test_limited_warnings_log_a_few_then_one_summary(caplog) -> None:
    warnings = LimitedLog(logging.getLogger("test.limited"), RateLimiter(2, 10, 10.0), prefix="Worker[0]: ")
    with caplog.at_level(logging.WARNING, logger="test.limited"):
        for i in range(6):
            warnings.log("processor died", 1.0 + i, "processor %d died", i)
        warnings.flush(5.0)
        assert [r.getMessage() for r in caplog.records] == ["processor 0 died", "processor 1 died"]
        warnings.log("processor died", 12.0, "processor %d died", 6)  # the next interval: summary first
        warnings.flush(30.0, force=True)
    assert [r.getMessage() for r in caplog.records][2:] == [
        "Worker[0]: suppressed 4 warning(s) in 10.0 s (processor died: 4)",
        "processor 6 died",
    ]
