"""The notification router: audiences, routes, catch-up, pacing, and restarts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.conftest import Engine
from tests.helpers import delivered, say, wait_until, wake_webhook
from tether.actors.chat.router import RouterSettings
from tether.actors.runtime import Tick, ask
from tether.adapters.host import Host
from tether.events.deliveries import Deliveries, deliveries_uuid
from tether.events.messages import Accepted, UserMessage, Watching, WatchSession


def watch(host: Host, sid: str, channel: str, foreground: bool = True) -> Watching:
    return ask(host.bus, host.subjects.router,
               WatchSession(session_id=sid, channel=channel, foreground=foreground), Watching)


def deliveries(host: Host, sid: str) -> list[tuple[str, str, str]]:
    return [(e.kind, e.route, e.outcome) for e in delivered(host.app, sid)]


def test_stream_text_is_gathered_and_flushed_when_the_message_ends(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    host, _, _ = engine("""
responses:
  - chunk: 3
    blocks: [{text: "Twelve little deltas make one stream message here."}]
""")
    channel = watch_channel(host, "test")
    say(host, "hello")
    channel.wait_for("completed")
    streamed = [m.text for m in channel.seen if m.kind == "stream"]
    # The first delta goes at once; the clock then stood still, so the rest was gathered
    # and went out when the message ended.
    assert streamed == ["Twe", "lve little deltas make one stream message here."]
    kinds = [m.kind for m in channel.seen]
    assert kinds.index("reply") > max(i for i, k in enumerate(kinds) if k == "stream")


def test_a_channel_in_the_background_catches_up_when_it_comes_back(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    host, _, _ = engine(notifications=RouterSettings(output_blocks=2))
    test = watch_channel(host, "test")
    web = watch_channel(host, "web")
    sid = say(host, "first")
    test.wait_for("completed")
    first_reply = next(m.text for m in test.seen if m.kind == "reply")
    assert watch(host, sid, "web").caught_up == 1  # it missed the first reply
    assert web.wait_for("catchup").text == first_reply
    say(host, "second", sid)
    web.wait_for("completed")  # a foreground watcher gets the play-by-play
    test.wait_for("completed")
    assert any(m.kind == "reply" for m in web.seen)

    watch(host, sid, "web", foreground=False)
    for text in ("third", "fourth", "fifth"):
        say(host, text, sid)
        test.wait_for("completed")
    back = watch(host, sid, "web")
    assert (back.caught_up, back.trimmed) == (2, 1)  # three missed, two still kept
    notes = [web.wait_for("catchup").text for _ in range(3)]
    assert notes[0] == "(1 earlier replies are no longer kept)"
    assert len(notes[1:]) == 2
    watched = host.app.load(deliveries_uuid(sid), Deliveries)
    assert watched is not None and watched.watchers == {"web": 5}


def test_endings_reach_the_origin_route_with_the_last_lines(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    host, _, _ = engine("""
responses:
  - blocks: [{text: "line one\\nline two\\nthe answer is 42"}]
""")
    telegram = watch_channel(host, "telegram")
    test = watch_channel(host, "test")
    sid = ask(host.bus, host.subjects.inbox, UserMessage(
        text="compute", channel="test", origin="telegram|acct|42"), Accepted).session_id
    test.wait_for("completed")
    done = telegram.wait_for("completed")
    assert (done.target, done.account) == ("42", "acct")
    assert done.text.startswith("compute: done:") and done.text.endswith(
        "line one\nline two\nthe answer is 42")
    # The play-by-play is for watchers only: the route got no reply or stream.
    assert [m.kind for m in telegram.seen] == ["completed"]
    wait_until(lambda: ("completed", "test,telegram|acct|42", "sent") in deliveries(host, sid),
               "the delivery record")


def test_an_unknown_route_wakes_the_webhook(
    engine: Callable[..., Engine],
) -> None:
    with wake_webhook() as (url, posted):
        host, _, _ = engine(notifications=RouterSettings(wake_webhook=url))
        sid = ask(host.bus, host.subjects.inbox, UserMessage(
            text="work alone", channel="test", origin="unknown"), Accepted).session_id
        wait_until(lambda: any("done:" in p["text"] for p in posted), "the webhook")
        wake = next(p for p in posted if "done:" in p["text"])
        assert wake["mode"] == "now" and wake["text"].startswith("work-alone: done:")
        wait_until(lambda: ("completed", "webhook", "sent") in deliveries(host, sid),
                   "the delivery record")


PUBLISH = """
responses:
  - match: "publish"
    blocks:
      - tool_use: {name: run_shell, input: {command: "git push origin main"}}
