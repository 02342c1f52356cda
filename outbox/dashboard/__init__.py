"""The web dashboard: see and steer the outbox and the queues from a browser.

``create_app(database_url, ...)`` returns an ASGI app (Starlette) to serve with
``outbox dashboard`` or to mount in your own Starlette or FastAPI service. It needs the
``dashboard`` extra (Starlette, uvicorn, Jinja2, itsdangerous). Its script and styles
are files of this package: the pages work offline and load nothing from elsewhere.

Safety is described in ``outbox.dashboard.auth``; the chart's meaning in
``outbox.dashboard.store.throughput``.
"""

from outbox.dashboard.app import create_app

__all__ = ["create_app"]
