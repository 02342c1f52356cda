"""A plain HTTP client that never follows redirects: the tests see every answer as sent."""

from __future__ import annotations

import http.client
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: str

    def header(self, name: str) -> str:
        return self.headers.get(name.lower(), "")


def request(
    method: str,
    url: str,
    *,
    form: dict[str, str | list[str]] | None = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    body = None
    sent = dict(headers or {})
    if form is not None:
        body = urlencode(form, doseq=True)
        sent.setdefault("Content-Type", "application/x-www-form-urlencoded")
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request(method, path or "/", body=body, headers=sent)
        res = conn.getresponse()
        text = res.read().decode("utf-8", "replace")
        return Answer(res.status, {k.lower(): v for k, v in res.getheaders()}, text)
    finally:
        conn.close()


def get(url: str, **kw: object) -> Answer:
    return request("GET", url, **kw)  # type: ignore[arg-type]


def post(url: str, **kw: object) -> Answer:
    return request("POST", url, **kw)  # type: ignore[arg-type]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


HTML = {"Accept": "text/html"}
