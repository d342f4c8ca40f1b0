"""The ``tether`` command line.

Every command has ``--help``. Configuration comes from ``tether.toml`` and ``TETHER_*``
environment variables (see ``tether config``); a bad value is reported as one line naming
the key, never as a traceback. Slow imports (the anthropic SDK) happen only in the
commands that call the model.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import getpass
import importlib.metadata
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import msgspec

from adapters.config import ConfigError, Settings, load_settings_with_sources, render_settings
from adapters.logs import LOG_FORMATS, configure_logging

EXIT_USAGE = 2


def _expected_errors() -> tuple[type[BaseException], ...]:
    from eventsourcing.persistence import PersistenceError

    from actors.gatekeeper.security import PolicyError
    from actors.ports import BusError
    from actors.runtime import AskTimeout, RemoteError
    from adapters.engine_lock import EngineRunning
    from adapters.nats_server import NatsServerError
    from events.codec import DecodeFailure

    return (
        BusError, AskTimeout, RemoteError, NatsServerError, DecodeFailure, PersistenceError,
        PolicyError, EngineRunning,
        TimeoutError, OSError,
    )


EXPECTED_ERRORS = _expected_errors()


def _describe(exc: BaseException) -> str:
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


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings_with_sources(config_path=args.config).settings


def _provider(settings: Settings) -> Any:
    if not settings.anthropic_api_key and not settings.anthropic_base_url:
        print(NO_MODEL_HELP, file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    from adapters.anthropic_provider import AnthropicProvider

    return AnthropicProvider(
        api_key=settings.anthropic_api_key or None,
        base_url=settings.anthropic_base_url or None,
    )


def _wait_for_signal() -> None:
    """Block until SIGINT or SIGTERM."""
    stop = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    while not stop.wait(0.5):
        pass


# --- commands --------------------------------------------------------------------------


def cmd_config(args: argparse.Namespace) -> int:
    loaded = load_settings_with_sources(config_path=args.config)
    print(render_settings(loaded.settings, loaded.sources))
    print(_sandbox_text(loaded.settings).splitlines()[0])
    return 0


def _sandbox_text(settings: Settings) -> str:
    from adapters.sandbox import probe, render_report

    return render_report(None if settings.sandbox == "off" else probe())


def cmd_sandbox(args: argparse.Namespace) -> int:
    settings = _settings(args)
    text = _sandbox_text(settings)
    print(text)
    return 0 if settings.sandbox == "off" or "UNAVAILABLE" not in text else 1


def cmd_token(args: argparse.Namespace) -> int:
    from adapters.http_token import TokenError, load_token, rotate_token, token_path

    settings = _settings(args)
    try:
        token = rotate_token(settings.state_dir) if args.rotate else load_token(
            settings.state_dir)
    except (TokenError, OSError) as exc:
        print(f"tether: {exc}", file=sys.stderr)
        return 1
    print(token)
    if args.rotate:
        print(f"tether: a new token is in {token_path(settings.state_dir)}; a running "
              "`tether serve` takes it at its next start", file=sys.stderr)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from adapters.host import Host

    settings = _settings(args)
    if args.http is not None:
        settings = msgspec.structs.replace(settings, http_port=args.http)
    provider = _provider(settings)
    host = Host(settings, provider=provider, serve_http=True)
    host.start()
    try:
        from adapters.sandbox import render_report

        print(
            f"tether: serving on {host.nats_url} (namespace {host.subjects.namespace}); "
            f"send UserMessage JSON to {host.subjects.inbox}; Ctrl-C stops",
            flush=True,
        )
        print(f"tether: {render_report(host.sandbox_report).splitlines()[0]}", flush=True)
        if settings.http_port:
            print(f"tether: HTTP connector on {host.http.url} (POST /messages, "
                  "GET /sessions/ID/events, GET /metrics; `tether token` shows the bearer "
                  "token)", flush=True)
        _wait_for_signal()
    finally:
        host.stop()
    print("tether: stopped", flush=True)
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from actors.commands import COMMANDS
    from adapters.engine_lock import running_engine
    from adapters.line_editor import line_readers
    from adapters.terminal import CHAT_ONLY, TerminalConnector

    settings = _settings(args)
    host: Any = None
    running = None if args.remote else running_engine(settings.state_dir, settings.namespace)
    if running is not None:
        print(f"tether chat: an engine is running here (pid {running.get('pid', '?')}): "
              "talking to it", flush=True)
    if args.remote or running is not None:
        bus, subjects = _remote(settings)
        close: Callable[[], None] = bus.close
    else:
        from adapters.host import Host

        host = Host(settings, provider=_provider(settings)).start()
        bus, subjects, close = host.bus, host.subjects, host.stop
    read_message, read_answer = line_readers(
        os.path.join(settings.state_dir, "chat_history"), {**COMMANDS, **CHAT_ONLY})
    terminal = TerminalConnector(bus, subjects, workspace=settings.workspace,
                                 answer=read_answer)
    terminal.session_id = args.session or ""
    print("tether chat: type a message, Enter to send (Tab completes a /command, the arrows "
          "recall earlier messages); Ctrl-D or /quit to leave.", flush=True)
    try:
        while True:
            try:
                text = read_message("you> ").strip()
            except EOFError:
                break
            if not text:
                continue
            if text in ("/quit", "/exit"):
                break
            terminal.say(text)
            terminal.print_turn(timeout=args.timeout)
    except KeyboardInterrupt:
        pass
    finally:
        terminal.close()
        close()
    if terminal.session_id:
        print(f"\nsession {terminal.session_id}; continue with: tether chat --session "
              f"{terminal.session_id}")
    return 0


def _remote(settings: Settings, role: str = "connector") -> tuple[Any, Any]:
    """A bus connected to the running engine, and its subjects.

    Signed in as the OS user's connector (``role`` ``"connector"``: its own inbox and
    manager subjects), or as the engine (``"engine"``: connectors that authenticate their
    users themselves, ``tether telegram``); on the embedded server with the credentials
    the engine keeps in the state directory, on an external one with the settings'.
    """
    from adapters.nats_auth import client_auth
    from adapters.nats_bus import NatsBus
    from events.subjects import Subjects

    url = settings.nats_url or _read_nats_url(settings)
    auth = client_auth(settings, "engine" if role == "engine" else "connector")
    return NatsBus(url, name="tether-cli", auth=auth), Subjects(settings.namespace)


def cmd_telegram(args: argparse.Namespace) -> int:
    from telegram.error import TelegramError

    from adapters.telegram import TelegramConnector, allowlist_problem

    settings = _settings(args)
    if not settings.telegram_token:
        raise ConfigError("no Telegram bot token: set telegram_token in tether.toml or "
                          "TETHER_TELEGRAM_TOKEN (BotFather gives one)")
    problem = allowlist_problem(settings.middleware)
    if problem is not None and not args.open:
        raise ConfigError(f"{problem}; add an allowlist under [middleware] allow "
                          "(e.g. \"telegram-*\" = [\"YOUR_USER_ID\"]) or pass --open")
    # It publishes its chats' messages on the bare inbox, naming each Telegram user: a
    # connector that authenticates its users itself signs in as the engine.
    bus, subjects = _remote(settings, role="engine")
    connector = TelegramConnector(
        bus, subjects, token=settings.telegram_token,
        base_url=settings.telegram_base_url or None, throttle=settings.telegram_throttle,
        can_edit=settings.telegram_can_edit, workspace=settings.workspace)
    try:
        try:
            connector.start()
        except TelegramError as exc:  # a wrong token, an unreachable Bot API
            why = str(exc).replace(settings.telegram_token, "***")  # never print the token
            raise ConfigError(f"the Telegram bot could not start: {why}") from None
        print(f"tether: Telegram connector running for namespace {subjects.namespace}; "
              "Ctrl-C stops", flush=True)
        _wait_for_signal()
    finally:
        connector.stop()
        bus.close()
    return 0


T = TypeVar("T")


def _ask_engine(args: argparse.Namespace, request: Any, reply: type[T],
                timeout: float = 15.0) -> T:
    """Ask the running engine's session manager (found as for ``chat --remote``)."""
    from actors.runtime import ask
    from adapters.nats_auth import local_principal

    bus, subjects = _remote(_settings(args))
    principal = local_principal()  # a connector asks on its own manager subject
    try:
        return ask(bus, subjects.manager_for(principal) if principal else subjects.manager,
                   request, reply, timeout=timeout)
    finally:
        bus.close()


