"""Subject names: one namespace prefix, valid tokens only, one events stream per namespace."""

from __future__ import annotations

import pytest

from tether.events.subjects import Subjects, check_token


def test_default_namespace_subjects() -> None:
    s = Subjects()
    assert s.inbox == "tether.inbox"
    assert s.manager == "tether.manager"
    assert s.gatekeeper == "tether.gatekeeper"
    assert s.deadletter == "tether.deadletter"
    assert s.session("abc") == "tether.session.abc"
    assert s.stream("abc") == "tether.session.abc.stream"
    assert s.all_streams == "tether.session.*.stream"
    assert s.ttsr("abc") == "tether.ttsr.abc"
    assert s.channel_out("web") == "tether.channel.web.out"
    assert s.event("session", "abc", "Created") == "tether.evt.session.abc.Created"
    assert s.all_events == "tether.evt.>"
    assert s.session_events("abc") == "tether.evt.session.abc.*"


def test_every_subject_carries_the_namespace_prefix() -> None:
    s = Subjects("team-b")
    names = [
        s.inbox, s.manager, s.gatekeeper, s.deadletter, s.session("x"), s.stream("x"),
        s.all_streams, s.ttsr("x"), s.channel_out("tg"), s.event("decision", "u", "Evaluated"),
        s.all_events, s.session_events("x"),
    ]
    assert all(n.startswith("team-b.") for n in names)
    assert not any(n.startswith("tether.") for n in names)
    # two deployments never share a subject
    other = Subjects("team-c")
    assert other.inbox != s.inbox and other.all_events != s.all_events


@pytest.mark.parametrize("bad", ["", "a.b", "a b", "a*", ">", "tether.x", "ü", "a/b"])
def test_invalid_namespace_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="namespace"):
        Subjects(bad)


@pytest.mark.parametrize("bad", ["", "a.b", "*", ">", "a b", "a\tb", "x\ny"])
def test_invalid_session_id_and_channel_are_refused(bad: str) -> None:
    s = Subjects()
    with pytest.raises(ValueError, match="session id"):
        s.session(bad)
    with pytest.raises(ValueError, match="session id"):
        s.stream(bad)
    with pytest.raises(ValueError, match="session id"):
        s.ttsr(bad)
    with pytest.raises(ValueError, match="channel"):
        s.channel_out(bad)


def test_check_token_returns_valid_tokens_and_names_the_bad_one() -> None:
    assert check_token("Ab_9-z", "thing") == "Ab_9-z"
    with pytest.raises(ValueError) as info:
        check_token("a.b", "thing")
    assert "thing" in str(info.value) and "'a.b'" in str(info.value)


@pytest.mark.parametrize(
    ("namespace", "stream"),
    [
        ("tether", "TETHER_EVENTS"),
        ("staging", "TETHER_EVENTS_STAGING"),
        ("team-b", "TETHER_EVENTS_TEAM_B"),
        ("t1a2", "TETHER_EVENTS_T1A2"),
    ],
)
def test_events_stream_name(namespace: str, stream: str) -> None:
    assert Subjects(namespace).events_stream == stream


def test_events_stream_names_are_distinct_per_namespace() -> None:
    names = {Subjects(ns).events_stream for ns in ("tether", "a", "b", "a-b")}
    assert len(names) == 4


@pytest.mark.parametrize("bad", ["abc\n"])
def test_trailing_newline_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        check_token(bad, "session id")
    with pytest.raises(ValueError):
        Subjects().session(bad)
    with pytest.raises(ValueError):
        Subjects(bad)


@pytest.mark.parametrize("bad", ["*", "a.b", ">"])
def test_session_events_refuses_invalid_session_id(bad: str) -> None:
    with pytest.raises(ValueError, match="session id"):
        Subjects().session_events(bad)
