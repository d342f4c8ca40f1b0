"""Events stored before a field existed still load, with the field's default."""

from __future__ import annotations

import uuid

from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import get_topic

from events.mapper import MsgspecMapper
from events.session import Session
from events.ttsr import RuleLog

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
