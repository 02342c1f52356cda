"""``outbox init [PATH]``: a starter ``jobs.py`` for a new project.

It never overwrites: an existing PATH is an error, and there is deliberately no
``--force`` (a jobs module is code someone wrote; move it away yourself).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import click

TEMPLATE = "jobs.py.txt"


def starter() -> str:
    """The text ``outbox init`` writes."""
    return (resources.files("outbox.templates") / TEMPLATE).read_text(encoding="utf-8")


def module_of(path: Path) -> str | None:
    """The ``MODULE`` of ``--app MODULE:registry`` for ``path`` when run from the cwd
    (``None`` when ``path`` is outside it)."""
    try:
        relative = path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return None
    return ".".join(relative.with_suffix("").parts)


@click.command("init")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path), default="jobs.py")
def init_command(path: Path) -> None:
    """Write a starter jobs module at PATH (default ./jobs.py); never overwrites."""
    if path.suffix != ".py":
        raise click.BadParameter("must end in .py (it is a Python module)", param_hint="PATH")
    if not path.parent.is_dir():
        raise click.ClickException(f"{path.parent} is not a folder; create it first")
    try:
        with path.open("x", encoding="utf-8") as out:
            out.write(starter())
    except FileExistsError:
        raise click.ClickException(
            f"{path} exists; outbox init never overwrites (move it away or name another PATH)"
        ) from None
    except OSError as exc:  # a folder we may not write in (permissions, a read-only mount)
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from None
    module = module_of(path)
    app = f"{module or path.stem}:registry"
    click.echo(f"wrote {path}: a registry with one job and one periodic job. Next:")
    click.echo("  outbox migrate")
    click.echo(f"  outbox relay --watch & outbox scheduler --app {app} &")
    click.echo(f"  outbox worker default --app {app}")
    if module is None:
        click.echo(f"  (run them from {path.parent.resolve()}, where the module is importable)")


commands = [init_command]
