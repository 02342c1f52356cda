"""An Alembic env.py with outbox's tables in the history (see outbox/alembic.py).

Yours already exists: the outbox lines are the import and ``include_object``.
"""

from alembic import context
from sqlalchemy import engine_from_config, pool

import outbox.alembic

config = context.config
target_metadata = None  # your application's MetaData, e.g. Base.metadata


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        include_object=outbox.alembic.include_object,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = engine_from_config(
        config.get_section(config.config_ini_section, {}),
        prefix="sqlalchemy.",
        poolclass=pool.NullPool,
    )
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            include_object=outbox.alembic.include_object,
        )
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
