"""What a fresh interpreter imports: the public names and the ``outbox`` commands load on
first use, and loading lazily changes nothing a caller can see.

Every ``outbox`` command (and many tests) is a fresh interpreter; each used to import
the whole package and every command module first. These run a fresh interpreter too,
since in this one everything is long imported.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from textwrap import dedent

import pytest

import outbox
import outbox.queue
from outbox.cli.commands import MODULES


def _fresh(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", dedent(code)], capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.parametrize("module", sorted(MODULES))
def test_the_command_map_names_what_each_module_exports(module: str) -> None:
    exported = importlib.import_module(f"outbox.cli.{module}").commands
    assert sorted(c.name or "" for c in exported) == sorted(MODULES[module])


def test_a_command_imports_its_own_module_and_not_the_others() -> None:
    out = _fresh(
        """
        import sys
        import outbox
        from outbox.cli import main
        main.commands["status"]  # as click looks it up for `outbox status`
        print(sorted(m for m in sys.modules if m.startswith("outbox.cli.")))
        print(sorted(m for m in sys.modules if m in {"outbox.queue.worker", "outbox.workflows"}))
        """
    ).splitlines()
    loaded = set(ast.literal_eval(out[0]))  # a list of names, printed by the child
    assert "outbox.cli.relay" in loaded  # `status` lives there
    assert not loaded & {"outbox.cli.queue", "outbox.cli.scheduler", "outbox.cli.dashboard"}
    assert out[1] == "[]", "`outbox status` imported the worker or the workflows"


def test_every_public_name_is_the_object_its_module_defines() -> None:
    for package in (outbox, outbox.queue):
        for name in package.__all__:
            assert getattr(package, name) is not None, name
    assert set(outbox.__all__) <= set(dir(outbox))
    assert outbox.sealing is importlib.import_module("outbox.job.sealing")
    assert outbox.cancel_job is importlib.import_module("outbox.queue.control").cancel
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        outbox.nothing  # noqa: B018


def test_a_name_shared_with_a_submodule_stays_the_function() -> None:
    """``outbox.record`` and ``outbox.queue.push`` are modules and functions: whichever
    module imports the submodule first, the package's name is the function."""
    out = _fresh(
        """
        import outbox.events, outbox.queue.push
        from outbox import record, push
        from outbox.queue import push as queue_push
        print(callable(record), callable(push), callable(queue_push))
        """
    )
    assert out.split() == ["True", "True", "True"]


def test_import_outbox_puts_in_the_hooks_the_modules_below_read() -> None:
    """record() reads the caller's span through the hook outbox.tracing puts in as it
    loads, outbox.job converts typed values through outbox.job.typed's: ``import
    outbox`` must load both, whatever else it leaves for later."""
    out = _fresh(
        """
        import sys
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from outbox import record  # and nothing else of outbox
        trace.set_tracer_provider(TracerProvider())
        with trace.get_tracer("t").start_as_current_span("request"):
            print(sys.modules["outbox.record"].capture_trace())
        print(sys.modules["outbox.job"].typed_job.__module__)
        """
    ).splitlines()
    assert out[0].startswith("00-"), out  # a W3C traceparent, not None
    assert out[1] == "outbox.job.typed"
