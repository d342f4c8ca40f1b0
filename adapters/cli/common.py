"""What the commands share: settings, the store and its views, the running engine."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any, TypeVar

from tether.adapters.config import ConfigError, Settings, load_settings_with_sources

EXIT_USAGE = 2


def expected_errors() -> tuple[type[BaseException], ...]:
    from eventsourcing.persistence import PersistenceError

    from tether.actors.gatekeeper.security import PolicyError
    from tether.actors.ports import BusError
    from tether.actors.runtime import AskTimeout, RemoteError
    from tether.adapters.engine_lock import EngineRunning
    from tether.adapters.nats_server import NatsServerError
    from tether.events.codec import DecodeFailure

    return (
        BusError, AskTimeout, RemoteError, NatsServerError, DecodeFailure, PersistenceError,
        PolicyError, EngineRunning,
        TimeoutError, OSError,
    )


EXPECTED_ERRORS = expected_errors()


def describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if type(exc).__module__.startswith(("eventsourcing", "psycopg", "sqlite3")):
        return f"the event store failed: {text}"
    return text


NO_MODEL_HELP = """\
tether: no model is configured.
  To use the Anthropic API, set your key:      export ANTHROPIC_API_KEY=sk-ant-...
  To use the local scripted model server:      tether fake-llm --script FILE &
                                               export ANTHROPIC_BASE_URL=<the URL it prints>
  (`tether demo` needs neither: it runs the bundled script.)"""


def settings_of(args: argparse.Namespace) -> Settings:
    return load_settings_with_sources(config_path=args.config).settings


def provider_of(settings: Settings) -> Any:
    if not settings.anthropic_api_key and not settings.anthropic_base_url:
        print(NO_MODEL_HELP, file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    from tether.adapters.anthropic_provider import AnthropicProvider

    return AnthropicProvider(
        api_key=settings.anthropic_api_key or None,
        base_url=settings.anthropic_base_url or None,
    )


def wait_for_signal() -> None:
    """Block until SIGINT or SIGTERM."""
    stop = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    while not stop.wait(0.5):
        pass


def remote_bus(settings: Settings, role: str = "connector") -> tuple[Any, Any]:
    """A bus connected to the running engine, and its subjects.

    Signed in as the OS user's connector (``role`` ``"connector"``: its own inbox and
    manager subjects), or as the engine (``"engine"``: connectors that authenticate their
    users themselves, ``tether telegram``); on the embedded server with the credentials
    the engine keeps in the state directory, on an external one with the settings'.
    """
    from tether.adapters.nats_auth import client_auth
    from tether.adapters.nats_bus import NatsBus
    from tether.events.subjects import Subjects

    url = settings.nats_url or read_nats_url(settings)
    auth = client_auth(settings, "engine" if role == "engine" else "connector")
    return NatsBus(url, name="tether-cli", auth=auth,
                   connect_timeout=settings.nats_connect_timeout), Subjects(settings.namespace)


T = TypeVar("T")


def ask_engine(args: argparse.Namespace, request: Any, reply: type[T],
                timeout: float = 15.0) -> T:
    """Ask the running engine's session manager (found as for ``chat --remote``)."""
    from tether.actors.runtime import ask
    from tether.adapters.nats_auth import local_principal

    bus, subjects = remote_bus(settings_of(args))
    principal = local_principal()  # a connector asks on its own manager subject
    try:
        return ask(bus, subjects.manager_for(principal) if principal else subjects.manager,
                   request, reply, timeout=timeout)
    finally:
        bus.close()


@contextlib.contextmanager
def opened_store(args: argparse.Namespace) -> Iterator[tuple[Settings, Any]]:
    """The settings and the event store, closed afterwards."""
    settings = settings_of(args)
    app = open_store(settings)
    try:
        yield settings, app
    finally:
        app.close()


def open_store(settings: Settings) -> Any:
    from tether.adapters.store import open_application

    return open_application(settings)


def resolve_session(app: Any, view_rows: list[Any], ref: str) -> str:
    if app.session(ref) is not None:
        return ref
    for row in view_rows:
        if row.name == ref:
            return str(row.session_id)
    raise ConfigError(f"no session with id or name {ref!r}; `tether sessions` lists them")


@contextlib.contextmanager
def caught_up(settings: Settings, app: Any, kind: Any, purpose: str) -> Iterator[Any]:
    """A read model, caught up with the log first (the engine may not be running)."""
    from tether.adapters.store import open_view
    from tether.projections.follower import Follower

    view = open_view(kind, app, settings, purpose)
    try:
        Follower(app, name="cli", position=view.position, consume=view.consume).catch_up()
        passed = view.passed_over()
        if passed:
            shown = ", ".join(str(row["position"]) for row in passed[:5])
            print(f"tether: warning: this read model ({purpose}) passed over {len(passed)} "
                  f"event(s) it could not apply (positions {shown}"
                  f"{', ...' if len(passed) > 5 else ''}): what follows may be incomplete; "
                  "the engine's log says why (docs/operations.md, backups: rebuild it once "
                  "fixed)", file=sys.stderr)
        yield view
    finally:
        view.close()


@contextlib.contextmanager
def view_of(args: argparse.Namespace, kind: Any, purpose: str) -> Iterator[Any]:
    """A read model of the configured store, caught up, closed afterwards."""
    with opened_store(args) as (settings, app), caught_up(settings, app, kind, purpose) as view:
        yield view


def session_rows(settings: Settings, app: Any) -> list[Any]:
    from tether.projections.session_view import SessionView

    with caught_up(settings, app, SessionView, "views") as view:
        return list(view.summaries())


def read_nats_url(settings: Settings) -> str:
    path = os.path.join(settings.state_dir, "nats.url")
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        raise ConfigError(
            "no engine found: set TETHER_NATS_URL or start `tether serve` first "
            f"(it writes {path})"
        ) from None
