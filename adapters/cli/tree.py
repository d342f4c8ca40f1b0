"""Commands on a session's conversation tree: show it, branch, edit, split, delete,
bookmark, and generate from where the session stands."""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import Any

import msgspec

from tether.adapters.cli.common import (
    EXIT_USAGE,
    ask_engine,
)


def cmd_tree(args: argparse.Namespace) -> int:
    from tether.actors.conversation import render_tree

    view = whole_tree(args, args.session)
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


def whole_tree(args: argparse.Namespace, session: str, page_size: int = 0) -> Any:
    """The session's whole tree as one TreeView, asked for page by page (a long session's
    tree is larger than one bus message may be; ``page_size``: nodes a page, at most and
    by default :data:`~events.messages.TREE_PAGE_MAX`); started again when the tree
    changes while it is read."""
    from tether.events.messages import TREE_PAGE_MAX, TreeQuery, TreeView

    size = min(page_size or TREE_PAGE_MAX, TREE_PAGE_MAX)
    for _ in range(5):
        first = ask_engine(args, TreeQuery(session_id=session, limit=size), TreeView)
        nodes = list(first.nodes)
        while len(nodes) < first.total:
            page = ask_engine(args, TreeQuery(session_id=first.session_id, offset=len(nodes),
                                               limit=size), TreeView)
            if page.version != first.version or not page.nodes:
                break
            nodes.extend(page.nodes)
        if len(nodes) >= first.total:
            return msgspec.structs.replace(first, nodes=nodes)
    raise SystemExit("tether: the tree kept changing while it was read; try again")


def cmd_branch(args: argparse.Namespace) -> int:
    from tether.events.messages import BranchTo

    return _move(args, BranchTo(session_id=args.session, node_id=args.node))


def cmd_edit(args: argparse.Namespace) -> int:
    from tether.events.messages import EditNode

    text = sys.stdin.read() if args.text == "-" else args.text
    return _move(args, EditNode(session_id=args.session, node_id=args.node, text=text))


def cmd_split(args: argparse.Namespace) -> int:
    from tether.events.messages import SplitNode

    return _change_tree(args, SplitNode(session_id=args.session, node_id=args.node,
                                        position=args.position))


def cmd_delete(args: argparse.Namespace) -> int:
    from tether.events.messages import DeleteNode

    return _change_tree(args, DeleteNode(session_id=args.session, node_id=args.node,
                                         mode="reparent" if args.reparent else "cascade"))


def cmd_bookmark(args: argparse.Namespace) -> int:
    from tether.events.messages import BookmarkNode

    if not args.remove and not args.node:
        print("tether bookmark: give the NODE the bookmark names, or --remove",
              file=sys.stderr)
        return EXIT_USAGE
    return _change_tree(args, BookmarkNode(session_id=args.session, name=args.name,
                                           node_id=args.node or "", remove=args.remove))


def _change_tree(args: argparse.Namespace, request: Any) -> int:
    from tether.events.messages import TreeChanged

    changed = ask_engine(args, request, TreeChanged)
    print(f"session {changed.session_id}: {changed.detail} (see tether tree "
          f"{changed.session_id})")
    return 0


def _move(args: argparse.Namespace, request: Any) -> int:
    from tether.events.messages import Branched

    moved = ask_engine(args, request, Branched)
    print(f"session {moved.session_id} now stands at {moved.node_id[:8]} "
          f"({moved.messages} messages); its next message continues from there "
          f"(or: tether generate {moved.session_id})")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from tether.events.messages import Accepted, Generate

    accepted = ask_engine(args, Generate(
        session_id=args.session, n=args.n, tools=not args.no_tools,
        max_tool_iterations=args.max_tool_iterations), Accepted)
    print(f"generating in {accepted.session_id}: {args.n} completion"
          f"{'s' if args.n != 1 else ''}; follow with tether chat --remote --session "
          f"{accepted.session_id}, then tether tree {accepted.session_id}")
    return 0
