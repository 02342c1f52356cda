"""A small shop: an order written and its receipt task enqueued in one transaction.

The database comes from ``DATABASE_URL`` (default: SQLite in this folder), e.g.
``postgresql://postgres@127.0.0.1/shop`` or ``mysql://root@127.0.0.1/shop``.
"""

import os
from pathlib import Path

from sqlalchemy.engine import make_url

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ.get("SECRET_KEY", "example-only-not-secret")
DEBUG = True
ALLOWED_HOSTS = ["*"]
USE_TZ = True
ROOT_URLCONF = "example.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = ["django.contrib.contenttypes", "outbox.contrib.django", "shop"]
MIDDLEWARE: list[str] = []

_URL = make_url(os.environ.get("DATABASE_URL", f"sqlite:///{BASE_DIR / 'shop.sqlite3'}"))
_ENGINES = {"sqlite": "sqlite3", "postgresql": "postgresql", "mysql": "mysql"}
_TEST_NAME = os.environ.get("TEST_DATABASE_NAME")  # where `manage.py test` builds its own
DATABASES = {
    "default": {
        "ENGINE": f"django.db.backends.{_ENGINES[_URL.get_backend_name()]}",
        "NAME": _URL.database,
        "USER": _URL.username or "",
        "PASSWORD": _URL.password or "",
        "HOST": _URL.host or "",
        "PORT": str(_URL.port or ""),
        "OPTIONS": {"charset": "utf8mb4"} if _URL.get_backend_name() == "mysql" else {},
        "TEST": {"NAME": _TEST_NAME} if _TEST_NAME else {},
    }
}
if _URL.get_backend_name() == "mysql":
    DATABASES["default"]["TEST"]["CHARSET"] = "utf8mb4"

TASKS = {
    "default": {
        "BACKEND": "outbox.contrib.django.TaskBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"MAX_ATTEMPTS": 3},
    }
}
