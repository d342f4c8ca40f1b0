"""Any program on the bus can drive a session with plain JSON: no Tether imports needed.

The client side of this test uses only nats-py and the json module.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import nats

from adapters.fake_llm import FakeLLM
from adapters.host import Host

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
