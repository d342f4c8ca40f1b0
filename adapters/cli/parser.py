"""The argument parser of every command, and the argument types it checks."""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
from collections.abc import Callable

from tether.adapters.cli.engine import (
    cmd_chat,
    cmd_config,
    cmd_demo,
    cmd_sandbox,
    cmd_serve,
    cmd_telegram,
    cmd_token,
)
from tether.adapters.cli.records import (
    cmd_audit,
    cmd_rules_check,
    cmd_rules_injections,
    cmd_rules_list,
    cmd_rules_test,
    cmd_stats,
)
from tether.adapters.cli.sessions import (
    cmd_events,
    cmd_fork,
    cmd_kill,
    cmd_replay,
    cmd_sessions,
    cmd_undo,
)
from tether.adapters.cli.tree import (
    cmd_bookmark,
    cmd_branch,
    cmd_delete,
    cmd_edit,
    cmd_generate,
    cmd_split,
    cmd_tree,
)
from tether.adapters.logs import LOG_FORMATS

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


def _event(value: str, least: int, counting: str) -> int:
    """``value`` as an event number of at least ``least``; else argparse's refusal,
    saying how events count (``counting``)."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an event number") from None
    if number < least:
        raise argparse.ArgumentTypeError(f"{number} is not an event number: {counting}")
    return number


def event_number(value: str) -> int:
    """An argparse type: an event number (events count from 1)."""
    return _event(value, 1, "a session's events count from 1")


def event_position(value: str) -> int:
    """An argparse type: a place in a session's events, after event N (0: before the
    first)."""
    return _event(value, 0, "events count from 1 (0: before the first)")


def version() -> str:
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
    parser.add_argument("--version", action="version", version=f"tether {version()}",
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
    undo.add_argument("--to", type=event_position, metavar="EVENT",
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
