"""Red-team round 3 on fc2cff5 ("the engine's internal subjects take from the bus only
what they must").

The attacker can publish and subscribe anything on an unauthenticated NATS bus in the
engine's namespace (the test suite's shared server), or controls the model's output.
Each test asserts the safe outcome; the attacks that work are marked
``xfail(strict=True)`` with the reason. Judged by effects: files in the workspace, the
session's stored events, what the chat receives."""

from __future__ import annotations

import contextlib
import queue
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Engine
from tests.helpers import after_one_turn, propose, say, wait_until
from tests.integration.test_redteam_gatekeeper_round2 import (
    APPROVAL_SCRIPT,
    decisions_of,
    waiting_for_approval,
)
from tether.actors.runtime import ask
from tether.adapters.nats_bus import NatsBus
from tether.events.codec import encode
from tether.events.messages import ListSessions, SessionList


def _kinds(host: Any, sid: str) -> list[str]:
    return [type(e).__name__ for e in host.app.session_events(sid)]


def _outsider(nats_url: str) -> NatsBus:
    return NatsBus(nats_url, name="outsider")  # no credentials: none are asked


def _gatekeeper_barrier(outsider: NatsBus, host: Any, workspace: Path) -> None:
    """Asked after what the outsider published there, the gatekeeper answers this once it
    has handled (or the engine refused) all of that."""
    propose(outsider, host, workspace, "probe", "probe", "list_dir", {"path": "."}, 30)


def _drain(watcher: Any) -> list[Any]:
    got = []
    while True:
        try:
            got.append(watcher.messages.get_nowait())
        except queue.Empty:
            return got


# --- (1) approval without the owner, through the front doors -----------------------------

FRONT_DOOR = ("the bare <ns>.inbox takes `user` as given, and <ns>.inbox.<principal> names "
              "its sender: both only as true as NATS permissions make them. On a bus "
              "without credentials anyone sends '/approve' as the owner; the manager "
              "forwards it in process (from_here=True), so the bus refusals never see it")


@pytest.mark.xfail(strict=True, reason=FRONT_DOOR)
@pytest.mark.parametrize("door", ["the bare inbox", "the owner's inbox"])
def test_an_outsider_approves_as_the_owner_at_a_front_door(
    door: str, workspace: Path, engine: Callable[..., Engine],
    watch_channel: Callable[..., Any], nats_url: str,
) -> None:
    from tether.events.messages import Accepted, UserMessage

    host, test, sid = waiting_for_approval(engine, watch_channel)
    subject, user = ((host.subjects.inbox, "user") if door == "the bare inbox"
                     else (host.subjects.inbox_for("user"), "mallory"))
    outsider = _outsider(nats_url)
    try:
        ask(outsider, subject, UserMessage(
            text="/approve", channel="evil", session_id=sid, user=user), Accepted, 10)
    finally:
        outsider.close()
    test.wait_for("completed")
    assert not (workspace / "pwned.txt").exists()
    assert ("allow", "human") not in decisions_of(host, sid)


def test_a_connector_cannot_approve_another_sessions_call_through_its_own_session(
    workspace: Path, engine: Callable[..., Engine], watch_channel: Callable[..., Any],
    nats_url: str,
) -> None:
    """Within the credentialed model: mallory (a connector, publishing only on her own
    inbox) owns a session in the same chat; she reads the victim's approval id on the
    channel and sends '/approve <id>' into her own session, and into the victim's."""
    from tether.actors.runtime import RemoteError, ask
    from tether.events.messages import Accepted, UserMessage

    host = engine(APPROVAL_SCRIPT).host
    test = watch_channel(host, "test")
    sid = say(host, "publish it")
    prompt = test.wait_for("approval").text
    assert "git push" in prompt
    ids = re.findall(r"/approve ([0-9a-f]{8})", prompt)
    assert ids, prompt
    outsider = _outsider(nats_url)
    try:
        mine = ask(outsider, host.subjects.inbox_for("mallory"), UserMessage(
            text="hello", channel="test", user="mallory"), Accepted, 10).session_id
        for target in (mine, sid):
            with contextlib.suppress(RemoteError):  # her own: taken; the victim's: refused
                ask(outsider, host.subjects.inbox_for("mallory"), UserMessage(
                    text=f"/approve {ids[0]}", channel="test", session_id=target),
                    Accepted, 10)
    finally:
        outsider.close()
    assert decisions_of(host, sid) == [("escalate", "escalation")]
    say(host, "no", sid)
    wait_until(lambda: len(decisions_of(host, sid)) == 2, "the owner's no")
    assert not (workspace / "pwned.txt").exists()
    assert decisions_of(host, sid) == [("escalate", "escalation"), ("deny", "human")]
    refused = [e for e in host.app.session_events(sid)
               if type(e).__name__ == "ToolCallStarted"]
    assert refused == []


