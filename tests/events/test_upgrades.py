"""Events stored before a field existed still load, with the field's default."""

from __future__ import annotations

import uuid

from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import get_topic

from tether.events.mapper import MsgspecMapper
from tether.events.session import Session
from tether.events.ttsr import RuleLog

STAMP = b'"timestamp":"2026-11-01T10:00:00Z"'


def test_an_old_ttsr_interruption_loads_as_discard() -> None:
    old = StoredEvent(
        originator_id=uuid.uuid4(), originator_version=5,
        topic=get_topic(Session.TtsrInterrupted),
        state=b"{" + STAMP + b',"rules":["r"],"reminder":"x","generation":4,'
              b'"partial_text":"p","source":"text"}',
    )
    event = MsgspecMapper().to_domain_event(old)
    assert event.context_mode == "discard" and event.rules == ["r"]


def test_an_old_trigger_loads_as_turn_zero_not_deferred() -> None:
    old = StoredEvent(
        originator_id=uuid.uuid4(), originator_version=2, topic=get_topic(RuleLog.TtsrTriggered),
        state=b"{" + STAMP + b',"rules":["r"],"source":"text","offset":3,"generation":1}',
    )
    event = MsgspecMapper().to_domain_event(old)
    assert (event.turn, event.deferred, event.offset) == (0, False, 3)


def test_events_stored_under_the_old_top_level_topics_still_load() -> None:
    """Before Tether installed as the one package ``tether``, topics began ``events.``:
    a session stored then (its creation naming its class too) loads as it was."""
    session = Session(session_id="old1", name="before", workspace="/w", model="m",
                      channel="term")
    session.receive_user_message(text="hello", channel="term", user="alice")
    mapper = MsgspecMapper()
    stored = [mapper.to_stored_event(e) for e in session.collect_events()]
    assert all(s.topic.startswith("tether.events.session:Session.") for s in stored)
    legacy = [StoredEvent(originator_id=s.originator_id,
                          originator_version=s.originator_version,
                          topic=s.topic.removeprefix("tether."),
                          state=s.state.replace(b'"tether.events.', b'"events.'))
              for s in stored]
    assert legacy[0].topic == "events.session:Session.Created"
    assert b'"events.session:Session"' in legacy[0].state
    loaded = None
    for event in map(mapper.to_domain_event, legacy):
        loaded = event.mutate(loaded)
    assert isinstance(loaded, Session)
    assert (loaded.name, loaded.history[-1].content[0].text) == ("before", "hello")
