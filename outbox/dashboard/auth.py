"""Who may change anything: the token, the session cookie and the CSRF check.

The dashboard is safe to leave running::

    no token configured ─────────► read-only for everyone; every action answers 403
    token configured
      ├─ Authorization: Bearer T ─► may act (scripts; no cookie, so no CSRF to fear)
      ├─ session cookie, signed ──► may act, each form carrying the session's CSRF token
      │  in after POST /login with T
      └─ neither, or a wrong T ───► read-only; every action answers 401

A refused action answers 401 or 403, never a redirect, and runs nothing. The session
cookie is signed with a key derived from the token, so changing the token signs every
browser out. The token itself is never put in a page, a cookie or a log line.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Literal

from starlette.requests import Request

from outbox.errors import ConfigurationError

MIN_TOKEN_LENGTH = 16
Via = Literal["anonymous", "session", "bearer"]


class Refused(Exception):
    """An action this viewer may not take: answered with ``status``, nothing changed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def check_token(token: str | None) -> str | None:
    """An empty token means none; a short one is refused where it is configured."""
    if token is None or token == "":
        return None
    weak = len(token.strip()) < MIN_TOKEN_LENGTH  # 20 spaces are no secret
    if weak or not token.isascii() or not token.isprintable():
        raise ConfigurationError(
            f"OUTBOX_DASHBOARD_TOKEN must be at least {MIN_TOKEN_LENGTH} printable ASCII "
            "characters, not counting spaces at either end (e.g. from "
            "`python -c 'import secrets; print(secrets.token_urlsafe())'`)"
        )
    return token


def session_secret(token: str | None) -> str:
    """The cookie-signing key: derived from the token, or random when there is none."""
    if token is None:
        return secrets.token_hex(32)
    return hmac.new(token.encode(), b"outbox.dashboard.session", hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class Viewer:
    """What the person or script behind one request may do."""

    via: Via
    writable: bool  # a token is configured, so someone could act
    csrf: str  # the session's CSRF token ("" for bearer and read-only sites)

    @property
    def can_act(self) -> bool:
        return self.via != "anonymous"


def same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def viewer(request: Request, token: str | None) -> Viewer:
    """Identify the viewer; a malformed or wrong Authorization header is refused (401)."""
    header = request.headers.get("authorization")
    if header is not None:
        if token is None:
            raise Refused(403, "read-only: this dashboard runs without OUTBOX_DASHBOARD_TOKEN")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not same(given.strip(), token):
            raise Refused(401, "wrong or malformed bearer token")
        return Viewer("bearer", True, "")
    if token is None:
        return Viewer("anonymous", False, "")
    session = request.session
    if not isinstance(session.get("csrf"), str):
        session["csrf"] = secrets.token_urlsafe(24)
    via: Via = "session" if session.get("auth") is True else "anonymous"
    return Viewer(via, True, str(session["csrf"]))


def require_actor(request: Request, token: str | None) -> Viewer:
    """The viewer, if it may act; otherwise ``Refused`` (401 or 403). A session's form
    must then pass ``check_csrf``."""
    who = viewer(request, token)
    if not who.writable:
        raise Refused(403, "read-only: this dashboard runs without OUTBOX_DASHBOARD_TOKEN")
    if not who.can_act:
        raise Refused(401, "sign in (or send Authorization: Bearer) to act")
    return who


def check_csrf(who: Viewer, form: dict[str, list[str]]) -> None:
    given = (form.get("csrf") or [""])[0]
    if not who.csrf or not same(given, who.csrf):
        raise Refused(403, "the form's CSRF token is missing or stale: reload the page")


def sign_in(request: Request, token: str | None, form: dict[str, list[str]]) -> None:
    """Start a session for the right token; refuse (401/403) otherwise, changing nothing."""
    who = viewer(request, token)
    if token is None:
        raise Refused(403, "read-only: this dashboard runs without OUTBOX_DASHBOARD_TOKEN")
    check_csrf(who, form)
    if not same((form.get("token") or [""])[0], token):
        raise Refused(401, "wrong token")
    request.session.clear()
    request.session["auth"] = True
    request.session["csrf"] = secrets.token_urlsafe(24)


def sign_out(request: Request, token: str | None, form: dict[str, list[str]]) -> None:
    who = viewer(request, token)
    if who.via == "session":
        check_csrf(who, form)
        request.session.clear()
