"""The outbox tables, by outbox's own migrations. Not atomic: they take their own
connection and locks (and MariaDB commits DDL anyway)."""

from django.db import migrations

from outbox.contrib.django.schema import OutboxMigrations


class Migration(migrations.Migration):
    atomic = False
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [OutboxMigrations()]
