"""The admin's read-only views of outbox's tables: unmanaged, so no SQL runs."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('outbox', '0001_outbox_tables'),
    ]

    operations = [
        migrations.CreateModel(
            name='FailedJob',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('message_id', models.CharField(max_length=36, unique=True)),
                ('queue', models.CharField(max_length=200)),
                ('job_name', models.CharField(max_length=200)),
                ('payload', models.TextField()),
                ('attempts', models.IntegerField()),
                ('exception_class', models.CharField(max_length=200)),
                ('exception_trace', models.TextField(null=True)),
                ('failed_at', models.BigIntegerField()),
            ],
            options={
                'verbose_name': 'dead letter',
                'db_table': 'outbox_failed_jobs',
                'ordering': ('-id',),
                'permissions': (
                    ('retry_failedjob', 'Can retry dead letters'),
                    ('forget_failedjob', 'Can forget dead letters'),
                ),
                'managed': False,
                'default_permissions': ('view',),
            },
        ),
        migrations.CreateModel(
            name='JobResult',
            fields=[
                ('message_id', models.CharField(max_length=36, primary_key=True, serialize=False)),
                ('queue', models.CharField(max_length=200)),
                ('job_name', models.CharField(max_length=200)),
                ('status', models.CharField(max_length=16)),
                ('payload', models.TextField()),
                ('return_value', models.TextField(null=True)),
                ('attempts', models.IntegerField()),
                ('enqueued_at', models.BigIntegerField()),
                ('started_at', models.BigIntegerField(null=True)),
                ('finished_at', models.BigIntegerField()),
                ('worker_id', models.CharField(max_length=200, null=True)),
                ('exception_class', models.CharField(max_length=200, null=True)),
                ('exception_trace', models.TextField(null=True)),
            ],
            options={
                'verbose_name': 'job result',
                'db_table': 'outbox_job_results',
                'ordering': ('-finished_at',),
                'managed': False,
                'default_permissions': ('view',),
            },
        ),
        migrations.CreateModel(
            name='QuarantinedIntent',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('message_id', models.CharField(max_length=36, unique=True)),
                ('queue', models.CharField(max_length=200)),
                ('job_name', models.CharField(max_length=200)),
                ('payload', models.TextField(null=True)),
                ('state', models.CharField(max_length=16)),
                ('created_at', models.BigIntegerField()),
                ('failed_at', models.BigIntegerField(null=True)),
                ('failure_reason', models.CharField(max_length=64, null=True)),
            ],
            options={
                'verbose_name': 'quarantined intent',
                'db_table': 'outbox_messages',
                'ordering': ('-id',),
                'permissions': (('retry_quarantinedintent', 'Can retry quarantined intents'),),
                'managed': False,
                'default_permissions': ('view',),
            },
        ),
    ]
