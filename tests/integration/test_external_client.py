"""Any program on the bus can drive a session with plain JSON: no Tether imports needed.

The client side of this test uses only nats-py and the json module.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import nats

from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host

SCRIPT = """
responses:
  - blocks:
      - text: "Hello from the engine, streamed in small pieces."
    chunk: 5
"""


async def _drive(url: str, ns: str) -> dict[str, Any]:
    nc = await nats.connect(url)
    stream: list[dict[str, Any]] = []
    channel: list[dict[str, Any]] = []
    done = asyncio.Event()

    async def on_stream(msg: Any) -> None:
        stream.append(json.loads(msg.data))

    async def on_channel(msg: Any) -> None:
        data = json.loads(msg.data)
        channel.append(data)
        if data["kind"] in ("completed", "failed"):
            done.set()

    await nc.subscribe(f"{ns}.session.*.stream", cb=on_stream)
    await nc.subscribe(f"{ns}.channel.mybot.out", cb=on_channel)
    reply = await nc.request(
        f"{ns}.inbox",
        json.dumps({"type": "user_message", "text": "hi there", "channel": "mybot"}).encode(),
        timeout=10,
    )
    accepted = json.loads(reply.data)
    await asyncio.wait_for(done.wait(), timeout=20)

    js = nc.jetstream()
    sid = accepted["session_id"]
    sub = await js.subscribe(f"{ns}.evt.session.{sid}.*", ordered_consumer=True)
    events = []
    while True:
        try:
            msg = await sub.next_msg(timeout=2)
        except nats.errors.TimeoutError:
            break
        body = json.loads(msg.data)
        events.append((msg.headers or {}, body))
        if body["event"] == "WaitingForInput":
            break
    await nc.close()
    return {"accepted": accepted, "stream": stream, "channel": channel, "events": events}


def test_plain_json_client(
    fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host], nats_url: str
) -> None:
    host = make_host(fake_llm(SCRIPT))
    seen = asyncio.run(_drive(nats_url, host.subjects.namespace))

    assert seen["accepted"]["type"] == "accepted"
    sid = seen["accepted"]["session_id"]
    texts = [d["text"] for d in seen["stream"] if d["kind"] == "text"]
    assert len(texts) > 3 and "".join(texts) == "Hello from the engine, streamed in small pieces."
    assert all(d["session_id"] == sid and d["type"] == "stream_delta" for d in seen["stream"])
    kinds = [d["kind"] for d in seen["channel"]]
    assert "stream" in kinds and "reply" in kinds and kinds[-1] == "completed"

    names = [body["event"] for _, body in seen["events"]]
    assert names[:3] == ["Created", "UserMessageReceived", "StatusChanged"]
    assert "AssistantMessageAppended" in names and "TurnCompleted" in names
    ids = [body["id"] for _, body in seen["events"]]
    assert ids == sorted(ids)
    for headers, body in seen["events"]:
        assert headers["Nats-Msg-Id"] == str(body["id"])
    user = next(b for _, b in seen["events"] if b["event"] == "UserMessageReceived")
    assert user["data"] == {"text": "hi there", "channel": "mybot", "user": "user"}


async def _watch(url: str, ns: str) -> dict[str, Any]:
    """A plain-JSON client that watches a session from a second channel: it catches up,
    goes to the background, and catches up again on what it missed."""
    nc = await nats.connect(url)
    got: list[dict[str, Any]] = []
    ended = asyncio.Queue[str]()

    async def on_origin(msg: Any) -> None:
        if json.loads(msg.data)["kind"] == "completed":
            await ended.put("completed")

    async def on_side(msg: Any) -> None:
        got.append(json.loads(msg.data))

    async def say(text: str, sid: str = "") -> str:
        body = {"type": "user_message", "text": text, "channel": "mybot", "session_id": sid}
        reply = await nc.request(f"{ns}.inbox", json.dumps(body).encode(), timeout=10)
        await asyncio.wait_for(ended.get(), timeout=20)
        return str(json.loads(reply.data)["session_id"])

    async def watch(sid: str, foreground: bool) -> dict[str, Any]:
        body = {"type": "watch_session", "session_id": sid, "channel": "side",
                "foreground": foreground}
        reply = await nc.request(f"{ns}.router", json.dumps(body).encode(), timeout=10)
        answer: dict[str, Any] = json.loads(reply.data)
        return answer

    await nc.subscribe(f"{ns}.channel.mybot.out", cb=on_origin)
    await nc.subscribe(f"{ns}.channel.side.out", cb=on_side)
    sid = await say("first")
    joined = await watch(sid, True)
    await say("second", sid)
    away = await watch(sid, False)
    during = len(got)
    await say("third", sid)
    await say("fourth", sid)
    quiet = len(got) == during
    back = await watch(sid, True)
    await asyncio.sleep(0.3)  # the catch-up messages were sent before the answer
    await nc.close()
    return {"joined": joined, "away": away, "back": back, "got": got, "quiet": quiet}


def test_a_plain_client_watches_in_the_foreground_and_catches_up(
    fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host], nats_url: str
) -> None:
    host = make_host(fake_llm("responses: []\n"))
    seen = asyncio.run(_watch(nats_url, host.subjects.namespace))
    assert seen["joined"]["type"] == "watching" and seen["joined"]["caught_up"] == 1
    assert seen["back"]["caught_up"] == 2 and seen["back"]["trimmed"] == 0
    assert seen["quiet"]  # in the background: nothing of the play-by-play
    kinds = [m["kind"] for m in seen["got"]]
    assert kinds[0] == "catchup" and kinds[-2:] == ["catchup", "catchup"]
    assert "stream" in kinds and "completed" in kinds  # live while in the foreground