"""


def test_waiting_notices_go_to_a_background_origin_at_most_every_5_s(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    host, clock, _ = engine(PUBLISH, safety_net=15.0)
    test = watch_channel(host, "test")
    sid = say(host, "publish it")
    test.wait_for("approval")
    watch(host, sid, "test", foreground=False)  # the origin is not watching now
    clock.advance(20)
    host.manager.ref.ask(Tick(), timeout=10)  # the safety net fires: waiting for input
    waiting = test.wait_for("waiting")
    assert waiting.text.startswith("publish: waiting for input (nothing has happened")
    say(host, "no", sid)  # the turn ends at once: waiting again, within 5 s
    test.wait_for("completed")
    wait_until(lambda: ("waiting", "test", "skipped: debounced") in deliveries(host, sid),
               "the debounced notice's record")
    drain(test)
    assert [m.kind for m in test.seen].count("waiting") == 1


def test_a_long_turn_gets_one_reminder(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    host, clock, _ = engine(PUBLISH)
    test = watch_channel(host, "test")
    say(host, "publish it")
    test.wait_for("approval")
    clock.advance(599)
    host.router.ref.ask(Tick(), timeout=10)
    clock.advance(2)
    host.router.ref.ask(Tick(), timeout=10)
    reminder = test.wait_for("reminder")
    assert reminder.text == "publish has been running for over 10 minutes"
    clock.advance(600)
    host.router.ref.ask(Tick(), timeout=10)
    host.router.ref.ask(Tick(), timeout=10)
    say(host, "/status")  # a message after the ticks: everything they caused came first
    test.wait_for("status")
    drain(test)
    assert [m.kind for m in test.seen].count("reminder") == 1


def test_a_restart_in_a_burst_loses_nothing_and_sends_nothing_twice(
    engine: Callable[..., Engine], nats_url: str,
) -> None:
    from tests.conftest import ChannelWatcher
    from tether.adapters.nats_bus import NatsBus

    calls = "\n".join(
        "      - tool_use: {name: list_dir, input: {path: \".\"}}" for _ in range(12))
    script = f"""
responses:
  - match: "burst"
    blocks:
{calls}
  - blocks: [{{text: "All listed."}}]
