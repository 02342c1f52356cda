"""Database URLs: what each driver is given, and how a URL is shown.

PostgreSQL URLs take every form libpq and SQLAlchemy take: userinfo and host in the
authority, or libpq keywords in the query (``?host=/var/run/postgresql`` for a Unix
socket, ``?user=``, ``?password=``, ``?sslmode=``, ...), and SQLAlchemy's multi-host
``?host=a:5432&host=b:5433``. A keyword libpq does not know, or one given both in the
authority and in the query, is refused by name when the URL is parsed, not at the first
connection.

MariaDB/MySQL URLs pass on the query parameters PyMySQL takes (``unix_socket``,
``charset``, ``ssl_*``, timeouts, ...), converted to the type PyMySQL wants; any other is
refused by name instead of being dropped without a word.

Either needs its driver, an install extra: without it the URL is refused at once with
``MissingExtra`` naming the extra (``require_driver``), never an ImportError at the first
connection.

A URL is shown only through ``describe`` (password and every secret-looking query value
replaced by ``***``), and a driver's error text only through ``scrub``: no secret from any
part of a URL ever reaches a message or a log.

``URL`` and ``make_url`` parse the way SQLAlchemy's do (the same grammar, decoding and
multi-valued query), without importing SQLAlchemy: it is more than half of the CPU a
relay, worker or CLI process spends starting (0.24 s of 0.42 s measured), and none of
them needs it unless an application hands in a SQLAlchemy connection.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote

from outbox.errors import ConfigurationError, MissingExtra

QueryValue = str | tuple[str, ...]


@dataclass(frozen=True, slots=True)
class URL:
    """A parsed database URL: ``drivername://username:password@host:port/database?query``.
    A query parameter given more than once holds a tuple of its values."""

    drivername: str
    username: str | None = None
    password: str | None = None
    host: str | None = None
    port: int | None = None
    database: str | None = None
    query: Mapping[str, QueryValue] = field(default_factory=lambda: MappingProxyType({}))

    def set(self, **changes: Any) -> URL:
        """A copy with ``changes`` (``query`` as a mapping)."""
        if "query" in changes:
            changes["query"] = MappingProxyType(dict(changes["query"]))
        return replace(self, **changes)

    def render_as_string(self, hide_password: bool = True) -> str:
        """The URL as text, the password as ``***`` unless ``hide_password`` is False."""
        s = self.drivername + "://"
        if self.username is not None:
            s += quote(self.username, safe=" +")
            if self.password is not None:
                s += ":" + (MASK if hide_password else quote(self.password, safe=" +"))
            s += "@"
        if self.host is not None:
            s += f"[{self.host}]" if ":" in self.host else self.host
        if self.port is not None:
            s += f":{self.port}"
        if self.database is not None:
            s += "/" + quote(self.database, safe=" +/")
        if self.query:
            s += "?" + "&".join(
                f"{quote_plus(k)}={quote_plus(v)}"
                for k in sorted(self.query)
                for v in _values(self.query[k])
            )
        return s

    def __str__(self) -> str:
        return self.render_as_string()

    def __repr__(self) -> str:
        return self.render_as_string()


_URL_PATTERN = re.compile(
    r"""
    (?P<name>[\w+]+)://
    (?:(?P<username>[^:/]*)(?::(?P<password>[^@]*))?@)?
    (?:(?:\[(?P<ipv6host>[^/?]+)\]|(?P<ipv4host>[^/:?]+))?(?::(?P<port>[^/?]*))?)?
    (?:/(?P<database>[^?]*))?
    (?:\?(?P<query>.*))?
    """,
    re.X,
)


def make_url(text: str) -> URL:
    """``text`` parsed as SQLAlchemy's ``make_url`` parses it; ``ValueError`` when it is no
    URL (the caller says so without echoing it: it may hold a password)."""
    m = _URL_PATTERN.match(text)
    if m is None:
        raise ValueError("not a database URL")
    g = m.groupdict()
    query: dict[str, QueryValue] = {}
    for key, value in parse_qsl(g["query"] or ""):
        held = query.get(key)
        query[key] = value if held is None else (*_values(held), value)
    port = g["port"]
    return URL(
        g["name"],
        None if g["username"] is None else unquote(g["username"]),
        None if g["password"] is None else unquote(g["password"]),
        g["ipv4host"] or g["ipv6host"],
        int(port) if port else None,
        None if g["database"] is None else unquote(g["database"]),
        MappingProxyType(query),
    )


def _values(value: QueryValue) -> tuple[str, ...]:
    return value if isinstance(value, tuple) else (value,)

MASK = "***"
_SECRET_MARKS = ("pass", "secret", "token")

# The authority's parts, and the libpq keyword each one is.
_PG_AUTHORITY = {"host": "host", "port": "port", "username": "user", "password": "password"}

_MYSQL_TEXT = frozenset(
    {
        "unix_socket",
        "charset",
        "collation",
        "sql_mode",
        "init_command",
        "read_default_file",
        "read_default_group",
        "ssl_ca",
        "ssl_cert",
        "ssl_key",
        "ssl_key_password",
        "bind_address",
        "program_name",
        "server_public_key",
    }
)
_MYSQL_INT = frozenset(
    {"connect_timeout", "read_timeout", "write_timeout", "max_allowed_packet", "client_flag"}
)
_MYSQL_BOOL = frozenset(
    {
        "local_infile",
        "ssl_disabled",
        "ssl_verify_cert",
        "ssl_verify_identity",
        "binary_prefix",
        "use_unicode",
    }
)
MYSQL_PARAMS = _MYSQL_TEXT | _MYSQL_INT | _MYSQL_BOOL
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def is_secret(key: str) -> bool:
    """Whether a query parameter's value is to be hidden (``password``, ``sslpassword``,
    ``ssl_key_password``, anything naming a secret or token)."""
    lowered = key.lower()
    return any(mark in lowered for mark in _SECRET_MARKS)


def libpq_multi_host(text: str) -> str:
    """libpq's multi-host form ``postgresql://u@h1:5999,h2:5432/db`` (which SQLAlchemy
    cannot parse) as the query form it can: ``postgresql://u@/db?host=h1:5999&host=h2:5432``.
    Any other text comes back unchanged."""
    found = _PG_MULTI_HOST.match(text)
    if found is None:
        return text
    scheme, user, hosts, path, query = found.groups()
    listed = "&".join(f"host={quote(h, safe=':[]')}" for h in hosts.split(",") if h)
    joined = f"{query}&{listed}" if query else listed
    return f"{scheme}{user or ''}{path or '/'}?{joined}"


_PG_MULTI_HOST = re.compile(
    r"^(postgres(?:ql)?(?:\+\w+)?://)([^@/?#]*@)?([^@/?#]*,[^@/?#]*)(/[^?#]*)?(?:\?([^#]*))?$"
)


def describe(url: URL) -> str:
    """The URL for messages and logs: password and secret query values as ``***``."""
    if url.drivername.startswith("sqlite") and url.database == ":memory:":
        return f"{url.drivername}:///:memory:"  # quote() would write %3Amemory%3A
    base = url.set(query={}).render_as_string(hide_password=True)
    if not url.query:
        return base
    parts = []
    for key, value in url.query.items():
        for one in value if isinstance(value, tuple) else (value,):
            shown = MASK if is_secret(key) else quote(str(one), safe="/:,")
            parts.append(f"{quote(key, safe='')}={shown}")
    return f"{base}?{'&'.join(parts)}"


def secrets_of(url: URL) -> list[str]:
    """Every secret value in the URL (the password, secret query values)."""
    found = [url.password] if url.password else []
    for key, value in url.query.items():
        if is_secret(key):
            found.extend(v for v in (value if isinstance(value, tuple) else (value,)) if v)
    return [str(s) for s in found]


def scrub(url: URL, text: str) -> str:
    """``text`` (a driver's error) with every secret of ``url`` replaced by ``***``."""
    for secret in sorted(secrets_of(url), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def check_sqlite_query(url: URL) -> None:
    """A SQLite URL takes no query parameters: refuse one rather than ignore it (the busy
    timeout is ``Database(..., sqlite_busy_timeout_ms=)``; ``?timeout=abc`` meant nothing)."""
    if url.query:
        names = ", ".join(sorted(url.query))
        raise ConfigurationError(
            f"a SQLite URL takes no query parameters (got {names}); outbox sets the busy "
            "timeout itself (Database(url, sqlite_busy_timeout_ms=...))"
        )


# The driver each server's URLs need: its module, the name users know it by, the extra.
DRIVERS = {
    "PostgreSQL": ("psycopg", "psycopg 3", "postgres"),
    "MariaDB/MySQL": ("pymysql", "PyMySQL", "mysql"),
}


def require_driver(server: str) -> None:
    """``MissingExtra`` naming the install extra when ``server``'s driver cannot be
    imported (not installed; or, for psycopg, installed without a libpq to load)."""
    module, known_as, extra = DRIVERS[server]
    try:
        importlib.import_module(module)
    except ImportError as exc:
        why = "is not installed" if isinstance(exc, ModuleNotFoundError) else "cannot be imported"
        raise MissingExtra(
            f"a {server} database URL needs {known_as}, which {why}: "
            f"pip install 'outbox-relay[{extra}]'",
            extra=extra,
        ) from exc


def postgresql_args(url: URL) -> dict[str, Any]:
    """Keyword arguments for ``psycopg.connect`` (libpq keywords), from any accepted form."""
    require_driver("PostgreSQL")
    args: dict[str, Any] = {}
    for part, keyword in _PG_AUTHORITY.items():
        value = getattr(url, part)
        if value not in (None, ""):
            args[keyword] = value
    if url.database:
        args["dbname"] = url.database
    for key, value in url.query.items():
        keyword = "dbname" if key == "database" else key
        if keyword in args:
            raise ConfigurationError(
                f"the database URL gives {keyword!r} twice (in the address and as ?{key}=); "
                "keep one"
            )
        if isinstance(value, tuple) or (key == "host" and value.count(":") == 1):
            args.update(_multi_host(key, value if isinstance(value, tuple) else (value,)))
        else:
            args[keyword] = value
    _check_libpq_keywords(args)
    args.setdefault("application_name", "outbox")
    return args


def _multi_host(key: str, values: tuple[str, ...]) -> dict[str, str]:
    """SQLAlchemy's ``?host=a:5432&host=b:5433`` (or one ``?host=a:5432``) as libpq's
    ``host=a,b port=5432,5433``."""
    if key != "host":
        raise ConfigurationError(f"the database URL gives ?{key}= more than once")
    hosts, ports = [], []
    for value in values:
        host, _, port = value.rpartition(":") if value.count(":") == 1 else (value, "", "")
        hosts.append(host)
        ports.append(port)
    out = {"host": ",".join(hosts)}
    if any(ports):
        out["port"] = ",".join(ports)
    return out


def _check_libpq_keywords(args: Mapping[str, Any]) -> None:
    known = _libpq_keywords()
    unknown = sorted(k for k in args if known and k not in known)
    if unknown:
        raise ConfigurationError(
            f"unknown PostgreSQL URL parameter(s): {', '.join(unknown)} "
            "(libpq connection keywords are accepted, e.g. host, port, user, password, "
            "sslmode, connect_timeout, application_name)"
        )


def _libpq_keywords() -> frozenset[str]:
    """The keywords the installed libpq knows (psycopg is there: ``require_driver``)."""
    from psycopg import pq

    return frozenset(d.keyword.decode() for d in pq.Conninfo.get_defaults())


def mysql_args(url: URL) -> dict[str, Any]:
    """Keyword arguments for ``pymysql.connect``; unknown query parameters are refused."""
    require_driver("MariaDB/MySQL")
    args: dict[str, Any] = {
        "host": url.host or "localhost",
        "port": url.port or 3306,
        "user": url.username or "root",
        "password": url.password or "",
        "database": url.database,
        "charset": "utf8mb4",
    }
    query = dict(url.query)
    if "password" in query:  # as libpq takes ?password=, for a password the URL cannot hold
        password = query.pop("password")
        if isinstance(password, tuple):
            raise ConfigurationError("the database URL gives ?password= more than once")
        args["password"] = password
    unknown = sorted(k for k in query if k not in MYSQL_PARAMS)
    if unknown:
        raise ConfigurationError(
            f"unsupported MySQL/MariaDB URL parameter(s): {', '.join(unknown)}; "
            f"accepted: {', '.join(sorted(MYSQL_PARAMS))}"
        )
    for key, value in query.items():
        if isinstance(value, tuple):
            raise ConfigurationError(f"the database URL gives ?{key}= more than once")
        args[key] = _mysql_value(key, value)
    _check_charset(str(args["charset"]))
    return args


def _check_charset(name: str) -> None:
    """PyMySQL fails on an unknown charset with an AttributeError at connect; say it now."""
    from pymysql.charset import charset_by_name

    try:
        known = charset_by_name(name) is not None
    except KeyError:
        known = False
    if not known:
        raise ConfigurationError(
            f"database URL parameter 'charset': {name!r} is not a MariaDB/MySQL character "
            "set (e.g. utf8mb4, the default)"
        )


def _mysql_value(key: str, value: str) -> Any:
    convert: Callable[[str], Any] = str
    if key in _MYSQL_INT:
        convert = _whole_number
    elif key in _MYSQL_BOOL:
        convert = _boolean
    try:
        return convert(value)
    except ValueError as exc:
        raise ConfigurationError(f"database URL parameter {key!r}: {exc}") from None


def _whole_number(value: str) -> int:
    if not value.isdigit():
        raise ValueError("expected a whole number")
    return int(value)


def _boolean(value: str) -> bool:
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError("expected true/false (or 1/0, yes/no, on/off)")
