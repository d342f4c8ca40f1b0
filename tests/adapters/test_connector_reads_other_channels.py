"""A known gap, not built yet (docs/architecture.md, "Not built yet": confidential
channels): on a bus with per-principal connectors, one principal reads every other
principal's chat output. Kept as a strict expected failure, so it is seen the day
channels are bound to principals.

DESIGN.md, the trust boundary, line 4: "a connector can publish user messages and read
its channel, nothing else". The connector role may subscribe ``<ns>.channel.*.out``:
every channel's stream text, replies, tool lines (with their inputs) and approval
questions (the whole tool input), whoever's session it is. Channel names are chosen by the
connector, not bound to its principal.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from tests.helpers import wait_until
from tether.actors.runtime import ask
from tether.adapters.anthropic_provider import AnthropicProvider
from tether.adapters.config import Settings
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host
from tether.adapters.nats_auth import connector_auth, load_credentials, server_config
from tether.adapters.nats_bus import NatsBus
from tether.adapters.nats_server import EmbeddedNats
from tether.events.messages import Accepted, UserMessage
from tether.events.subjects import Subjects


@pytest.mark.xfail(strict=True, reason="channels are not bound to principals yet: a connector "
                   "may subscribe <ns>.channel.*.out (docs: Not built yet, confidential "
                   "channels)")
def test_a_connector_does_not_read_another_principal_s_channel(
        tmp_path: Path, namespace: str, make_settings: Callable[..., Settings],
        fake_llm: Callable[[str], FakeLLM]) -> None:
    subjects = Subjects(namespace)
    credentials = load_credentials(str(tmp_path / "nats-state"), ["alice", "mallory"])
    with EmbeddedNats(tmp_path / "nats-state" / "nats",
                      config=server_config(credentials, subjects)) as server:
        llm = fake_llm('responses:\n  - blocks: [{text: "the merger closes on Friday"}]\n')
        settings = make_settings(nats_url=server.url, anthropic_base_url=llm.base_url,
                                 nats_user=credentials.engine.user,
                                 nats_password=credentials.engine.password)
        host = Host(settings, provider=AnthropicProvider(None, llm.base_url)).start()
        alice = NatsBus(server.url, name="alice", auth=connector_auth(credentials, "alice"))
        mallory = NatsBus(server.url, name="mallory",
                          auth=connector_auth(credentials, "mallory"))
        try:
            seen: queue.Queue[bytes] = queue.Queue()
            mine: queue.Queue[bytes] = queue.Queue()
            mallory.subscribe(f"{namespace}.channel.*.out", lambda m: seen.put(m.data))
            alice.subscribe(subjects.channel_out("alice-term"), lambda m: mine.put(m.data))
            ask(alice, subjects.inbox_for("alice"), UserMessage(
                text="what is the date?", channel="alice-term"), Accepted, timeout=10)
            wait_until(lambda: any(b'"completed"' in d for d in list(mine.queue)),
                       "alice's turn ends", timeout=20)
            leaked = [msgspec.json.decode(d) for d in list(seen.queue)]
            assert not any("merger" in str(m.get("text")) for m in leaked), leaked[:2]
        finally:
            alice.close()
            mallory.close()
            host.stop()