"""
    host, _, _ = engine(script)
    bus = NatsBus(nats_url, name="watcher")  # a connector of its own, across both engines
    test = ChannelWatcher(bus, host.subjects.channel_out("test"))
    sid = say(host, "burst")
    test.wait_for("tool")
    host.router.stop()  # the router dies in the middle of the burst...
    wait_until(lambda: any(type(e).__name__ == "TurnCompleted"
                           for e in host.app.session_events(sid)), "the turn's end")
    host.stop()
    again, _, _ = engine(script, database_url=host.settings.database_url,
                      state_dir=host.settings.state_dir)  # ...and a new process takes over
    wait_until(lambda: not again.outbox.pending(), "every notice delivered")
    planned = again.outbox.rows("notice_outbox", {"session_id": sid})
    assert len(planned) > 25  # twelve calls: proposed and executed each, replies, endings
    sent = {e.notice for e in delivered(again.app, sid) if e.outcome == "sent"}
    skipped = [r["kind"] for r in planned if r["id"] not in sent]
    assert skipped == ["waiting"]  # the origin was watching: no need to say it waits
    expected = {int(r["position"]) * 1000 + int(r["n"]) for r in planned if r["id"] in sent}
    try:
        wait_until(lambda: {m.seq for m in list(test.seen) + drain(test)
                            if m.kind != "stream"} >= expected, "all notices on the channel")
    except AssertionError:
        got = {m.seq for m in test.seen if m.kind != "stream"}
        missing = [r for r in planned
                   if int(r["position"]) * 1000 + int(r["n"]) not in got]
        raise AssertionError(f"missing {missing[:5]}, extra {got - expected}") from None
    seqs = [m.seq for m in test.seen if m.kind != "stream"]
    test.close()
    bus.close()
    assert sorted(seqs) == sorted(expected)  # each exactly once
    assert seqs == sorted(seqs)  # and in order


def drain(watcher: Any) -> list[Any]:
    """Move what a watcher received into its ``seen`` list."""
    got = []
    while not watcher.messages.empty():
        message = watcher.messages.get()
        watcher.seen.append(message)
        got.append(message)
    return got


def test_an_outbox_made_over_an_older_log_does_not_replay_it(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    import os

    from tether.adapters.store import store_env

    host, _, _ = engine()
    test = watch_channel(host, "test")
    sid = say(host, "hello")
    test.wait_for("completed")
    settings = host.settings
    host.router.stop()  # so the kill at shutdown is never sent
    host.stop()
    os.remove(store_env(settings, "outbox")["SQLITE_DBNAME"])  # a store from before it

    again, _, _ = engine(database_url=settings.database_url, state_dir=settings.state_dir)
    later = watch_channel(again, "test")
    wait_until(lambda: not again.outbox.pending(), "the old notices settled")
    skipped = [d for d in deliveries(again, sid)
               if d[2] == "skipped: from before the outbox existed"]
    # Those delivered before are marked by their Delivered events; the rest (the kill at
    # shutdown, which no router was left to send) are history: recorded, never sent.
    assert [d[0] for d in skipped] == ["status"]
    say(again, "/status")  # anything sent after the restart comes after this
    later.wait_for("status")
    drain(later)
    assert [m.kind for m in later.seen] == ["status"]  # nothing old was sent again


def test_notices_go_out_as_the_session_saves_them_and_the_outbox_sends_none_again(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    """A session tells the router the notices of the events it just saved, so a chat
    hears of a turn without waiting for the outbox to read the store; the outbox plans
    the same notices later, and none is sent twice."""
    host, _, _ = engine("""
responses:
  - blocks: [{tool_use: {name: list_dir, input: {path: "."}}}]
  - blocks: [{text: "Nothing here."}]
""")
    host.outbox_follower.stop()  # the outbox reads nothing more of the log
    channel = watch_channel(host, "test")
    sid = say(host, "look around")
    channel.wait_for("completed")
    assert host.outbox.rows("notice_outbox", {"session_id": sid}) == []
    told = [(m.kind, m.text) for m in channel.seen if m.kind != "stream"]
    assert [kind for kind, _ in told] == ["tool", "tool", "reply", "completed"]

    # The outbox now reads the log: it plans the same notices, all of them sent already.
    from tether.actors.chat.router import OutboxAdvanced
    from tether.projections.follower import Follower

    again = Follower(host.app, name="again", position=host.outbox.position,
                     consume=host.outbox.consume)

    def all_delivered() -> bool:
        again.catch_up()
        rows = host.outbox.rows("notice_outbox", {"session_id": sid})
        return len(rows) >= 4 and not host.outbox.pending()

    wait_until(all_delivered, "the outbox marks every notice delivered")
    host.router.tell(OutboxAdvanced())
    say(host, "and again?", sid)  # a later turn's notices come after, none repeated
    channel.wait_for("completed")
    kinds = [m.kind for m in channel.seen if m.kind != "stream"]
    assert kinds.count("completed") == 2 and kinds.count("reply") == 2
    sent = [e.notice for e in delivered(host.app, sid) if e.outcome == "sent"]
    assert len(sent) == len(set(sent))  # each notice recorded sent once
