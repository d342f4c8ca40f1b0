"""Small helpers shared by the tests (fixtures live in conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable

from actors.runtime import ask
from adapters.host import Host
from events.messages import Accepted, UserMessage


def say(host: Host, text: str, session_id: str = "", *, channel: str = "test",
        user: str = "user") -> str:
    """Send a user message to the inbox the way a connector does; return the session id
    the engine answered with (once the message is stored)."""
    accepted = ask(
        host.bus,
        host.subjects.inbox,
        UserMessage(text=text, channel=channel, session_id=session_id, user=user),
        Accepted,
        timeout=10,
    )
    return accepted.session_id


def wait_until(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Wait for an effect another actor produces asynchronously (``check`` turns true);
    fail naming ``what`` if it does not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def tether_cli(host: Host, nats_url: str) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``tether ARGS...`` in a subprocess against ``host`` (its bus, namespace, state
    and store), as a user at another terminal would."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "ANTHROPIC_"))}
    env.update({"TETHER_NATS_URL": nats_url, "TETHER_NAMESPACE": host.subjects.namespace,
                "TETHER_STATE_DIR": host.settings.state_dir,
                "TETHER_DATABASE_URL": host.settings.database_url})

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "adapters.cli", *args], env=env,
                              capture_output=True, text=True, timeout=60)

    return run