# --- (2) acting on another's session through the manager --------------------------------

BARE_MANAGER = ("the bare <ns>.manager checks no principal at all (engine role only, by "
                "NATS permissions): on a bus without credentials anyone kills, branches, "
                "undoes or generates in any session")


@pytest.mark.xfail(strict=True, reason=BARE_MANAGER)
def test_an_outsider_kills_a_session_on_the_bare_manager(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any], nats_url: str,
) -> None:
    from tether.actors.runtime import RemoteError, ask
    from tether.events.messages import Killed, KillSession

    host, _, sid = after_one_turn(engine, watch_channel)
    outsider = _outsider(nats_url)
    try:
        with pytest.raises(RemoteError):
            ask(outsider, host.subjects.manager, KillSession(session_id=sid), Killed, 10)
    finally:
        outsider.close()
        session = host.app.session(sid)
        assert session is not None and session.status != "killed"


def test_a_connector_cannot_kill_anothers_session_on_its_manager_subject(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any], nats_url: str,
) -> None:
    from tether.actors.runtime import RemoteError, ask
    from tether.events.messages import Killed, KillSession, UndoFiles, Undone

    host, _, sid = after_one_turn(engine, watch_channel)
    stored = host.app.session(sid)
    assert stored is not None
    name = stored.name
    outsider = _outsider(nats_url)
    try:
        for ref in (sid, name):
            with pytest.raises(RemoteError, match="not_allowed"):
                ask(outsider, host.subjects.manager_for("mallory"),
                    KillSession(session_id=ref), Killed, 10)
            with pytest.raises(RemoteError, match="not_allowed"):
                ask(outsider, host.subjects.manager_for("mallory"),
                    UndoFiles(session_id=ref, to_version=0, user="user"), Undone, 10)
    finally:
        outsider.close()
    session = host.app.session(sid)
    assert session is not None and session.status != "killed"


# --- (3) reply-subject tricks -----------------------------------------------------------


def test_a_tree_query_whose_reply_names_engine_subjects_changes_nothing(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any], nats_url: str,
) -> None:
    """The session answers tree_query from the bus, to any reply subject: naming the
    session's own subject, the coordinator's, the manager's or the notices' gets the
    answer published there, over the bus, where each refuses or dead-letters it."""
    from tether.actors.runtime import ask
    from tether.events.messages import TreeQuery, TreeView

    host, test, sid = after_one_turn(engine, watch_channel)
    before = _kinds(host, sid)
    s = host.subjects
    outsider = _outsider(nats_url)
    try:
        for reply in (s.session(sid), s.interactions, s.inbox, s.manager, s.notices,
                      s.gatekeeper, s.router, s.ttsr(sid), s.channel_out("test")):
            outsider.publish(s.session(sid), encode(TreeQuery(session_id=sid)), reply=reply)
        ask(outsider, s.session(sid), TreeQuery(session_id=sid), TreeView, 10)
    finally:
        outsider.close()
    time.sleep(0.5)
    assert _kinds(host, sid) == before
    say(host, "again", sid)
    test.wait_for("completed")


# --- (5) the gatekeeper: one per process, shared by every session ------------------------

WRITE_SCRIPT = """
responses:
  - match: "write-task"
    blocks:
      - tool_use: {id: toolu_legit1, name: write_file, input: {path: legit.txt, content: "ok"}}
"""

