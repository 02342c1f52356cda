"""Django settings for the tests: one database, named by ``OUTBOX_DJANGO_DB_URL``.

In-process tests configure Django from here once (``tests/django/conftest.py``) and add
an alias per test for that test's own database (``django_db``); the ``manage.py``
processes a test starts read their database from the environment variable, set to the
shared fixtures' URL, and ``OUTBOX['REGISTRY']`` from ``OUTBOX_DJANGO_REGISTRY`` when set.
"""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy.engine import make_url

SECRET_KEY = "outbox-tests-only"
DEBUG = False
USE_TZ = True
ROOT_URLCONF = "tests.django.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.admin",
    "outbox.contrib.django",
    "tests.django.testapp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]


def database_settings(url: str) -> dict[str, Any]:
    """Django's ``DATABASES`` entry for one of the fixtures' URLs."""
    u = make_url(url)
    kind = u.get_backend_name()
    if kind == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": u.database}
    engine = {
        "postgresql": "django.db.backends.postgresql",
        "postgres": "django.db.backends.postgresql",
        "mysql": "django.db.backends.mysql",
        "mariadb": "django.db.backends.mysql",
    }[kind]
    return {
        "ENGINE": engine,
        "NAME": u.database,
        "USER": u.username or "",
        "PASSWORD": u.password or "",
        "HOST": u.host or "127.0.0.1",
        "PORT": str(u.port or ""),
        "OPTIONS": (
            {"charset": "utf8mb4"} if engine.endswith("mysql")
            else {k: str(v) for k, v in u.query.items()}  # the test's search_path
        ),
    }


_URL = os.environ.get("OUTBOX_DJANGO_DB_URL")
DATABASES = {"default": database_settings(_URL) if _URL else {
    "ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
TASKS = {
    "default": {
        "BACKEND": "outbox.contrib.django.TaskBackend",
        "QUEUES": ["default", "mail"],
        "OPTIONS": {},
    }
}
if os.environ.get("OUTBOX_DJANGO_REGISTRY"):
    OUTBOX = {"REGISTRY": os.environ["OUTBOX_DJANGO_REGISTRY"]}
