"""The audit index over SQLite and PostgreSQL: every call, its asker, verdict and outcome."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tether.adapters.config import Settings
from tether.adapters.store import open_application, open_view
from tether.events.application import TetherApplication
from tether.events.session import Session
from tether.projections.audit_index import AuditIndex
from tether.projections.follower import Follower


@pytest.fixture
def app(make_settings: Callable[..., Settings], database_url: str) -> Iterator[Any]:
    settings = make_settings(database_url=database_url)
    application = open_application(settings)
    view = open_view(AuditIndex, application, settings, "audit")
    try:
        yield application, view, settings
    finally:
        view.close()
        application.close()


def _calls(app: TetherApplication) -> Session:
    s = Session(session_id="s1", name="n", workspace="/w", model="m", channel="web")
    s.receive_user_message(text="read it", channel="web", user="ana")
    s.propose_tool_call(call_id="c1", tool="read_file", tool_input={"path": "a.txt"},
                        action_hash="h1")
    s.decide_tool_call(call_id="c1", decision="allow", reason="ok", tier="default")
    s.record_tool_result(call_id="c1", tool="read_file", output="x", is_error=False)
    s.receive_user_message(text="now delete", channel="telegram", user="bo")
    s.propose_tool_call(call_id="c2", tool="run_shell", tool_input={"command": "rm -rf /"},
                        action_hash="h2")
    s.decide_tool_call(call_id="c2", decision="deny", reason="destructive", tier="policy")
    s.refuse_tool_call(call_id="c2", reason="destructive")
    app.save(s)
    return s


def test_every_call_is_indexed_with_its_asker_verdict_and_outcome(app: Any) -> None:
    application, view, _ = app
    _calls(application)
    follower = Follower(application, name="t", position=view.position, consume=view.consume)
    assert follower.catch_up() == 9

    entries = view.query()
    assert [(e.call_id, e.user, e.channel, e.tool, e.verdict, e.tier, e.outcome)
            for e in entries] == [
        ("c1", "ana", "web", "read_file", "allow", "default", "executed"),
        ("c2", "bo", "telegram", "run_shell", "deny", "policy", "refused"),
    ]
    assert entries[1].input_summary == '{"command": "rm -rf /"}'
    assert entries[1].action_hash == "h2" and entries[1].reason == "destructive"
    assert entries[0].proposed_at <= entries[0].decided_at <= entries[0].finished_at

    assert [e.call_id for e in view.query(verdict="deny")] == ["c2"]
    assert [e.call_id for e in view.query(user="ana", tool="read_file")] == ["c1"]
    assert view.query(session="other") == []
    assert view.query(since="2999-01-01") == [] and len(view.query(until="2999-01-01")) == 2
    day = entries[0].proposed_at[:10]
    assert len(view.query(until=day)) == 2 and len(view.query(since=day)) == 2  # whole day

    # Exactly once: applying the same notifications again changes nothing.
    batch = application.recorder.select_notifications(start=1, limit=100)
    view.consume(batch)
    assert view.query() == entries


def test_a_key_the_database_refuses_passes_the_call_over_and_says_so(app: Any) -> None:
    """Ids that reached the store before the provider checked them (a NUL, an id too
    long to index): a NUL is stored as U+FFFD like any other text, and an id the database
    cannot index is passed over and recorded, never retried for ever."""
    import random
    import string

    application, view, _ = app
    rng = random.Random(1)  # incompressible: PostgreSQL's index cannot hold it
    long_id = "".join(rng.choice(string.ascii_letters) for _ in range(3000))
    s = Session(session_id="s1", name="n", workspace="/w", model="m", channel="web")
    s.receive_user_message(text="hi", channel="web", user="ana")
    for call_id in ("c\x00nul", long_id, "after"):
        s.propose_tool_call(call_id=call_id, tool="run_shell", tool_input={"command": "ls"},
                            action_hash="h")
        s.decide_tool_call(call_id=call_id, decision="allow", reason="ok", tier="default")
    application.save(s)
    Follower(application, name="t", position=view.position, consume=view.consume).catch_up()

    ids = [e.call_id for e in view.query()]
    assert view.position() == application.max_notification_id()  # not stuck
    assert "after" in ids and any(i.startswith("c") and i.endswith("nul") for i in ids)
    postgres = "postgres" in str(application.recorder.__class__).lower()
    if postgres:  # SQLite indexes any length
        [passed] = view.passed_over()  # its proposal (the verdict then finds no row)
        assert long_id not in ids and passed["topic"].endswith("ToolCallProposed")
    else:
        assert long_id in ids and view.passed_over() == []