def cmd_kill(args: argparse.Namespace) -> int:
    from events.messages import Killed, KillSession

    killed = _ask_engine(args, KillSession(session_id=args.session, reason=args.reason),
                         Killed, timeout=5.0)
    if not killed.found:
        print(f"tether: no active session {args.session!r}", file=sys.stderr)
        return 1
    print(f"killed {killed.session_id}")
    return 0


def cmd_fork(args: argparse.Namespace) -> int:
    from actors.runtime import RemoteError
    from events.messages import Accepted, ForkSession

    at = args.at or ""
    if args.at_node:
        request = ForkSession(session_id=args.session, at_node=args.at_node,
                              user=getpass.getuser())
    elif at.isdigit():
        request = ForkSession(session_id=args.session, at_version=int(at),
                              user=getpass.getuser())
    else:
        request = ForkSession(session_id=args.session, at_node=at, user=getpass.getuser())
    try:
        forked = _ask_engine(args, request, Accepted)
    except RemoteError as exc:
        # Node ids are hex, so an all-digit --at may be a node's prefix: with no such
        # event, it is tried as a node.
        if not (request.at_version and len(at) >= 4
                and exc.reply.error == "unknown_session"):
            raise
        forked = _ask_engine(args, ForkSession(session_id=args.session, at_node=at,
                                               user=getpass.getuser()), Accepted)
    print(f"forked {args.session} into {forked.session_id}; continue with: tether chat "
          f"--remote --session {forked.session_id}")
    return 0


