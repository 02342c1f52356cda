#!/usr/bin/env python
"""The tests' manage.py: settings from tests.django.settings, the database from
OUTBOX_DJANGO_DB_URL."""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.django.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
