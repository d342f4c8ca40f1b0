"""TTSR end to end: the monitor over NATS, the fake model, the real store.

Each test writes its rules into the rules folder the host is configured with, talks to a
session through the inbox, and checks what a user would notice: what was stored, what
the model was sent, what ran, what the channel showed.

The session's side of an interrupt (applied once per generation, a message sent during
the retry waiting its turn, another completion dropped) is tested on plain values in
tests/actors/session/test_rules.py and test_turns.py.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from tests.helpers import say, tether_cli
from tether.actors.ttsr.policy import TtsrSettings
from tether.actors.ttsr.rules import load_rules
from tether.actors.ttsr.whatif import what_if
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host
from tether.events.messages import TextBlock, ToolUseBlock
from tether.events.session import Session
from tether.events.ttsr import RuleLog


def rule(folder: Path, name: str, trigger: str, body: str = "Follow the rule.", **extra: Any
         ) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    front = {"name": name, "trigger": trigger, **extra}
    path = folder / f"{name}.md"
    path.write_text("---\n" + "\n".join(f"{k}: {json.dumps(v)}" for k, v in front.items())
                    + f"\n---\n{body}\n")
    return path



def texts(session: Session, role: str = "assistant") -> list[str]:
    return [b.text for t in session.history if t.role == role for b in t.content
            if isinstance(b, TextBlock)]


def names(host: Host, sid: str) -> list[str]:
    return [type(e).__name__ for e in host.app.session_events(sid)]


Env = tuple[Callable[[str], FakeLLM], Callable[..., Host], Callable[..., Any], Path]


def start(fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host],
          watch_channel: Callable[..., Any], script: str, **settings: Any) -> tuple[
              FakeLLM, Host, Any]:
    llm = fake_llm(script)
    host = make_host(llm, **settings)
    return llm, host, watch_channel(host, "test")


def test_discard_drops_the_partial_reply_and_keep_keeps_it(
    tmp_path: Path, fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    rules = tmp_path / "rules"
    rule(rules, "no-todo", "TODO", "Finish the work.")
    rule(rules, "no-hack", "HACK", "No hacks.", context_mode="keep")
    script = """
responses:
  - match: "first"
    chunk: 4
    blocks: [{text: "Sure, here is a TODO list"}]
  - match: "Finish the work"
    blocks: [{text: "Done properly."}]
  - match: "second"
    chunk: 4
    blocks: [{text: "A quick HACK will do"}]
  - match: "No hacks"
    blocks: [{text: "Done cleanly."}]
"""
    llm, host, channel = start(fake_llm, make_host, watch_channel, script)
    sid = say(host, "first task")
    channel.wait_for("completed")
    say(host, "second task", sid)
    channel.wait_for("completed")

    session = host.app.session(sid)
    assert session is not None
    kept = texts(session)
    # discard: the partial "TODO" reply is gone; keep: what had streamed before the abort
    # stays (the stream runs on while the interrupt crosses the bus).
    assert kept[0] == "Done properly." and kept[2] == "Done cleanly."
    assert kept[1].startswith("A quick HACK") and len(kept) == 3
    notices = [m.text for m in channel.seen if m.kind == "interrupted"]
    assert len(notices) == 2 and "no-todo" in notices[0] and "no-hack" in notices[1]
    assert not [m for m in channel.seen if m.kind in ("failed", "error")]
    # The retry's request carried the reminder block for the rule, with its file path.
    sent = json.dumps(llm.requests[1]["messages"])
    assert 'rule=\\"no-todo\\"' in sent and str(rules / "no-todo.md") in sent


def test_rules_matching_together_are_injected_in_one_reminder(
    tmp_path: Path, fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    rules = tmp_path / "rules"
    rule(rules, "no-todo", "TODO", "No TODOs.")
    rule(rules, "no-fixme", "FIXME", "No FIXMEs.")
    script = """
responses:
  - match: "go"
    chunk: 100
    blocks: [{text: "TODO and FIXME together"}]
  - match: "No TODOs"
    blocks: [{text: "Clean answer."}]