def cmd_tree(args: argparse.Namespace) -> int:
    from actors.conversation import render_tree

    view = _whole_tree(args, args.session)
    if args.json:
        print(msgspec.json.encode(view).decode())
        return 0
    if not view.nodes:
        print(f"session {view.session_id} has no messages yet")
        return 0
    for line in render_tree(view.nodes, view.cursor, width=shutil.get_terminal_size().columns):
        print(line)
    print(f"\n* = where session {view.session_id} stands ({view.cursor[:8]}); | = its path. "
          "Move with: tether branch SESSION NODE")
    return 0


def _whole_tree(args: argparse.Namespace, session: str, page_size: int = 0) -> Any:
    """The session's whole tree as one TreeView, asked for page by page (a long session's
    tree is larger than one bus message may be; ``page_size``: nodes a page, at most and
    by default :data:`~events.messages.TREE_PAGE_MAX`); started again when the tree
    changes while it is read."""
    from events.messages import TREE_PAGE_MAX, TreeQuery, TreeView

    size = min(page_size or TREE_PAGE_MAX, TREE_PAGE_MAX)
    for _ in range(5):
        first = _ask_engine(args, TreeQuery(session_id=session, limit=size), TreeView)
        nodes = list(first.nodes)
        while len(nodes) < first.total:
            page = _ask_engine(args, TreeQuery(session_id=first.session_id, offset=len(nodes),
                                               limit=size), TreeView)
            if page.version != first.version or not page.nodes:
                break
            nodes.extend(page.nodes)
        if len(nodes) >= first.total:
            return msgspec.structs.replace(first, nodes=nodes)
    raise SystemExit("tether: the tree kept changing while it was read; try again")


def cmd_branch(args: argparse.Namespace) -> int:
    from events.messages import BranchTo

    return _move(args, BranchTo(session_id=args.session, node_id=args.node))


def cmd_edit(args: argparse.Namespace) -> int:
    from events.messages import EditNode

    text = sys.stdin.read() if args.text == "-" else args.text
    return _move(args, EditNode(session_id=args.session, node_id=args.node, text=text))


def cmd_split(args: argparse.Namespace) -> int:
    from events.messages import SplitNode

    return _change_tree(args, SplitNode(session_id=args.session, node_id=args.node,
                                        position=args.position))


def cmd_delete(args: argparse.Namespace) -> int:
    from events.messages import DeleteNode

    return _change_tree(args, DeleteNode(session_id=args.session, node_id=args.node,
                                         mode="reparent" if args.reparent else "cascade"))


def cmd_bookmark(args: argparse.Namespace) -> int:
    from events.messages import BookmarkNode

    if not args.remove and not args.node:
        print("tether bookmark: give the NODE the bookmark names, or --remove",
              file=sys.stderr)
        return EXIT_USAGE
    return _change_tree(args, BookmarkNode(session_id=args.session, name=args.name,
                                           node_id=args.node or "", remove=args.remove))


def _change_tree(args: argparse.Namespace, request: Any) -> int:
    from events.messages import TreeChanged

    changed = _ask_engine(args, request, TreeChanged)
    print(f"session {changed.session_id}: {changed.detail} (see tether tree "
          f"{changed.session_id})")
    return 0


def _move(args: argparse.Namespace, request: Any) -> int:
    from events.messages import Branched

    moved = _ask_engine(args, request, Branched)
    print(f"session {moved.session_id} now stands at {moved.node_id[:8]} "
          f"({moved.messages} messages); its next message continues from there "
          f"(or: tether generate {moved.session_id})")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from events.messages import Accepted, Generate

    accepted = _ask_engine(args, Generate(
        session_id=args.session, n=args.n, tools=not args.no_tools,
        max_tool_iterations=args.max_tool_iterations), Accepted)
    print(f"generating in {accepted.session_id}: {args.n} completion"
          f"{'s' if args.n != 1 else ''}; follow with tether chat --remote --session "
          f"{accepted.session_id}, then tether tree {accepted.session_id}")
    return 0


def _read_nats_url(settings: Settings) -> str:
    path = os.path.join(settings.state_dir, "nats.url")
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        raise ConfigError(
            "no engine found: set TETHER_NATS_URL or start `tether serve` first "
            f"(it writes {path})"
        ) from None


def cmd_demo(args: argparse.Namespace) -> int:
    from adapters.demo import run_demo

    return run_demo(_settings(args))


@contextlib.contextmanager
def _store(args: argparse.Namespace) -> Iterator[tuple[Settings, Any]]:
    """The settings and the event store, closed afterwards."""
    settings = _settings(args)
    app = _open_store(settings)
    try:
        yield settings, app
    finally:
        app.close()


def _open_store(settings: Settings) -> Any:
    from adapters.store import open_application

    return open_application(settings)


def _resolve(app: Any, view_rows: list[Any], ref: str) -> str:
    if app.session(ref) is not None:
        return ref
    for row in view_rows:
        if row.name == ref:
            return str(row.session_id)
    raise ConfigError(f"no session with id or name {ref!r}; `tether sessions` lists them")


