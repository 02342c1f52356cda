"""``outbox relay --target redis://…``: it runs, and every bad URL, login or option is one
line naming what is wrong, never the password, with the outbox untouched."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result

from outbox.cli import main
from outbox.db.connection import Database
from outbox.errors import ConfigurationError
from outbox.queue.redis import connect
from outbox.queue.redis.url import PASSWORD_ENV, parse_url
from outbox.status import pending_count
from tests.fixtures.redis_servers import PASSWORD, RedisServer, message_ids, record_jobs


def relay(db_url: str, *args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, ["--database-url", db_url, "relay", *args], env=env)


def pending(db: Database) -> int:
    with db.connect() as conn:
        return pending_count(conn)


def test_relay_to_redis_hands_every_intent_off(
    database: Database, db_url: str, redis_url: str, redis_queue: str
) -> None:
    ids = record_jobs(db_url, redis_queue, 7)
    result = relay(db_url, "--target", redis_url, "--batch-size", "3")
    assert result.exit_code == 0, result.output
    assert "relayed 7 intents: 7 handed off" in result.output
    with redis.Redis.from_url(redis_url) as client:
        assert message_ids(client, redis_queue) == {i: 1 for i in ids}
    assert pending(database) == 0


def test_a_wrong_password_is_one_line_naming_the_url_without_it(
    database: Database, db_url: str, redis_auth: RedisServer, redis_queue: str
) -> None:
    record_jobs(db_url, redis_queue, 3)
    for url in (
        f"redis://:not-{PASSWORD}@127.0.0.1:{redis_auth.port}/0",
        f"redis://127.0.0.1:{redis_auth.port}/0",  # none at all
    ):
        result = relay(db_url, "--target", url)
        assert result.exit_code == 1, result.output  # as for a database that refuses a login
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and "authentication failed" in lines[0]
        assert f"127.0.0.1:{redis_auth.port}/0" in lines[0] and PASSWORD not in lines[0]
    assert pending(database) == 3


def test_the_password_may_come_from_the_environment(
    database: Database, db_url: str, redis_auth: RedisServer, redis_queue: str
) -> None:
    ids = record_jobs(db_url, redis_queue, 2)
    url = f"redis://127.0.0.1:{redis_auth.port}/0"
    result = relay(db_url, "--target", url, env={PASSWORD_ENV: PASSWORD})
    assert result.exit_code == 0, result.output
    assert PASSWORD not in result.output
    assert message_ids(redis_auth.client(), redis_queue) == {i: 1 for i in ids}
    assert pending(database) == 0


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://:pw-SECRET@127.0.0.1:notaport/0", "port"),
        ("redis://:pw-SECRET@127.0.0.1:6379/zero", "database number"),
        ("redis://:pw-SECRET@127.0.0.1:6379/0?wat=1", "unknown option wat"),
        ("redis://:pw-SECRET@127.0.0.1:6379/0?wait=some", "wait must be"),
        ("redis://:pw-SECRET@127.0.0.1:6379/0?wait_timeout=0", "wait_timeout must be"),
        ("redis://:pw-SECRET@127.0.0.1:6379/0?fsync=sometimes", "fsync"),
        ("redis://:pw-SECRET@127.0.0.1:99999/0", "port"),
        ("redis://:pw-SECRET@/0", "no host"),
    ],
)
def test_a_bad_url_is_refused_by_name_before_anything_runs(
    database: Database, db_url: str, url: str, says: str, redis_queue: str
) -> None:
    record_jobs(db_url, redis_queue, 1)
    result = relay(db_url, "--target", url)
    assert result.exit_code == 2, result.output
    assert says in result.output and "SECRET" not in result.output
    assert pending(database) == 1


@pytest.mark.parametrize(
    "option",
    [
        ["--provisioning", "require"],
        ["--stream-max-bytes", "100"],
        ["--replicas", "3"],
        ["--stream-max-msgs", "0"],
    ],
)
def test_a_nats_only_option_is_refused_with_redis(
    db_url: str, redis_url: str, option: list[str]
) -> None:
    result = relay(db_url, "--target", redis_url, *option)
    assert result.exit_code == 2, result.output
    assert option[0] in result.output


def test_a_redis_older_than_6_2_is_refused_at_connect() -> None:
    url = parse_url("redis://:pw-SECRET@127.0.0.1:6379/0")
    for old in ("6.0.16", "5.0.7"):
        with pytest.raises(ConfigurationError) as err:
            connect._check(url, {"redis_version": old, "redis_mode": "standalone"})
        assert f"version {old}" in str(err.value) and "6.2 or later" in str(err.value)
        assert "SECRET" not in str(err.value)
    assert connect._check(url, {"redis_version": "6.2.0", "redis_mode": "cluster"}) is True


def test_the_url_never_shows_its_password(monkeypatch: Any) -> None:
    url = parse_url("rediss://app:pw-SECRET@cache.example:6380/3?wait=1")
    assert (url.host, url.port, url.db, url.tls, url.username) == ("cache.example", 6380, 3, True,
                                                                   "app")  # fmt: skip
    assert url.password == "pw-SECRET" and "SECRET" not in url.shown + repr(url)
    assert url.shown.startswith("rediss://app:***@cache.example:6380/3")
    monkeypatch.setenv(PASSWORD_ENV, "env-SECRET")
    from_env = parse_url("redis://127.0.0.1")
    assert (from_env.password, from_env.port, from_env.db) == ("env-SECRET", 6379, 0)
    assert "SECRET" not in from_env.shown