"""
    _, host, channel = start(fake_llm, make_host, watch_channel, script)
    sid = say(host, "go")
    channel.wait_for("completed")
    interrupted = [e for e in host.app.session_events(sid)
                   if type(e).__name__ == "TtsrInterrupted"]
    assert len(interrupted) == 1 and sorted(interrupted[0].rules) == ["no-fixme", "no-todo"]
    reminder = interrupted[0].reminder
    assert reminder.count("<system-interrupt") == 2 and "</system-interrupt>\n\n<system" in reminder
    log = host.app.rule_log(sid)
    assert log is not None and sorted(log.fired) == ["no-fixme", "no-todo"]


def test_a_path_glob_limits_a_rule_to_matching_files(
    tmp_path: Path, workspace: Path, fake_llm: Callable[[str], FakeLLM],
    make_host: Callable[..., Host], watch_channel: Callable[..., Any],
) -> None:
    rule(tmp_path / "rules", "no-print", r"print\(", "Use logging.",
         scope="tool:write_file(*.py)")
    script = """
responses:
  - match: "notes"
    blocks:
      - tool_use: {name: write_file, input: {path: notes.md, content: "print(x) is fine here"}}
  - match: "wrote"
    blocks: [{text: "Notes written."}]
  - match: "code"
    blocks:
      - tool_use: {name: write_file, input: {path: app.py, content: "print(x)"}}
  - match: "Use logging"
    blocks:
      - tool_use: {name: write_file, input: {path: app.py, content: "log.info(x)"}}
  - match: "wrote"
    blocks: [{text: "Code written."}]
"""
    _, host, channel = start(fake_llm, make_host, watch_channel, script)
    sid = say(host, "write the notes")
    channel.wait_for("completed")
    say(host, "now the code", sid)
    channel.wait_for("completed")
    assert (workspace / "notes.md").read_text() == "print(x) is fine here"
    assert (workspace / "app.py").read_text() == "log.info(x)"
    # The barrier stopped the violating call before it ran: it was never stored nor run.
    session = host.app.session(sid)
    assert session is not None
    written = [b.input["content"] for t in session.history for b in t.content
               if isinstance(b, ToolUseBlock)]
    assert written == ["print(x) is fine here", "log.info(x)"]
    assert names(host, sid).count("ToolCallStarted") == 2


def test_never_reminds_after_the_turn_without_interrupting(
    tmp_path: Path, fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    rule(tmp_path / "rules", "tone", "(?i)obviously", "Avoid condescension.", interrupt="never")
    script = """
responses:
  - match: "explain"
    blocks: [{text: "Obviously, it works."}]
  - match: "again"
    blocks: [{text: "It works because of the cache."}]
"""
    llm, host, channel = start(fake_llm, make_host, watch_channel, script)
    sid = say(host, "explain it")
    channel.wait_for("completed")
    assert not [m for m in channel.seen if m.kind == "interrupted"]
    assert "TtsrReminderAdded" in names(host, sid)
    session = host.app.session(sid)
    assert session is not None and texts(session)[0] == "Obviously, it works."
    say(host, "again please", sid)
    channel.wait_for("completed")
    assert "Avoid condescension." in json.dumps(llm.requests[-1]["messages"])
    log = host.app.rule_log(sid)
    assert log is not None and log.injections == [("tone", 0)]


def test_thinking_is_watched_by_thinking_rules(
    tmp_path: Path, fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    rule(tmp_path / "rules", "no-shortcuts", "skip the tests", "Never skip tests.",
         scope="thinking")
    script = """
responses:
  - match: "fix"
    blocks:
      - thinking: "I could just skip the tests to save time."
      - text: "Fixed."
  - match: "Never skip"
    blocks:
      - thinking: "Run the tests properly."
      - text: "Fixed, with the tests run."
"""
    _, host, channel = start(fake_llm, make_host, watch_channel, script)
    sid = say(host, "fix the bug")
    channel.wait_for("completed")
    session = host.app.session(sid)
    assert session is not None and texts(session) == ["Fixed, with the tests run."]
    assert "TtsrInterrupted" in names(host, sid)


def test_after_gap_and_disabled(
    tmp_path: Path, fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    rule(tmp_path / "rules", "no-todo", "TODO", "No TODOs.", repeat_mode="after-gap",
         repeat_gap=2)
    responses = []
    for turn in range(4):
        responses.append(f'  - match: "turn {turn} "\n    blocks: [{{text: "TODO {turn}"}}]')
        responses.append(f'  - match: "No TODOs"\n    blocks: [{{text: "clean {turn}"}}]')
    script = "responses:\n" + "\n".join(responses) + "\n"
    _, host, channel = start(fake_llm, make_host, watch_channel, script)
    sid = ""
    for turn in range(4):
        sid = say(host, f"turn {turn} please", sid)
        channel.wait_for("completed")
    log = host.app.rule_log(sid)
    assert log is not None and log.injections == [("no-todo", 0), ("no-todo", 2)]

    # enabled = false really turns matching off.
    off = msgspec.structs.replace(TtsrSettings(), enabled=False)
    llm2 = fake_llm('responses:\n  - blocks: [{text: "TODO: anything goes"}]\n')
    host2 = make_host(llm2, ttsr=off, namespace=host.subjects.namespace + "x",
                      state_dir=str(tmp_path / "state2"))
    channel2 = watch_channel(host2, "test")
    sid2 = say(host2, "hello")
    channel2.wait_for("completed")
    assert "TtsrInterrupted" not in names(host2, sid2)
    assert host2.app.rule_log(sid2) is None


def test_a_restart_keeps_once_and_triggers_are_on_the_bus(
    tmp_path: Path, make_settings: Callable[..., Any], fake_llm: Callable[[str], FakeLLM],
    make_host: Callable[..., Host], watch_channel: Callable[..., Any],
) -> None:
    rule(tmp_path / "rules", "no-todo", "TODO", "No TODOs.")
    script = """
