"""A model reusing a tool call's id: on the same branch the provider refuses it; on
another branch (the request holds only the current one) the session must, or the second
call runs and the audit's row of the first (keyed by the id) is overwritten."""

from __future__ import annotations

import getpass
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import Engine
from tests.helpers import say, wait_until
from tether.actors.runtime import ask
from tether.events.codec import encode
from tether.events.messages import Branched, EditNode, Generate, TreeQuery, TreeView

ME = getpass.getuser()

SAME_ID_SCRIPT = """
responses:
  - match: "write a"
    blocks:
      - tool_use: {id: toolu_same, name: write_file, input: {path: a.txt, content: "one"}}
  - match: "wrote"
    blocks: [{text: "A written."}]
  - match: "write b"
    blocks:
      - tool_use: {id: toolu_same, name: write_file, input: {path: b.txt, content: "two"}}
  - blocks: [{text: "B written."}]
"""
"""A call's id given again to a later call, which would write another file."""


def test_a_tool_id_reused_in_a_later_turn_does_not_run(
    workspace: Path, engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    host = engine(SAME_ID_SCRIPT).host
    test = watch_channel(host, "test")
    sid = say(host, "write a")
    test.wait_for("completed")
    wait_until(lambda: [r.outcome for r in host.audit.query(session=sid)] == ["executed"],
               "the audit row of the call, executed")
    first = host.audit.query(session=sid)
    say(host, "write b", sid)
    assert "toolu_same" in test.wait_for("failed").text
    assert not (workspace / "b.txt").exists()
    assert host.audit.query(session=sid) == first
    say(host, "anything", sid)  # the session still works
    test.wait_for("completed")


def test_a_tool_id_reused_on_a_new_branch_leaves_the_first_call_s_audit_row(
    workspace: Path, engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    host = engine(SAME_ID_SCRIPT).host
    test = watch_channel(host, "test")
    sid = say(host, "write a", user=ME)
    test.wait_for("completed")
    assert (workspace / "a.txt").read_text() == "one"
    wait_until(lambda: [r.outcome for r in host.audit.query(session=sid)] == ["executed"],
               "the audit row of the call, executed")
    first = host.audit.query(session=sid)
    view = ask(host.bus, host.subjects.manager, TreeQuery(session_id=sid), TreeView,
               timeout=10)
    user = next(n for n in view.nodes if n.text == "write a")
    ask(host.bus, host.subjects.manager, EditNode(session_id=sid, node_id=user.node_id,
                                                 text="write b", user=ME), Branched,
        timeout=10)
    host.bus.publish(host.subjects.manager, encode(Generate(session_id=sid, user=ME)))
    assert "toolu_same" in test.wait_for("failed").text
    rows = host.audit.query(session=sid)
    assert [(r.call_id, r.input_summary, r.outcome) for r in rows if r.call_id ==
            "toolu_same"][:1] == [(r.call_id, r.input_summary, r.outcome) for r in first]
    assert not (workspace / "b.txt").exists()
