"""The dashboard's pure parts: chart geometry, page cursors, durations, bind and Host
parsing, the token rule."""

from __future__ import annotations

import click
import pytest

from outbox.cli.dashboard import is_loopback, parse_bind
from outbox.dashboard import chart
from outbox.dashboard.app import host_name
from outbox.dashboard.auth import check_token
from outbox.dashboard.store import Cursor, Minute
from outbox.dashboard.web import duration
from outbox.errors import ConfigurationError


def test_the_grid_step_is_a_round_number_whose_four_steps_reach_the_peak() -> None:
    peaks = (0, 3, 4, 5, 7, 11, 180, 201, 999, 1001)
    assert [chart.nice_step(n) for n in peaks] == [1, 1, 1, 2, 2, 5, 50, 100, 250, 500]


def test_chart_stacks_succeeded_retried_dead_and_scales_to_the_busiest_minute() -> None:
    minutes = [Minute(i * 60_000) for i in range(60)]
    minutes[10] = Minute(10 * 60_000, 120, 30, 50)
    minutes[59] = Minute(59 * 60_000, 40)
    c = chart.build(minutes)
    assert (c.peak, c.succeeded_total, c.retried_total, c.dead_total) == (200, 160, 30, 50)
    busiest, last = c.bars[10], c.bars[59]
    plot_h = chart.HEIGHT - chart.TOP - chart.BOTTOM
    assert [s.kind for s in busiest.segments] == ["succeeded", "retried", "dead"]
    assert sum(s.h for s in busiest.segments) == pytest.approx(plot_h)  # 200 of 200
    ok, retried, dead = busiest.segments
    assert ok.y + ok.h == pytest.approx(c.baseline)  # succeeded sits on the axis
    assert retried.y + retried.h == pytest.approx(ok.y)  # retried on it, dead on top
    assert dead.y + dead.h == pytest.approx(retried.y)
    assert [(s.kind, s.h) for s in last.segments] == [("succeeded", pytest.approx(plot_h / 5))]
    assert c.bars[0].segments == []
    assert "0 succeeded, 0 retried, 0 dead-lettered" in c.bars[0].title
    assert [t.label for t in c.y_ticks] == ["0", "50", "100", "150", "200"]
    assert [t.label for t in c.x_ticks] == ["-50m", "-40m", "-30m", "-20m", "-10m", "now"]


def test_an_empty_chart_still_has_an_axis() -> None:
    c = chart.build([Minute(i * 60_000) for i in range(60)])
    assert c.peak == 0 and [t.label for t in c.y_ticks] == ["0", "1", "2", "3", "4"]


def test_cursor_round_trips_and_rejects_anything_else() -> None:
    assert Cursor.decode(Cursor(1_796_000_000_000, 42).encode()) == Cursor(1_796_000_000_000, 42)
    assert Cursor.decode(None) == Cursor() == Cursor.decode("")
    for bad in ("zz", "1", "1.", ".2", "1.-2", "1.2.3", "1;drop"):
        with pytest.raises(ValueError, match="is not a page cursor"):
            Cursor.decode(bad)


def test_duration_reads_at_a_glance() -> None:
    assert [duration(s) for s in (None, -1, 0.25, 59.94, 61, 3_725, 200_000)] == [
        "-", "0.0s", "0.2s", "59.9s", "1m 01s", "1h 02m", "2d 7h"
    ]


def test_host_name_drops_the_port_and_understands_ipv6() -> None:
    def scope(host: bytes) -> dict[str, object]:
        return {"headers": [(b"host", host)]}

    assert host_name(scope(b"127.0.0.1:8642")) == "127.0.0.1"
    assert host_name(scope(b"LocalHost")) == "localhost"
    assert host_name(scope(b"[::1]:8642")) == "::1"
    assert host_name(scope(b"evil.example:80")) == "evil.example"
    assert host_name({"headers": []}) == ""


def test_parse_bind_accepts_host_port_and_names_a_bad_value() -> None:
    assert parse_bind("127.0.0.1:8642") == ("127.0.0.1", 8642)
    assert parse_bind("[::1]:9000") == ("::1", 9000)
    assert parse_bind("0.0.0.0:80") == ("0.0.0.0", 80)
    for bad in ("8642", "127.0.0.1", ":8642", "host:0", "host:70000", "host:http"):
        with pytest.raises(click.BadParameter, match="is not HOST:PORT"):
            parse_bind(bad)


def test_loopback_is_recognised() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.org"))


def test_a_short_token_is_refused_without_echoing_it() -> None:
    assert check_token(None) is None and check_token("") is None
    assert check_token("s" * 16) == "s" * 16
    for bad in ("short-secret", "x" * 15, "sixteen chars\nok", "ünïcödé-token-16chars"):
        with pytest.raises(ConfigurationError, match="at least 16 printable ASCII") as info:
            check_token(bad)
        assert bad not in str(info.value)


def test_one_time_format_for_every_page() -> None:
    from datetime import UTC, datetime, timedelta, timezone

    from outbox.dashboard.web import ms_time, tick

    at = datetime(2026, 12, 1, 20, 5, 9, 123_456, tzinfo=timezone(timedelta(hours=2)))
    assert tick(at) == "2026-12-01 18:05:09"
    assert tick(at, True) == "2026-12-01 18:05:09.123"
    assert tick(None) == "" and ms_time(None) == "-"
    assert ms_time(int(at.timestamp() * 1000)) == "2026-12-01 18:05:09"
    assert tick(datetime(2026, 1, 2, tzinfo=UTC), True) == "2026-01-02 00:00:00.000"
