"""Django's admin over outbox: dead letters and quarantined intents (read-only, with
retry and forget actions behind Django's permissions) and kept job results.

Queries go to ``OUTBOX['DATABASE']``; actions go through outbox's own admin API on our
own connection (``outbox.queue.admin``, ``outbox.relay.admin``), so they follow the same
rules as ``outbox queue retry`` and friends. Payloads and exception messages are not shown
unless ``OUTBOX['ADMIN_SHOW_PAYLOADS']`` is True (as the dashboard shows them only when
started with ``--show-payloads``): a dead letter's traceback is then shown as a kept
result's is, by ``outbox.db.rows.without_messages``, its frames without the messages.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.contrib import admin, messages

from outbox.contrib.django import conf
from outbox.contrib.django.models import FailedJob, JobResult, QuarantinedIntent
from outbox.db.rows import Failure, without_messages
from outbox.errors import OutboxError


def _at(ms: int | None) -> str:
    """Database milliseconds as UTC to the second, on list and change pages alike."""
    return "" if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat(" ", "seconds")


def _time(field: str) -> Any:
    """The admin column (and change-page field) showing ``field`` by ``_at``."""

    @admin.display(description=field.replace("_", " "), ordering=field)
    def shown(self: Any, obj: Any) -> str:
        return _at(getattr(obj, field))

    return shown


class _ReadOnly(admin.ModelAdmin):
    list_per_page = 50

    def get_queryset(self, request: Any) -> Any:
        return super().get_queryset(request).using(conf.alias())

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    # Model fields a method of the admin shows instead: times (database milliseconds) as
    # the list pages show them, and, while payloads are hidden, without their private part.
    shown_as: dict[str, str] = {}
    private_shown_as: dict[str, str] = {}

    def get_fields(self, request: Any, obj: Any = None) -> Any:
        fields = [self.shown_as.get(f.name, f.name) for f in self.model._meta.fields]
        if not conf.setting()["ADMIN_SHOW_PAYLOADS"]:
            fields = [
                self.private_shown_as.get(f, f)
                for f in fields if f not in ("payload", "return_value")
            ]
        return fields

    def get_readonly_fields(self, request: Any, obj: Any = None) -> Any:
        return self.get_fields(request, obj)

    def _each(self, request: Any, queryset: Any, verb: str, act: Any) -> None:
        """``act(conn, message_id)`` for each selected row; counts and errors reported."""
        done, failed = 0, 0
        with conf.database().connect() as conn:
            for message_id in queryset.values_list("message_id", flat=True):
                try:
                    done += int(bool(act(conn, message_id)))
                except OutboxError as exc:
                    failed += 1
                    self.message_user(request, f"{message_id}: {exc}", messages.ERROR)
        self.message_user(request, f"{verb} {done} of {done + failed}", messages.SUCCESS)


@admin.register(FailedJob)
class FailedJobAdmin(_ReadOnly):
    list_display = ("message_id", "job_name", "queue", "attempts", "exception_class", "failed")
    list_filter = ("queue", "job_name")
    search_fields = ("message_id", "job_name")
    actions = ("retry", "forget")
    shown_as = {"failed_at": "failed"}
    private_shown_as = {"exception_trace": "traceback"}
    failed = _time("failed_at")

    @admin.display(description="exception trace")
    def traceback(self, obj: FailedJob) -> str:
        if not obj.exception_trace:
            return ""
        return without_messages(Failure(obj.exception_class, "", obj.exception_trace))

    @admin.action(description="Retry (back to the queue, attempts reset)",
                  permissions=["retry"])
    def retry(self, request: Any, queryset: Any) -> None:
        from outbox.queue import admin as queue_admin

        self._each(request, queryset, "requeued", queue_admin.retry)

    @admin.action(description="Forget (delete the dead letter)", permissions=["forget"])
    def forget(self, request: Any, queryset: Any) -> None:
        from outbox.queue import admin as queue_admin

        self._each(request, queryset, "forgot", queue_admin.forget)

    def has_retry_permission(self, request: Any) -> bool:
        return bool(request.user.has_perm("outbox.retry_failedjob"))

    def has_forget_permission(self, request: Any) -> bool:
        return bool(request.user.has_perm("outbox.forget_failedjob"))


@admin.register(QuarantinedIntent)
class QuarantinedIntentAdmin(_ReadOnly):
    list_display = ("message_id", "job_name", "queue", "failure_reason", "failed")
    search_fields = ("message_id", "job_name")
    actions = ("retry",)
    shown_as = {"created_at": "created", "failed_at": "failed"}
    created, failed = _time("created_at"), _time("failed_at")

    def get_queryset(self, request: Any) -> Any:
        return super().get_queryset(request).filter(state="failed")

    @admin.action(description="Retry (back to pending once it verifies)",
                  permissions=["retry"])
    def retry(self, request: Any, queryset: Any) -> None:
        from outbox.relay import admin as relay_admin

        self._each(request, queryset, "requeued", relay_admin.retry)

    def has_retry_permission(self, request: Any) -> bool:
        return bool(request.user.has_perm("outbox.retry_quarantinedintent"))


@admin.register(JobResult)
class JobResultAdmin(_ReadOnly):
    list_display = ("message_id", "job_name", "queue", "status", "attempts", "finished")
    list_filter = ("status", "queue")
    search_fields = ("message_id", "job_name")
    actions = None
    shown_as = {"enqueued_at": "enqueued", "started_at": "started", "finished_at": "finished"}
    enqueued, started, finished = _time("enqueued_at"), _time("started_at"), _time("finished_at")
