"""``outbox.db.url.make_url`` parses as SQLAlchemy's ``make_url`` does (which outbox no
longer imports to start: it was more than half of a process's start-up CPU): every
field, the rendered text with and without the password, on the forms users write."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sqlalchemy.engine import make_url as sqlalchemy_make_url

from outbox.db.url import make_url

FORMS = [
    "sqlite:///outbox.db",
    "sqlite:////var/lib/app/outbox.db",
    "sqlite:///:memory:",
    "sqlite://",
    "postgresql://app@127.0.0.1:5432/test",
    "postgresql+psycopg://app:s3cr%40t%2Fx@db.internal/orders",
    "postgresql://u@/db?host=/var/run/postgresql&sslmode=require",
    "postgresql://u@/db?host=a:5432&host=b:5433&application_name=x+y",
    "postgresql://u:pw@[::1]:5432/db",
    "postgresql://u@host/db?password=&sslpassword=k%26y",
    "mysql+pymysql://root:@127.0.0.1:3306/test?charset=utf8mb4&ssl_disabled=true",
    "mysql://u:pa%20ss@localhost/db%20name?unix_socket=/run/mysqld/mysqld.sock",
    "postgresql://host",
    "postgresql://:onlypass@host/db",
]


@pytest.mark.parametrize("text", FORMS)
def test_each_field_and_the_rendered_text_are_sqlalchemys(text: str) -> None:
    ours, theirs = make_url(text), sqlalchemy_make_url(text)
    for part in ("drivername", "username", "password", "host", "port", "database"):
        assert getattr(ours, part) == getattr(theirs, part), part
    assert dict(ours.query) == dict(theirs.query)
    for hide in (True, False):
        assert ours.render_as_string(hide_password=hide) == theirs.render_as_string(
            hide_password=hide
        )
    assert ours.set(query={}).render_as_string() == theirs.set(query={}).render_as_string()


def test_text_that_is_no_url_is_refused() -> None:
    with pytest.raises(ValueError, match="not a database URL"):
        make_url("not a url at all")


def test_starting_the_cli_imports_no_sqlalchemy() -> None:
    """What the change is for: a relay, worker or CLI process starts without it."""
    probe = "import sys, outbox, outbox.cli; print('sqlalchemy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert out.stdout.strip() == "False"
