"""Read-only views of outbox's own tables for Django's admin (``managed = False``: the
tables belong to outbox's migrations; Django never creates or alters them). Times are
the database's milliseconds since the UNIX epoch, as outbox stores them."""

from __future__ import annotations

from django.db import models


class FailedJob(models.Model):
    """A dead letter: a job that used its attempts, or failed permanently."""

    id = models.BigAutoField(primary_key=True)
    message_id = models.CharField(max_length=36, unique=True)
    queue = models.CharField(max_length=200)
    job_name = models.CharField(max_length=200)
    payload = models.TextField()
    attempts = models.IntegerField()
    exception_class = models.CharField(max_length=200)
    exception_trace = models.TextField(null=True)
    failed_at = models.BigIntegerField()

    class Meta:
        managed = False
        db_table = "outbox_failed_jobs"
        verbose_name = "dead letter"
        ordering = ("-id",)
        default_permissions = ("view",)
        permissions = (("retry_failedjob", "Can retry dead letters"),
                       ("forget_failedjob", "Can forget dead letters"))

    def __str__(self) -> str:
        return f"{self.job_name} {self.message_id}"


class QuarantinedIntent(models.Model):
    """An intent the relay refused to hand off (it no longer verifies)."""

    id = models.BigAutoField(primary_key=True)
    message_id = models.CharField(max_length=36, unique=True)
    queue = models.CharField(max_length=200)
    job_name = models.CharField(max_length=200)
    payload = models.TextField(null=True)
    state = models.CharField(max_length=16)
    created_at = models.BigIntegerField()
    failed_at = models.BigIntegerField(null=True)
    failure_reason = models.CharField(max_length=64, null=True)

    class Meta:
        managed = False
        db_table = "outbox_messages"
        verbose_name = "quarantined intent"
        ordering = ("-id",)
        default_permissions = ("view",)
        permissions = (("retry_quarantinedintent", "Can retry quarantined intents"),)

    def __str__(self) -> str:
        return f"{self.job_name} {self.message_id}"


class JobResult(models.Model):
    """A kept job result (``outbox.results``)."""

    message_id = models.CharField(max_length=36, primary_key=True)
    queue = models.CharField(max_length=200)
    job_name = models.CharField(max_length=200)
    status = models.CharField(max_length=16)
    payload = models.TextField()
    return_value = models.TextField(null=True)
    attempts = models.IntegerField()
    enqueued_at = models.BigIntegerField()
    started_at = models.BigIntegerField(null=True)
    finished_at = models.BigIntegerField()
    worker_id = models.CharField(max_length=200, null=True)
    exception_class = models.CharField(max_length=200, null=True)
    exception_trace = models.TextField(null=True)

    class Meta:
        managed = False
        db_table = "outbox_job_results"
        verbose_name = "job result"
        ordering = ("-finished_at",)
        default_permissions = ("view",)

    def __str__(self) -> str:
        return f"{self.job_name} {self.message_id}"