NUL_PLAN = ("a bus tool_proposal in plan mode whose plan_file holds a NUL makes judge() "
            "raise (os.path.realpath in modes.plan_mode_refusal); six within a minute "
            "stop the process's only gatekeeper for good: every session's call is then "
            "denied until the engine restarts")


def test_six_bus_proposals_with_a_nul_plan_file_do_not_stop_the_gatekeeper(
    workspace: Path, engine: Callable[..., Engine], watch_channel: Callable[..., Any],
    nats_url: str,
) -> None:
    from tether.actors.gatekeeper.deny_lists import action_hash
    from tether.events.messages import ToolProposal

    host = engine(WRITE_SCRIPT).host
    test = watch_channel(host, "test")
    tool_input = {"command": "ls"}
    outsider = _outsider(nats_url)
    try:
        for n in range(6):
            outsider.publish(host.subjects.gatekeeper, encode(ToolProposal(
                session_id="x", call_id=f"c{n}", tool="run_shell", input=tool_input,
                workspace=str(workspace), action_hash=action_hash("run_shell", tool_input),
                mode="plan", plan_file="\x00")))
        _gatekeeper_barrier(outsider, host, workspace)
    finally:
        outsider.close()
    sid = say(host, "write-task")
    test.wait_for("completed")
    assert host.system.stopped_for_good == []
    assert [d for d, _ in decisions_of(host, sid)] == ["allow"]
    assert (workspace / "legit.txt").read_text() == "ok"


def _cd_chain(n: int) -> str:
    """Each `cd` after `;` may have failed: the judge keeps both folders, so the set of
    possible folders doubles with every one (2**n)."""
    return "; ".join(f"cd d{i}" for i in range(n)) + "; touch x"


CD_CHAIN = ("the shell scope keeps every folder a `cd` after `;` may leave: 2**n folder "
            "sets for n cds (14 cds: 1.5 s, each more doubles it). One proposal of ~20 "
            "cds holds the process's only gatekeeper for minutes; every session's call "
            "meanwhile is denied 'unavailable'")


def test_one_bus_proposal_does_not_hold_the_gatekeeper_from_other_sessions(
    workspace: Path, engine: Callable[..., Engine], watch_channel: Callable[..., Any],
    nats_url: str,
) -> None:
    from tether.actors.gatekeeper.deny_lists import action_hash
    from tether.events.messages import ToolProposal

    host = engine(WRITE_SCRIPT, ask_timeout=2.0).host
    test = watch_channel(host, "test")
    tool_input = {"command": _cd_chain(16)}
    outsider = _outsider(nats_url)
    try:
        outsider.publish(host.subjects.gatekeeper, encode(ToolProposal(
            session_id="x", call_id="c", tool="run_shell", input=tool_input,
            workspace=str(workspace), action_hash=action_hash("run_shell", tool_input))))
        _gatekeeper_barrier(outsider, host, workspace)
    finally:
        outsider.close()
    sid = say(host, "write-task")
    test.wait_for("completed", timeout=30)
    assert [d for d, _ in decisions_of(host, sid)] == ["allow"], decisions_of(host, sid)
    assert (workspace / "legit.txt").read_text() == "ok"


MODEL_CD_CHAIN = (CD_CHAIN + "; the model of any one session (a prompt injection in "
                  "what it reads) proposes it in process just as well")


