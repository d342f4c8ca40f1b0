"""Commands that read the records: the TTSR rules and their injections, the audit
index, the metrics."""

from __future__ import annotations

import argparse
import os
from typing import Any

import msgspec

from tether.adapters.cli.common import (
    opened_store,
    resolve_session,
    session_rows,
    settings_of,
    view_of,
)


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
    from tether.actors.ttsr.match import StreamMatcher
    from tether.actors.ttsr.monitor import rule_folders
    from tether.actors.ttsr.rules import load_rules
    from tether.adapters.host import user_rules_dir

    settings = settings_of(args)
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

    from tether.actors.ttsr.match import StreamMatcher
    from tether.actors.ttsr.rules import parse_rule_file

    settings = settings_of(args)
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
    from tether.actors.ttsr.monitor import rule_folders
    from tether.actors.ttsr.rules import load_rules, rules_from_sources
    from tether.actors.ttsr.whatif import what_if
    from tether.adapters.host import user_rules_dir

    with opened_store(args) as (settings, app):
        sid = resolve_session(app, session_rows(settings, app), args.session)
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
    from tether.projections.injection_records import InjectionRecords

    with view_of(args, InjectionRecords, "injections") as view:
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

    from tether.projections.audit_index import AuditIndex

    with view_of(args, AuditIndex, "audit") as view:
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

    from tether.adapters.stats import render_stats
    from tether.projections.metrics import MetricsView

    with view_of(args, MetricsView, "metrics") as view:
        metrics = view.snapshot()
    print(msgspec.json.encode(metrics).decode() if args.json else render_stats(metrics))
    return 0