@contextlib.contextmanager
def _caught_up(settings: Settings, app: Any, kind: Any, purpose: str) -> Iterator[Any]:
    """A read model, caught up with the log first (the engine may not be running)."""
    from adapters.store import open_view
    from projections.follower import Follower

    view = open_view(kind, app, settings, purpose)
    try:
        Follower(app, name="cli", position=view.position, consume=view.consume).catch_up()
        yield view
    finally:
        view.close()


@contextlib.contextmanager
def _view_of(args: argparse.Namespace, kind: Any, purpose: str) -> Iterator[Any]:
    """A read model of the configured store, caught up, closed afterwards."""
    with _store(args) as (settings, app), _caught_up(settings, app, kind, purpose) as view:
        yield view


def _view(settings: Settings, app: Any) -> list[Any]:
    from projections.session_view import SessionView

    with _caught_up(settings, app, SessionView, "views") as view:
        return list(view.summaries())


def cmd_sessions(args: argparse.Namespace) -> int:
    from adapters.render import render_sessions

    with _store(args) as (settings, app):
        rows = _view(settings, app)
    if args.json:
        for row in rows:
            print(msgspec.json.encode(row).decode())
    else:
        print(render_sessions(rows))
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    from adapters.render import render_timeline

    with _store(args) as (settings, app):
        sid = _resolve(app, _view(settings, app), args.session)
        events = app.session_events(sid)
        if args.json:
            import msgspec

            for e in events:
                data = {k: v for k, v in vars(e).items() if k != "originator_id"}
                data["event"] = type(e).__name__
                print(msgspec.json.encode(data).decode())
        else:
            print(render_timeline(events))
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from adapters.render import render_session

    with _store(args) as (settings, app):
        sid = _resolve(app, _view(settings, app), args.session)
        session = app.session(sid, version=args.until)
        if session is None:
            raise ConfigError(f"session {sid} has no events")
        if args.json:
            print(msgspec.json.encode(_session_json(session)).decode())
            return 0
        if args.until is not None and args.until > session.version:
            print(f"(the session has only {session.version} events)")
        print(render_session(session))
    return 0


def _session_json(session: Any) -> dict[str, Any]:
    """A replayed session as one JSON object: its state and its history (``cost_usd``
    counts the turns that ended; ``running_turn_cost_usd`` what the turn still running at
    that event has spent)."""
    fields = ("session_id", "name", "owner", "status", "mode", "workspace", "channel",
              "model", "turns", "input_tokens", "output_tokens", "cost_usd", "budget_usd",
              "fired_rules")
    from adapters.render import running_turn_cost

    return {"version": session.version, **{f: getattr(session, f) for f in fields},
            "in_turn": session.in_turn, "running_turn_cost_usd": running_turn_cost(session),
            "history": session.history}


def _rule_line(rule: Any, engine: str, defaults: Any) -> str:
    scopes = ", ".join(
        s.kind + (f":{s.tool}" if s.tool else "") + (f"({s.glob})" if s.glob else "")
        for s in rule.scopes
    )
    repeat = rule.repeat_mode or defaults.repeat_mode
    if repeat == "after-gap":
        repeat += f" {rule.repeat_gap or defaults.repeat_gap}"
    context = rule.context_mode or defaults.context_mode
    return (
        f"{rule.name:<20} {engine:<9} {rule.origin or '-':<10} scope {scopes}; "
        f"{repeat}; {context}; interrupt {rule.interrupt}\n{'':<20} {rule.path}"
    )


def cmd_rules_list(args: argparse.Namespace) -> int:
    from actors.ttsr.match import StreamMatcher
    from actors.ttsr.monitor import rule_folders
    from actors.ttsr.rules import load_rules
    from adapters.host import user_rules_dir

    settings = _settings(args)
    workspace = os.path.abspath(args.workspace or settings.workspace)
    folders = rule_folders(workspace, settings.rules_dir, user_rules_dir())
    rule_set = load_rules(folders)
    matcher = StreamMatcher(rule_set.rules, window=settings.ttsr.window)
    state = "on" if settings.ttsr.enabled else "OFF (ttsr.enabled = false)"
    print(f"TTSR {state}; rules for workspace {workspace}, first folder wins:")
    for origin, folder in folders:
        print(f"  {origin:<10} {folder}{'' if os.path.isdir(folder) else '  (missing)'}")
    print()
    if not rule_set.rules:
        print("no rules loaded")
    for rule in rule_set.rules:
        print(_rule_line(rule, matcher.engines[rule.name], settings.ttsr))
    for note in rule_set.shadowed:
        print(f"shadowed: {note}")
    for warning in rule_set.warnings:
        print(f"skipped: {warning}")
    return 0


def cmd_rules_check(args: argparse.Namespace) -> int:
    from pathlib import Path

    from actors.ttsr.match import StreamMatcher
    from actors.ttsr.rules import parse_rule_file

    settings = _settings(args)
    bad = 0
    for name in args.files:
        try:
            rule = parse_rule_file(Path(name))
        except ValueError as exc:
            print(f"{name}: invalid: {exc}")
            bad += 1
            continue
        engine = StreamMatcher([rule]).engines[rule.name]
        print(f"{name}: ok\n  {_rule_line(rule, engine, settings.ttsr)}")
    return 1 if bad else 0