def test_one_sessions_model_does_not_hold_the_gatekeeper_from_another_session(
    workspace: Path, engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    script = f"""
responses:
  - match: "chain-task"
    blocks:
      - tool_use: {{id: toolu_chain1, name: run_shell, input: {{command: "{_cd_chain(16)}"}}}}
  - match: "write-task"
    blocks:
      - tool_use: {{id: toolu_legit1, name: write_file, input: {{path: legit.txt, content: "ok"}}}}
"""
    host = engine(script, ask_timeout=2.0).host
    a, b = watch_channel(host, "a"), watch_channel(host, "b")
    sid_a = say(host, "chain-task", channel="a", user="mallory")
    wait_until(lambda: "ToolCallProposed" in _kinds(host, sid_a), "the chain proposed")
    sid_b = say(host, "write-task", channel="b", user="user")
    b.wait_for("completed", timeout=30)
    a.wait_for("completed", timeout=30)
    assert [d for d, _ in decisions_of(host, sid_b)] == ["allow"], decisions_of(host, sid_b)
    assert (workspace / "legit.txt").read_text() == "ok"


# --- (5) the router: <ns>.router from the bus ------------------------------------------

WATCH_AWAY = ("<ns>.router takes watch_session from the bus (engine role only, by NATS "
              "permissions): one message sending the owner's own channel to the background "
              "silences the session's live stream and replies there (only the ending's last "
              "lines still come), and it is stored, so it outlasts a restart")


@pytest.mark.xfail(strict=True, reason=WATCH_AWAY)
def test_an_outsider_cannot_send_the_owners_chat_to_the_background(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any], nats_url: str,
) -> None:
    from tether.actors.runtime import ask
    from tether.events.messages import Watching, WatchSession

    host, test, sid = after_one_turn(
        engine, watch_channel,
        'responses:\n  - blocks: [{text: "one"}]\n  - blocks: [{text: "SECOND-REPLY"}]\n')
    outsider = _outsider(nats_url)
    try:
        ask(outsider, host.subjects.router, WatchSession(
            session_id=sid, channel="test", foreground=False), Watching, 10)
    finally:
        outsider.close()
    _drain(test)
    say(host, "again", sid)
    test.wait_for("completed")
    # The ending still carries the last lines (in the background); the live replies
    # (stream, reply) no longer reach the owner's chat.
    texts = [m.text for m in test.seen if m.kind in ("stream", "reply")]
    assert any("SECOND-REPLY" in t for t in texts), [(m.kind, m.text) for m in test.seen]


# --- (5) a connector's own requests: do any make the manager or a session fail? ---------

FORK_OVERFLOW = ("a fork_session's at_version is only bounded below (ge=0): 2**63 on a "
                 "connector's own <ns>.manager.<principal>, about its own session (allowed), "
                 "makes app.session(version=...) raise OverflowError in the manager; six "
                 "within a minute stop the SessionManagerActor for good: nobody's message "
                 "is taken any more until the engine restarts")


def test_six_forks_at_a_huge_version_do_not_stop_the_manager(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any], nats_url: str,
) -> None:
    from tether.actors.runtime import ask
    from tether.events.messages import Accepted, ForkSession, UserMessage

    host = engine('responses:\n  - blocks: [{text: "one"}]\n'
                  '  - blocks: [{text: "two"}]\n').host
    test = watch_channel(host, "test")
    outsider = _outsider(nats_url)  # as the connector of mallory: her own subjects only
    try:
        own = ask(outsider, host.subjects.inbox_for("mallory"), UserMessage(
            text="hello", channel="test"), Accepted, 10).session_id
        test.wait_for("completed")
        for _ in range(6):
            outsider.publish(host.subjects.manager_for("mallory"), encode(
                ForkSession(session_id=own, at_version=2 ** 63)))
        ask(outsider, host.subjects.manager_for("mallory"), ListSessions(), SessionList, 10)
    finally:
        outsider.close()
    try:
        say(host, "still there?")  # another user
    finally:
        assert host.system.stopped_for_good == []


def test_a_connectors_edge_requests_about_its_own_session_fail_no_actor(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any], nats_url: str,
) -> None:
    """Within the credentialed model: mallory, on her own inbox and manager subject,
    sends edge values about her own session (node ids that are not nodes, NULs, pages
    out of range). Six failures in a minute would stop an actor for good."""
    from tether.actors.runtime import ask
    from tether.events.messages import (
        Accepted,
        BranchTo,
        EditNode,
        ForkSession,
        TreeQuery,
        UserMessage,
    )

    host = engine('responses:\n  - blocks: [{text: "one"}]\n').host
    test = watch_channel(host, "test")
    big = 2 ** 62
    outsider = _outsider(nats_url)
    try:
        own = ask(outsider, host.subjects.inbox_for("mallory"), UserMessage(
            text="hello", channel="test"), Accepted, 10).session_id
        test.wait_for("completed")
        stored = host.app.session(own)
        assert stored is not None
        name = stored.name
        requests = [
            ForkSession(session_id=own, at_node="\x00"),
            ForkSession(session_id=name, at_node="-" * 5000),
            TreeQuery(session_id=own, offset=-big, limit=big),
            TreeQuery(session_id=own, offset=big, limit=-big),
            BranchTo(session_id=own, node_id="\x00"),
            EditNode(session_id=own, node_id="\x00", text="\x00"),
        ]
        for request in requests:
            for _ in range(7):
                outsider.publish(host.subjects.manager_for("mallory"), encode(request))
        for text in ("\x00", "/edit \x00", "/cd \x00", "/branch \x00"):
            for _ in range(7):
                outsider.publish(host.subjects.inbox_for("mallory"), encode(UserMessage(
                    text=text, channel="test", session_id=own)))
        outsider.flush()
    finally:
        outsider.close()
    time.sleep(2.0)
    assert host.system.stopped_for_good == []
    assert say(host, "still there?")