responses:
  - match: "one"
    blocks: [{text: "TODO later"}]
  - match: "No TODOs"
    blocks: [{text: "Done now."}]
  - match: "two"
    blocks: [{text: "Another TODO, allowed now: the rule fired once already."}]
"""
    llm, host, channel = start(fake_llm, make_host, watch_channel, script)
    triggers: queue.Queue[dict[str, Any]] = queue.Queue()
    host.bus.subscribe(f"{host.subjects.namespace}.evt.rulelog.*.TtsrTriggered",
                       lambda m: triggers.put(json.loads(m.data)))
    sid = say(host, "task one")
    channel.wait_for("completed")
    seen = triggers.get(timeout=10)
    assert seen["aggregate_id"] == sid and seen["data"]["rules"] == ["no-todo"]
    assert seen["data"]["turn"] == 0 and seen["data"]["deferred"] is False
    host.stop()

    again = make_host(llm)  # same store and namespace, new process state
    channel2 = watch_channel(again, "test")
    say(again, "task two", sid)
    channel2.wait_for("completed")
    session = again.app.session(sid)
    assert session is not None
    assert texts(session)[-1].startswith("Another TODO")
    assert names(again, sid).count("TtsrInterrupted") == 1
    records = again.injections
    again.injections_follower.catch_up()
    assert [(r.session_id, r.rule, r.turn) for r in records.records(sid)] == [
        (sid, "no-todo", 0)
    ]


def test_what_if_over_a_stored_session(
    tmp_path: Path, fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    script = """
responses:
  - match: "plan"
    blocks:
      - text: "Step one: TODO. Step two: run it."
      - tool_use: {name: write_file, input: {path: plan.py, content: "print('plan')"}}
  - match: "wrote"
    blocks: [{text: "Planned, TODO remains."}]
"""
    _, host, channel = start(fake_llm, make_host, watch_channel, script)
    sid = say(host, "make a plan")
    channel.wait_for("completed")
    assert "TtsrInterrupted" not in names(host, sid)  # no rules were loaded

    folder = tmp_path / "whatif"
    rule(folder, "no-todo", "TODO", "No TODOs.")
    rule(folder, "no-print", r"print\(", "Use logging.", scope="tool:write_file(*.py)")
    hits = what_if(host.app.session_events(sid), load_rules([str(folder)]).rules)
    assert [(h.rule, h.source, h.action) for h in hits] == [
        ("no-todo", "text", "interrupt"),
        ("no-print", "tool:write_file", "interrupt"),
    ]
    assert hits[0].turn == 0 and hits[0].offset == len("Step one: TODO")


def test_rules_reload_when_their_files_change(
    tmp_path: Path, fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    script = """
responses:
  - match: "one"
    blocks: [{text: "Using a HACK."}]
  - match: "two"
    blocks: [{text: "Another HACK."}]
  - match: "No hacks"
    blocks: [{text: "Clean."}]
"""
    _, host, channel = start(fake_llm, make_host, watch_channel, script)
    sid = say(host, "task one")
    channel.wait_for("completed")
    rule(tmp_path / "rules", "no-hack", "HACK", "No hacks.")  # added between turns
    say(host, "task two", sid)
    channel.wait_for("completed")
    session = host.app.session(sid)
    assert session is not None and texts(session) == ["Using a HACK.", "Clean."]


def test_a_fork_at_a_node_keeps_only_the_rules_that_fired_before_it(
    tmp_path: Path, fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    from tether.actors.runtime import ask
    from tether.events.messages import Accepted, ForkSession, TreeQuery, TreeView

    rule(tmp_path / "rules", "no-todo", "TODO", "Finish the work.")
    script = """