def cmd_rules_test(args: argparse.Namespace) -> int:
    from actors.ttsr.monitor import rule_folders
    from actors.ttsr.rules import load_rules, rules_from_sources
    from actors.ttsr.whatif import what_if
    from adapters.host import user_rules_dir

    with _store(args) as (settings, app):
        sid = _resolve(app, _view(settings, app), args.session)
        session = app.session(sid)
        assert session is not None
        rule_log = app.rule_log(sid)
        if args.rules:
            rule_set, whose = load_rules([("given", args.rules)]), f"from {args.rules}"
        elif rule_log is not None and rule_log.sources:
            rule_set, whose = rules_from_sources(rule_log.sources), "in force for the session"
        else:  # a session from before the rules were recorded, or one that had none
            folders = rule_folders(session.workspace, settings.rules_dir, user_rules_dir())
            rule_set = load_rules(folders)
            whose = "none recorded for the session; from " + ", ".join(p for _, p in folders)
        for warning in rule_set.warnings:
            print(f"skipped: {warning}")
        hits = what_if(app.session_events(sid), rule_set.rules, settings.ttsr)
        print(f"{len(rule_set.rules)} rule(s) ({whose}) over session {sid} "
              f"({session.version} events): {len(hits)} hit(s)")
        for hit in hits:
            print(f"  event {hit.version:>4}  turn {hit.turn:>3}  {hit.action:<9} "
                  f"{hit.rule}  in {hit.source} at {hit.offset}")
    return 0


def cmd_rules_injections(args: argparse.Namespace) -> int:
    from projections.injection_records import InjectionRecords

    with _view_of(args, InjectionRecords, "injections") as view:
        records = view.records(args.session)
    if args.json:
        for record in records:
            print(msgspec.json.encode(record).decode())
        return 0
    if not records:
        print("no rule has fired yet")
    for r in records:
        how = "reminded after the turn" if r.deferred else "interrupted"
        print(f"{r.at}  {r.session_id}  turn {r.turn:>3}  {r.rule:<20} {how} "
              f"({r.source} at {r.offset_end})")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    import msgspec

    from projections.audit_index import AuditIndex

    with _view_of(args, AuditIndex, "audit") as view:
        if args.refused:
            refused = view.refusals(args.user)
        else:
            entries = view.query(session=args.session, user=args.user, tool=args.tool,
                                 verdict=args.verdict, tier=args.tier, since=args.since,
                                 until=args.until)
    if args.refused:
        for r in refused:
            print(msgspec.json.encode(r).decode() if args.json else
                  f"{r.at[:19]}  {r.user}@{r.channel}  {r.kind}: {r.reason}  ({r.size} bytes)")
        if not refused and not args.json:
            print("no message was refused")
        return 0
    if args.json:
        for entry in entries:
            print(msgspec.json.encode(entry).decode())
        return 0
    if not entries:
        print("no tool call matches")
    for e in entries:
        print(f"{e.proposed_at[:19]}  {e.session_id}  {e.user}@{e.channel}  {e.tool} "
              f"{e.input_summary}\n    {e.verdict or '-'} by {e.approver or '-'}: {e.reason} "
              f"-> {e.outcome}  [hash {e.action_hash[:12]}]"
              + (f"\n    contained: {e.sandbox}" if e.sandbox else ""))
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    import msgspec

    from adapters.stats import render_stats
    from projections.metrics import MetricsView

    with _view_of(args, MetricsView, "metrics") as view:
        metrics = view.snapshot()
    print(msgspec.json.encode(metrics).decode() if args.json else render_stats(metrics))
    return 0


def cmd_undo(args: argparse.Namespace) -> int:
    from actors.runtime import RemoteError
    from actors.undo import UndoError, undo_files
    from adapters.engine_lock import running_engine
    from adapters.snapshots import SnapshotStore
    from events.messages import UndoFiles, Undone

    settings = _settings(args)
    if running_engine(settings.state_dir, settings.namespace) is not None:
        # The session's actor is its one writer: the engine undoes, for its owner only.
        try:
            done = _ask_engine(args, UndoFiles(session_id=args.session, to_version=args.to),
                               Undone, timeout=60.0)
        except RemoteError as exc:
            if exc.reply.error in ("busy", "undo"):
                raise ConfigError(exc.reply.reason) from None
            raise
        restored = done.restored
    else:  # no engine, so no actor: this command is the session's only writer
        from eventsourcing.persistence import IntegrityError

        with _store(args) as (settings, app):
            sid = _resolve(app, _view(settings, app), args.session)
            session = app.session(sid)
            assert session is not None
            if session.in_turn:
                raise ConfigError(f"session {sid} is in the middle of a turn; undo it when "
                                  "it waits")
            store = SnapshotStore(os.path.join(settings.state_dir, "snapshots"))
            try:
                restored = undo_files(session, app.session_events(sid), args.to, store,
                                      app.save)
            except UndoError as exc:
                raise ConfigError(str(exc)) from None
            except IntegrityError:
                raise ConfigError(f"session {sid} changed while undoing; nothing was "
                                  "restored, try again") from None
    if not restored:
        print("nothing to undo: no file change recorded"
              + (f" after event {args.to}" if args.to is not None else ""))
    for path in restored:
        print(f"removed {path.path} (it did not exist before event {path.before})"
              if path.removed else f"restored {path.path} (as before event {path.before})")
    return 0


