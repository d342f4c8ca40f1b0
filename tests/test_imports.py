"""Each package of Tether, and each module of ``actors/``, imports on its own, first thing
in a fresh interpreter: an import cycle that only resolves when something else happens
to be imported first (the engine's entry points always import the host first) would
break a program or a tool that starts from that module."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("actors", "adapters", "events", "projections")


def first_imports() -> list[str]:
    """The modules to import first: every package, and every module directly in
    ``actors/`` (where the packages import one another's modules)."""
    names = []
    for layer in LAYERS:
        for init in sorted((ROOT / layer).rglob("__init__.py")):
            names.append(".".join(("tether", *init.parent.relative_to(ROOT).parts)))
    names += [f"tether.actors.{f.stem}" for f in sorted((ROOT / "actors").glob("*.py"))
              if f.stem != "__init__"]
    return names


# One interpreter loads the libraries once, then forks a clean child per module (cheap:
# the child runs only Tether's own code); a child that fails prints why.
PROBE = textwrap.dedent("""
    import importlib, os, sys
    for name in ("msgspec", "pykka", "nats", "anthropic", "eventsourcing.application",
                 "eventsourcing.sqlite", "httpx", "starlette", "uvicorn", "prometheus_client"):
        importlib.import_module(name)
    failed = 0
    for name in sys.argv[1:]:
        pid = os.fork()
        if pid == 0:
            try:
                importlib.import_module(name)
            except BaseException as exc:
                print(f"{name}: {type(exc).__name__}: {exc}", flush=True)
                os._exit(1)
            os._exit(0)
        failed += os.waitpid(pid, 0)[1] != 0
    sys.exit(1 if failed else 0)
""")


@pytest.mark.slow
def test_every_package_imports_first_in_a_fresh_interpreter() -> None:
    names = first_imports()
    assert "tether.actors.session" in names and "tether.actors.modes" in names
    result = subprocess.run([sys.executable, "-c", PROBE, *names], capture_output=True,
                            text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