responses:
  - match: "first"
    blocks: [{text: "All clear."}]
  - match: "second"
    chunk: 4
    blocks: [{text: "Sure, here is a TODO list"}]
  - match: "Finish the work"
    blocks: [{text: "Done properly."}]
"""
    _, host, channel = start(fake_llm, make_host, watch_channel, script)
    sid = say(host, "first task")
    channel.wait_for("completed")
    say(host, "second task", sid)
    channel.wait_for("completed")
    source = host.app.session(sid)
    assert source is not None and source.fired_rules == ["no-todo"]
    nodes = ask(host.bus, host.subjects.manager, TreeQuery(session_id=sid), TreeView).nodes
    before = next(n for n in nodes if n.text == "All clear.")
    after = next(n for n in nodes if n.text == "Done properly.")

    early = ask(host.bus, host.subjects.manager, ForkSession(
        session_id=sid, at_node=before.node_id), Accepted).session_id
    late = ask(host.bus, host.subjects.manager, ForkSession(
        session_id=sid, at_node=after.node_id), Accepted).session_id
    from tests.helpers import wait_until

    wait_until(lambda: None not in (host.app.session(early), host.app.session(late)),
               "both forks stored")
    forked_early, forked_late = host.app.session(early), host.app.session(late)
    assert forked_early is not None and forked_early.fired_rules == []
    early_log = host.app.rule_log(early)  # its monitor may have recorded the rules in force
    assert early_log is None or early_log.injections == []
    assert forked_late is not None and forked_late.fired_rules == ["no-todo"]
    copied = host.app.rule_log(late)
    assert copied is not None and [n for n, _ in copied.injections] == ["no-todo"]


def test_rules_test_replays_the_rules_the_session_had_from_anywhere(
    tmp_path: Path, fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host],
    watch_channel: Callable[..., Any], nats_url: str,
) -> None:
    rules = tmp_path / "rules"
    todo = rule(rules, "no-todo", "TODO", "No TODOs.")
    script = """
responses:
  - match: "first"
    blocks: [{text: "Left a TODO here."}]
  - match: "No TODOs"
    blocks: [{text: "Clean."}]
  - match: "second"
    blocks: [{text: "A HACK now."}]
"""
    _, host, channel = start(fake_llm, make_host, watch_channel, script)
    sid = say(host, "first task")
    channel.wait_for("completed")
    todo.unlink()  # the rules change between turns: the new set is recorded too
    hack = rule(rules, "no-hack", "HACK", "No hacks.", interrupt="never")
    say(host, "second task", sid)
    channel.wait_for("completed")
    rule_log = host.app.rule_log(sid)
    assert rule_log is not None
    assert [(s.path, s.origin, s.text) for s in rule_log.sources] == [
        (str(hack), "configured", hack.read_text())]
    recorded = [e for e in host.app.events.get(rule_log.id)
                if isinstance(e, RuleLog.RulesLoaded)]
    assert [[s.path for s in e.sources] for e in recorded] == [[str(todo)], [str(hack)]]

    hack.unlink()  # gone from disk; the command runs with none of the engine's folders
    tether = tether_cli(host, nats_url)
    done = tether("rules", "test", "--session", sid)
    assert done.returncode == 0, done.stderr
    assert f"1 rule(s) (in force for the session) over session {sid}" in done.stdout
    assert "no-hack" in done.stdout and "remind" in done.stdout
    given = tmp_path / "given"
    rule(given, "no-clean", "Clean", "Say more.")
    done = tether("rules", "test", "--session", sid, "--rules", str(given))
    assert f"1 rule(s) (from {given})" in done.stdout and "no-clean" in done.stdout


def test_the_recorded_rule_text_is_masked_like_everything_stored(
    tmp_path: Path, fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    key = "sk-ant-api03-" + "Q" * 48
    rule(tmp_path / "rules", "no-key", "NEVER", f"Never print {key}.")
    _, host, channel = start(fake_llm, make_host, watch_channel,
                             'responses:\n  - blocks: [{text: "Fine."}]\n')
    sid = say(host, "hello")
    channel.wait_for("completed")
    rule_log = host.app.rule_log(sid)
    assert rule_log is not None and len(rule_log.sources) == 1
    assert key not in rule_log.sources[0].text and "[REDACTED]" in rule_log.sources[0].text
    stored = host.app.recorder.select_notifications(start=1, limit=10_000)
    assert not any(key.encode() in n.state for n in stored)  # nowhere in the log