def cmd_fake_llm(args: argparse.Namespace, rest: list[str]) -> int:
    from adapters.fake_llm import main as fake_llm_main

    return fake_llm_main(rest)


# --- parser ----------------------------------------------------------------------------

_TIME_FORMATS = ("%Y", "%Y-%m", "%Y-%m-%d", "%Y-%m-%dT%H", "%Y-%m-%dT%H:%M",
                 "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S.%f")


def iso_time(value: str) -> str:
    """An argparse type: an ISO 8601 UTC time, as precise as wanted (``2026-11``,
    ``2026-11-22``, ``2026-11-22T14:30``...; a space may stand for the ``T``, a trailing
    ``Z`` is allowed), returned in the form the audit index compares; anything else is
    refused, naming the accepted forms."""
    text = value.strip().replace(" ", "T").removesuffix("Z")
    for form in _TIME_FORMATS:
        try:
            datetime.datetime.strptime(text, form)
        except ValueError:
            continue
        return text
    raise argparse.ArgumentTypeError(
        f"{value!r} is not a time: use ISO 8601 in UTC, as precise as you like: 2026, "
        "2026-11, 2026-11-22, 2026-11-22T14:30 or 2026-11-22T14:30:05")


def event_number(value: str) -> int:
    """An argparse type: an event number (events count from 1)."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an event number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(
            f"{number} is not an event number: a session's events count from 1")
    return number


def _version() -> str:
    try:
        return importlib.metadata.version("tether")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def cmd_completion(args: argparse.Namespace) -> int:
    import shtab

    parser = build_parser()
    kinds = {"FILE": shtab.FILE, "DIR": shtab.DIRECTORY, "PATH": shtab.FILE}

    def mark(p: argparse.ArgumentParser) -> None:
        """Complete file and folder arguments (by their metavar) with paths."""
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in dict.fromkeys(action.choices.values()):
                    mark(child)
            elif isinstance(action.metavar, str) and action.metavar in kinds:
                action.complete = kinds[action.metavar]  # type: ignore[attr-defined]

    mark(parser)
    print(shtab.complete(parser, shell=args.shell))
    return 0


def _log_format_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-format", choices=LOG_FORMATS, default="text",
                        help="how log lines are written to standard error: text (default) "
                             "or json, one object a line with the session_id of every line "
                             "about a session")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    parser = argparse.ArgumentParser(
        prog="tether",
        description="Run LLM coding-agent sessions as event-sourced actors over NATS.",
        epilog="Configuration: tether.toml and TETHER_* variables; `tether config` shows them.",
    )
    parser.add_argument("--config", metavar="FILE", help="settings file (default ./tether.toml)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the engine does")
    parser.add_argument("--version", action="version", version=f"tether {_version()}",
                        help="print Tether's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, helptext: str, func: Callable[..., int]) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=helptext, description=helptext)
        p.set_defaults(func=func)
        return p

    add("config", "print the effective settings (secrets masked) and where each came from",
        cmd_config)
    serve = add("serve", "run the engine (actors, relay, projections) until Ctrl-C or SIGTERM",
                cmd_serve)
    serve.add_argument("--http", type=int, metavar="PORT",
                       help="also serve the HTTP connector on this port (the http_port "
                            "setting; 0: none)")
    _log_format_option(serve)
    token = add("token", "print the HTTP connector's bearer token (made on first use, "
                "owner-only, in the state directory)", cmd_token)
    token.add_argument("--rotate", action="store_true",
                       help="replace it with a new one (the old one stops working when "
                            "`tether serve` starts again)")
    chat = add("chat", "chat in the terminal: type a message, watch the reply stream in",
               cmd_chat)
    chat.add_argument("--session", metavar="ID", help="continue this session")
    chat.add_argument("--remote", action="store_true",
                      help="talk to an engine already serving (TETHER_NATS_URL or the one "
                           "`tether serve` started) instead of running one in this process")
    chat.add_argument("--timeout", type=float, default=300.0,
                      help="seconds to wait for a turn (default %(default)s)")
    add("demo", "run a short scripted conversation that shows every actor, then print the "
        "session view and its event timeline", cmd_demo)
    sessions = add("sessions", "list sessions from the session view", cmd_sessions)
    sessions.add_argument("--json", action="store_true", help="one JSON object per session")
    sandbox = sub.add_parser(
        "sandbox", help="the sandbox shell, git and MCP stdio processes run in",
        description="What the sandbox (bubblewrap) can do on this machine.")
    sandbox_sub = sandbox.add_subparsers(dest="sandbox_command", metavar="ACTION",
                                         required=True)
    sandbox_sub.add_parser(
        "check", help="run the sandbox once and say what holds: namespaces, read-only file "
        "system, network off, limits (exit 1 when shell tools would be refused)",
        description="Run one tiny command in the sandbox and report each part it relies "
        "on.").set_defaults(func=cmd_sandbox)
    telegram = add("telegram", "connect a Telegram bot to the running engine (token: "
                   "telegram_token); replies stream into the chat, edited in place",
                   cmd_telegram)
    telegram.add_argument("--open", action="store_true",
                          help="run even though no allowlist covers Telegram chats (anyone "
                               "who finds the bot can use it)")
    _log_format_option(telegram)
    completion = add("completion", "print the shell completion script: "
                     "`source <(tether completion bash)`, or put it where your shell loads "
                     "completions from", cmd_completion)
    completion.add_argument("shell", choices=("bash", "zsh", "tcsh"), help="the shell")
    kill = add("kill", "kill an active session of the running engine", cmd_kill)
    kill.add_argument("session", help="session id or name")
    kill.add_argument("--reason", default="killed by user", help="recorded with the kill")
    fork = add("fork", "start a new session from another's history, up to an event, on the "
               "running engine", cmd_fork)
    fork.add_argument("session", help="session id or name")
    at = fork.add_mutually_exclusive_group()
    at.add_argument("--at", metavar="EVENT|NODE",
                    help="an event number: the last event to copy (see tether events); or a "
                         "node of the session's tree (id prefix or bookmark; see tether "
                         "tree): the fork continues from that message (default: the latest). "
                         "Digits name an event; 4 or more digits that name no event, a node")
    at.add_argument("--at-node", metavar="NODE", default="",
                    help="a node of the session's tree, even when its id prefix is all digits")
    tree = add("tree", "print a session's conversation tree, where it stands marked, from "
               "the running engine", cmd_tree)
    tree.add_argument("session", help="session id or name")
    tree.add_argument("--json", action="store_true", help="the TreeView message as JSON")
    branch = add("branch", "move a session to a node of its tree: its history becomes the "
                 "path to that node, and its next message continues from there", cmd_branch)
    branch.add_argument("session", help="session id or name")
    branch.add_argument("node", help="node id (a unique prefix of 4 or more characters) or "
                                     "bookmark, as tether tree shows")
    edit = add("edit", "edit a text message of a session's tree (in place when nothing "
               "follows it, else as a new branch) and move the session there", cmd_edit)
    edit.add_argument("session", help="session id or name")
    edit.add_argument("node", help="node id (prefix) or bookmark of the message to edit")
    edit.add_argument("text", help="the new text ('-' reads it from standard input)")
    split = add("split", "split a text message of a session's tree in two at a character "
                "position (the first part becomes the parent of the rest); the model is sent "
                "the same text", cmd_split)
    split.add_argument("session", help="session id or name")
    split.add_argument("node", help="node id (prefix) or bookmark of the message to split")
    split.add_argument("position", type=int,
                       help="characters in the first part (1 to the text's length - 1), "
                            "counted in the message as sent, line breaks included (tether "
                            "tree shows it on one line)")
    delete = add("delete", "delete a node of a session's tree with everything under it (or "
                 "only the node, with --reparent); never where the session stands or its path",
                 cmd_delete)
    delete.add_argument("session", help="session id or name")
    delete.add_argument("node", help="node id (prefix) or bookmark")
    delete.add_argument("--reparent", action="store_true",
                        help="keep the node's children: they take its place")
    bookmark = add("bookmark", "name a node of a session's tree (the name works wherever a "
                   "node is asked for), move the name, or remove it", cmd_bookmark)
    bookmark.add_argument("session", help="session id or name")
    bookmark.add_argument("name", help="the bookmark's name")
    bookmark.add_argument("node", nargs="?", help="node id (prefix) or bookmark it names")
    bookmark.add_argument("--remove", action="store_true", help="remove the bookmark")
    generate = add("generate", "answer a session's history as it stands, with no new "
                   "message (after tether branch or edit); several completions become "
                   "branches", cmd_generate)
    generate.add_argument("session", help="session id or name")
    generate.add_argument("-n", type=int, default=1, choices=range(1, 17), metavar="N",
                          help="completions to generate, 1 to 16 (more than 1 needs "
                               "--no-tools; default 1)")
    generate.add_argument("--no-tools", action="store_true",
                          help="offer the model no tools")
    generate.add_argument("--max-tool-iterations", type=int, default=5, metavar="K",
                          help="model calls the generation may make; when call K asks "
                               "for tools it stops with an error (default 5)")
    events = add("events", "print a session's stored event timeline", cmd_events)
    events.add_argument("session", help="session id or name")
    events.add_argument("--json", action="store_true", help="one JSON object per event")
    replay = add("replay", "show a session as it stood after event N", cmd_replay)
    replay.add_argument("session", help="session id or name")
    replay.add_argument("--until", type=event_number, metavar="N",
                        help="event number, from 1 (default: latest)")
    replay.add_argument("--json", action="store_true",
                        help="the session as one JSON object (its state and history)")
    rules = sub.add_parser(
        "rules", help="TTSR rules: list, check, test over a stored session, injections",
        description="Time-traveling stream rules: what is loaded, whether a file is valid, "
        "what a rule set would have done over a stored session.",
    )
    rules_sub = rules.add_subparsers(dest="rules_command", metavar="ACTION", required=True)
    listing = rules_sub.add_parser(
        "list", help="the rules in force, where each comes from, its engine, and what was "
        "skipped and why", description="The rules a session in WORKSPACE runs with.")
    listing.add_argument("--workspace", metavar="DIR", help="workspace (default: the setting)")
    listing.set_defaults(func=cmd_rules_list)
    check = rules_sub.add_parser("check", help="validate rule files",
                                 description="Validate rule files; exit 1 if any is invalid.")
    check.add_argument("files", nargs="+", metavar="FILE", help="rule file (Markdown)")
    check.set_defaults(func=cmd_rules_check)
    test = rules_sub.add_parser(
        "test", help="where rules would have fired over a stored session (no model)",
        description="Run a rule set over a stored session's recorded model output and list "
        "where each rule would have fired: a what-if, without the model.")
    test.add_argument("--session", required=True, metavar="ID", help="session id or name")
    test.add_argument("--rules", metavar="DIR",
                      help="rules folder to try (default: the rules in force for the "
                           "session, as its rule monitor recorded them; for a session from "
                           "before that, its workspace's, the configured and the user's "
                           "folders)")
    test.set_defaults(func=cmd_rules_test)
    injections = rules_sub.add_parser(
        "injections", help="rules that fired, from the injection records",
        description="Every recorded TTSR injection, oldest first.")
    injections.add_argument("--session", metavar="ID", help="only this session")
    injections.add_argument("--json", action="store_true", help="one JSON object per firing")
    injections.set_defaults(func=cmd_rules_injections)
    undo = add("undo", "put back the files a session's tool calls changed (from the snapshots "
               "taken before each call)", cmd_undo)
    undo.add_argument("session", help="session id or name")
    undo.add_argument("--to", type=int, metavar="EVENT",
                      help="undo every change after this event (default: the last change)")
    audit = add("audit", "query the audit index: every tool call, who asked, what was "
                "decided by which tier, and what happened", cmd_audit)
    audit.add_argument("--session", metavar="ID", help="only this session")
    audit.add_argument("--user", help="only calls made for this user")
    audit.add_argument("--tool", help="only this tool")
    audit.add_argument("--verdict", choices=["allow", "deny"], help="only this verdict")
    audit.add_argument("--tier", help="only decisions of this tier (protection, policy...)")
    audit.add_argument("--since", metavar="TIME", type=iso_time,
                       help="ISO 8601 UTC time, inclusive (2026-11-22, 2026-11-22T14:30)")
    audit.add_argument("--until", metavar="TIME", type=iso_time,
                       help="ISO 8601 UTC time, inclusive; a day includes all of it")
    audit.add_argument("--json", action="store_true", help="one JSON object per call")
    audit.add_argument("--refused", action="store_true",
                       help="list what was refused instead: messages the inbox middleware "
                       "turned away, and answers, plan reviews and mode changes from "
                       "someone who is neither the session's owner nor an approver")
    stats = add("stats", "figures from the metrics view: cost (in total and per UTC day), "
                "sessions by status, average duration, the most expensive session, tool "
                "calls by verdict and TTSR triggers", cmd_stats)
    stats.add_argument("--json", action="store_true", help="the figures as one JSON object")
    fake = sub.add_parser(
        "fake-llm", help="serve scripted model responses (Anthropic streaming format)",
        add_help=False,
    )
    fake.set_defaults(func=None)
    return parser


def _command_index(argv: list[str]) -> int | None:
    """Index of the command word (the first argument that is not an option)."""
    skip = False
    for index, word in enumerate(argv):
        if skip:
            skip = False
        elif word == "--config":
            skip = True
        elif not word.startswith("-"):
            return index
    return None


def _stop_on_signals() -> None:
    """SIGTERM and SIGHUP unwind like Ctrl-C, so every command shuts its engine down
    (actors, relay, embedded NATS server) instead of leaving parts running."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tether`` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    index = _command_index(argv)
    if index is not None and argv[index] == "fake-llm":
        args = parser.parse_args(argv[: index + 1])
        return cmd_fake_llm(args, argv[index + 1 :])
    args = parser.parse_args(argv)
    configure_logging(verbose=args.verbose, log_format=getattr(args, "log_format", "text"))
    if threading.current_thread() is threading.main_thread():
        _stop_on_signals()
    try:
        result: int = args.func(args)
        return result
    except ConfigError as exc:
        print(f"tether: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`tether events X | head`): not an error of ours. Point
        # stdout at /dev/null so the interpreter's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except EXPECTED_ERRORS as exc:
        # Failures a user can act on (unreachable server, unknown session, timeout): one
        # line, no traceback. Run with -v for the details in the log.
        print(f"tether: {_describe(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