def test_barrier_checks_from_the_bus_for_a_call_not_started_are_answered_not_held(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any], nats_url: str,
) -> None:
    """The attack: barrier checks on ``<ns>.session.<id>.ttsr`` for a generation the
    session never reaches. Each was held until that call's end (never): the monitor's
    memory grew with every one. They are answered at once, not vouched for; the
    session's own barrier still waits for its call's end."""
    from tether.events.messages import BarrierCheck, BarrierResult

    host, test, sid = after_one_turn(engine, watch_channel)
    outsider = _outsider(nats_url)
    try:
        subject = host.subjects.ttsr(sid)
        ahead = ask(outsider, subject, BarrierCheck(session_id=sid, generation=2**40, seq=0),
                    BarrierResult, timeout=10)
        assert (ahead.clear, ahead.unchecked) == (False, True)
        for n in range(300):
            outsider.publish(subject, encode(BarrierCheck(
                session_id=sid, generation=2**40 + n, seq=0)), reply=f"_INBOX.nobody.{n}")
        ask(outsider, subject, BarrierCheck(session_id=sid, generation=0, seq=0),
            BarrierResult, timeout=10)  # after those: the monitor has taken them all
        monitor = host.manager.ref.proxy().live.get(timeout=10)[sid][0].ref
        assert monitor.proxy().parked.get(timeout=10) == []
    finally:
        outsider.close()
    say(host, "hello", sid)  # the session's own barrier still works
    assert test.wait_for("completed").session_id == sid


def test_barrier_checks_from_the_bus_for_the_running_call_are_held_only_so_many(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any], nats_url: str,
) -> None:
    """Checks from outside for the call now streaming wait for its end, at most
    ``MAX_PARKED_FROM_BUS`` of them; the others are answered at once, not vouched for."""
    from tether.actors.ttsr.monitor import MAX_PARKED_FROM_BUS
    from tether.events.messages import BarrierCheck, BarrierResult

    story = "Once upon a time, and on it went. " * 6
    host, _, _ = engine(f"""
responses:
  - chunk: 5
    delay_ms: 100
    blocks: [{{text: "{story}"}}]
""")
    test = watch_channel(host, "test")
    sid = say(host, "tell me a story")
    test.wait_for("stream")
    monitor = host.manager.ref.proxy().live.get(timeout=10)[sid][0].ref.proxy()
    generation = monitor.generation.get(timeout=10)
    outsider = _outsider(nats_url)
    try:
        subject = host.subjects.ttsr(sid)
        for n in range(MAX_PARKED_FROM_BUS + 10):
            outsider.publish(subject, encode(BarrierCheck(
                session_id=sid, generation=generation, seq=0)), reply=f"_INBOX.nobody.{n}")
        extra = ask(outsider, subject, BarrierCheck(session_id=sid, generation=generation,
                                                   seq=0), BarrierResult, timeout=5)
        assert (extra.clear, extra.unchecked) == (False, True)  # answered before the end
        held = monitor.parked.get(timeout=10)
        assert len(held) == MAX_PARKED_FROM_BUS
    finally:
        outsider.close()
    test.wait_for("completed")
    assert monitor.parked.get(timeout=10) == []  # the call's end answered them all
