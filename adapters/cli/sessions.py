"""Commands about sessions as a whole: list, kill, fork, their events, replay, undo."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from typing import Any

import msgspec

from tether.adapters.cli.common import (
    ask_engine,
    opened_store,
    resolve_session,
    session_rows,
    settings_of,
)
from tether.adapters.config import ConfigError


def cmd_kill(args: argparse.Namespace) -> int:
    from tether.events.messages import Killed, KillSession

    killed = ask_engine(args, KillSession(session_id=args.session, reason=args.reason),
                         Killed, timeout=5.0)
    if not killed.found:
        print(f"tether: no active session {args.session!r}", file=sys.stderr)
        return 1
    print(f"killed {killed.session_id}")
    return 0


def cmd_fork(args: argparse.Namespace) -> int:
    from tether.actors.runtime import RemoteError
    from tether.events.messages import Accepted, ForkSession

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
        forked = ask_engine(args, request, Accepted)
    except RemoteError as exc:
        # Node ids are hex, so an all-digit --at may be a node's prefix: with no such
        # event, it is tried as a node.
        if not (request.at_version and len(at) >= 4
                and exc.reply.error == "unknown_session"):
            raise
        forked = ask_engine(args, ForkSession(session_id=args.session, at_node=at,
                                               user=getpass.getuser()), Accepted)
    print(f"forked {args.session} into {forked.session_id}; continue with: tether chat "
          f"--remote --session {forked.session_id}")
    return 0


def cmd_sessions(args: argparse.Namespace) -> int:
    from tether.adapters.render import render_sessions

    with opened_store(args) as (settings, app):
        rows = session_rows(settings, app)
    if args.json:
        for row in rows:
            print(msgspec.json.encode(row).decode())
    else:
        print(render_sessions(rows))
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    from tether.adapters.render import render_timeline

    with opened_store(args) as (settings, app):
        sid = resolve_session(app, session_rows(settings, app), args.session)
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
    from tether.adapters.render import render_session

    with opened_store(args) as (settings, app):
        sid = resolve_session(app, session_rows(settings, app), args.session)
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
    from tether.adapters.render import running_turn_cost

    return {"version": session.version, **{f: getattr(session, f) for f in fields},
            "in_turn": session.in_turn, "running_turn_cost_usd": running_turn_cost(session),
            "history": session.history}


def cmd_undo(args: argparse.Namespace) -> int:
    from tether.actors.authority import may_decide, refusal_reason
    from tether.actors.runtime import RemoteError
    from tether.actors.undo import UndoError, undo_files
    from tether.adapters.engine_lock import running_engine
    from tether.adapters.nats_auth import effective_user
    from tether.adapters.snapshots import SnapshotStore
    from tether.events.messages import UndoFiles, Undone

    settings = settings_of(args)
    if running_engine(settings.state_dir, settings.namespace) is not None:
        # The session's actor is its one writer: the engine undoes, for its owner only.
        try:
            done = ask_engine(args, UndoFiles(session_id=args.session, to_version=args.to),
                               Undone, timeout=60.0)
        except RemoteError as exc:
            if exc.reply.error in ("busy", "undo"):
                raise ConfigError(exc.reply.reason) from None
            raise
        restored = done.restored
    else:  # no engine, so no actor: this command is the session's only writer
        from eventsourcing.persistence import IntegrityError

        with opened_store(args) as (settings, app):
            sid = resolve_session(app, session_rows(settings, app), args.session)
            session = app.session(sid)
            assert session is not None
            user = effective_user()
            if not may_decide(user, session.owner, session.home_channel, settings.approvers):
                raise ConfigError(refusal_reason(user, "undo the file changes of",
                                                 session.name))
            if session.in_turn:
                raise ConfigError(f"session {sid} is in the middle of a turn; undo it when "
                                  "it waits")
            store = SnapshotStore(os.path.join(settings.state_dir, "snapshots"))
            try:
                restored = undo_files(session, app.session_events(sid), args.to, store,
                                      app.save, os.path.realpath(settings.workspace))
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
